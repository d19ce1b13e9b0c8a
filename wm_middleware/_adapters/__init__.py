"""One module per client family, and the table that ``instrument()`` applies and reverses.

An adapter module exposes:

* ``patches(runtime) -> list[Patch]``: wrapt wrappers closing over a
  :class:`~wm_middleware._runtime.Runtime`. It must not raise when the library is missing or of
  an unknown version: it returns only what it recognises;
* ``wrap(client, runtime) -> object | None``: a client-like copy whose reads go through
  ``runtime`` and whose writes invalidate, leaving ``client`` untouched; ``None`` when ``client``
  is not of this family.

What each route of the Supermemory API is (read, write, pass-through, and what it scopes) is
stated once, in :mod:`._routes`; every adapter classifies its calls there.

Applied by every ``instrument()`` when the application imports the library (at once if it is
imported already; otherwise by a post-import hook, so ``instrument()`` imports nothing):

* ``sdk3``: ``supermemory._base_client.(Sync|Async)APIClient.request``;
* ``sdk5``: ``supermemory.client.(Async)Supermemory.search|profile|list`` and
  ``core.http_client.(Async)HttpClient.request``;
* ``openai_middleware``: the supermemory-openai-sdk middleware's profile search.

Applied only by ``instrument(httpx=True)``:

* ``httpx_transport``: ``httpx.Client.send`` and ``httpx.AsyncClient.send``.

Adding a client family is one new module and one line in :data:`ADAPTERS`. :class:`PatchTable`
applies the table and reverses it, pending hooks included.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import wrapt

from .._runtime import Read, Runtime, Write

__all__ = ["ADAPTERS", "Adapter", "Bypass", "Patch", "PatchTable", "run"]

logger = logging.getLogger("wm_middleware")

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Patch:
    """Wrap ``module``'s attribute ``name`` (dotted within the module) with ``wrapper``."""

    module: str
    name: str
    wrapper: Wrapper


@dataclass(frozen=True, slots=True)
class Adapter:
    """An adapter module, the library whose import makes it apply, and its ``instrument()`` flag.

    Neither the adapter nor the library is imported before the application imports the library.
    """

    module: str
    library: str
    flag: str | None = None


# In the order they are applied.
ADAPTERS: tuple[Adapter, ...] = (
    Adapter("wm_middleware._adapters.sdk3", "supermemory"),
    Adapter("wm_middleware._adapters.sdk5", "supermemory"),
    Adapter("wm_middleware._adapters.openai_middleware", "supermemory_openai.middleware"),
    Adapter("wm_middleware._adapters.httpx_transport", "httpx", "httpx"),
)


@dataclass(frozen=True, slots=True)
class Bypass:
    """A read that is observed but never cached (raw or streaming response, odd options)."""

    operation: str
    server: tuple[str, int | None]
    query: str | None


def run(
    runtime: Runtime, action: Read | Write | Bypass, call: Callable[[], Any], is_async: bool
) -> Any:
    """Hand ``call`` to ``runtime`` as ``action`` describes it.

    The one decision every sync/async pair of wrappers shares: an async wrapper gets the
    awaitable back and returns it for its caller to await.
    """
    if isinstance(action, Read):
        return runtime.aread(action, call) if is_async else runtime.read(action, call)
    if isinstance(action, Write):
        return runtime.awrite(action, call) if is_async else runtime.write(action, call)
    bypass = runtime.abypass if is_async else runtime.bypass
    return bypass(action.operation, action.server, call, action.query)


# -- applying the table -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Applied:
    owner: Any  # the class or module holding the attribute
    attribute: str
    original: Any  # what ``owner.__dict__[attribute]`` was before
    proxy: Any  # what we put there


# library -> the callbacks waiting for its import. wrapt fires a post-import hook once and keeps
# no way to remove one, so it holds a single dispatcher per library and import; the waiters are
# ours to add and remove.
_WAITING: dict[str, list[Callable[[ModuleType], None]]] = {}
_WAITING_LOCK = threading.Lock()


def _dispatch(module: ModuleType) -> None:
    with _WAITING_LOCK:
        waiting = _WAITING.pop(module.__name__, [])
    for callback in waiting:
        try:
            callback(module)
        except Exception:  # a failing hook would fail the application's import
            logger.warning("wm_middleware: could not instrument %s", module.__name__, exc_info=True)


def _wait_for(library: str, callback: Callable[[ModuleType], None]) -> None:
    with _WAITING_LOCK:
        waiting = _WAITING.setdefault(library, [])
        first = not waiting
        waiting.append(callback)
    if first:  # fires at once, in this thread, if the library was imported meanwhile
        wrapt.register_post_import_hook(_dispatch, library)


def _stop_waiting(library: str, callback: Callable[[ModuleType], None]) -> None:
    with _WAITING_LOCK:
        waiting = _WAITING.get(library, [])
        if callback in waiting:
            waiting.remove(callback)


def _resolve(patch: Patch) -> tuple[Any, str]:
    owner: Any = importlib.import_module(patch.module)
    *parents, attribute = patch.name.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, attribute


class PatchTable:
    """The patches of one ``instrument()``: applied, pending an import, and their reversal.

    :meth:`apply` patches every adapter whose library is imported and hooks the import of the
    others; :meth:`revert` puts every original back by identity and drops the pending hooks.
    ``lock`` is the instrumentor's: a hook takes it, so a library imported during ``revert`` is
    patched before it or not at all.
    """

    def __init__(self, runtime: Runtime, lock: threading.RLock) -> None:
        self.runtime = runtime
        self._lock = lock
        self._applied: list[_Applied] = []
        self._pending: dict[str, list[Adapter]] = {}
        self._active = True

    @property
    def pending(self) -> frozenset[str]:
        """The libraries this table waits for."""
        return frozenset(self._pending)

    @property
    def applied(self) -> int:
        """How many attributes are patched now."""
        return len(self._applied)

    def apply(self, adapters: Iterable[Adapter], flags: frozenset[str]) -> None:
        with self._lock:
            for adapter in adapters:
                if adapter.flag is not None and adapter.flag not in flags:
                    continue
                if adapter.library in sys.modules:
                    self._load(adapter)
                else:
                    self._pending.setdefault(adapter.library, []).append(adapter)
            for library in list(self._pending):
                _wait_for(library, self._imported)

    def revert(self) -> None:
        with self._lock:
            self._active = False
            for library in self._pending:
                _stop_waiting(library, self._imported)
            self._pending.clear()
            for applied in reversed(self._applied):
                _put_back(applied)
            self._applied.clear()

    def _imported(self, module: ModuleType) -> None:
        """A post-import hook: never raises, since that would fail the application's import.

        It runs in the importing thread, which still holds the import lock of ``module``, and
        takes the instrumentor's lock. One race remains: an ``instrument()`` in another thread
        that, holding that lock, imports a module of this library before it has finished its
        first import would wait for this thread while this thread waits for it. It needs a first
        import of the library racing ``instrument()`` itself; import the library first or call
        ``instrument()`` before starting threads.
        """
        if not self._active:  # reverted: no need to wait for the lock
            return
        with self._lock:
            if not self._active:
                return
            for adapter in self._pending.pop(module.__name__, []):
                self._load(adapter)

    def _load(self, adapter: Adapter) -> None:
        try:
            patches = list(importlib.import_module(adapter.module).patches(self.runtime))
        except Exception:  # an adapter that cannot load must not stop the others
            logger.warning("wm_middleware: %s not instrumented", adapter.module, exc_info=True)
            return
        for patch in patches:
            self._patch(patch)

    def _patch(self, patch: Patch) -> None:
        try:
            owner, attribute = _resolve(patch)
            original = vars(owner).get(attribute, getattr(owner, attribute))
            wrapt.wrap_function_wrapper(owner, attribute, patch.wrapper)
            proxy = vars(owner)[attribute]
        except Exception:
            logger.warning(
                "wm_middleware: could not patch %s.%s", patch.module, patch.name, exc_info=True
            )
            return
        self._applied.append(_Applied(owner, attribute, original, proxy))
        logger.debug("wm_middleware: patched %s.%s", patch.module, patch.name)


def _put_back(applied: _Applied) -> None:
    current = vars(applied.owner).get(applied.attribute)
    if current is applied.proxy:
        setattr(applied.owner, applied.attribute, applied.original)
    else:
        logger.warning(
            "wm_middleware: %s.%s was re-patched by someone else; left as it is",
            getattr(applied.owner, "__qualname__", applied.owner),
            applied.attribute,
        )
