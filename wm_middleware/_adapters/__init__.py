"""One module per client family, and the table that ``instrument()`` applies and reverses.

An adapter module exposes:

* ``patches(runtime) -> list[Patch]``: wrapt wrappers closing over ``runtime``, a function that
  returns the :class:`~wm_middleware._runtime.Runtime` a call runs on; a wrapper calls it for
  each call it handles, and the first such call makes the runtime (see :class:`PatchTable`). It
  must not raise when the library is missing or of an unknown version: it returns only what it
  recognises;
* ``wrap(client, runtime) -> object | None``: a client-like copy whose reads go through
  ``runtime`` and whose writes invalidate, leaving ``client`` untouched; ``None`` when ``client``
  is not of this family.

What each route of the Supermemory API is (read, write, pass-through, what it scopes, its
query field, record id and semconv operation) is stated once, in :mod:`wm_middleware._api.routes`,
and tenants and scopes in :mod:`wm_middleware._api.tenancy`; every adapter reads them there.

Applied by every ``instrument()`` when the application imports the library (at once if it is
imported already; otherwise by a post-import hook of :mod:`.import_hooks`, so ``instrument()``
imports nothing, not even wrapt):

* ``sdk3``: ``supermemory._base_client.(Sync|Async)APIClient.request``;
* ``sdk5``: ``supermemory.client.(Async)Supermemory.search|profile|list`` and
  ``core.http_client.(Async)HttpClient.request``;
* ``openai_middleware``: the supermemory-openai-sdk middleware's profile search.

Applied only by ``instrument(httpx=True)``:

* ``httpx_transport``: ``httpx.Client.send`` and ``httpx.AsyncClient.send``.

Adding a client family is one new module and one line in :data:`ADAPTERS`. :class:`PatchTable`
applies the table and reverses it, pending hooks included. What the adapters' wrappers share
(``run``, ``Bypass``, ``timeout_key``, ``write_of``) is in :mod:`.calls`, imported with
the first adapter: this module is what ``instrument()`` imports, and needs neither the runtime
nor wrapt.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterable
from types import ModuleType

from .. import _logs
from . import import_hooks

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from typing import Any

    from .._runtime import Runtime

    Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
    """A wrapt wrapper: ``wrapper(wrapped, instance, args, kwargs)``."""

__all__ = ["ADAPTERS", "Adapter", "Patch", "PatchTable"]


class Patch:
    """Wrap ``module``'s attribute ``name`` (dotted within the module) with ``wrapper``."""

    __slots__ = ("module", "name", "wrapper")

    def __init__(self, module: str, name: str, wrapper: Wrapper) -> None:
        self.module = module
        self.name = name
        self.wrapper = wrapper

    def __repr__(self) -> str:
        return f"Patch({self.module!r}, {self.name!r})"


class Adapter:
    """An adapter module, the library whose import makes it apply, and its ``instrument()`` flag.

    Neither the adapter nor the library is imported before the application imports the library.
    """

    __slots__ = ("flag", "library", "module")

    def __init__(self, module: str, library: str, flag: str | None = None) -> None:
        self.module = module
        self.library = library
        self.flag = flag

    def __repr__(self) -> str:
        return f"Adapter({self.module!r}, {self.library!r})"


# In the order they are applied.
ADAPTERS: tuple[Adapter, ...] = (
    Adapter("wm_middleware._adapters.sdk3", "supermemory"),
    Adapter("wm_middleware._adapters.sdk5", "supermemory"),
    Adapter("wm_middleware._adapters.openai_middleware", "supermemory_openai.middleware"),
    Adapter("wm_middleware._adapters.httpx_transport", "httpx", "httpx"),
)


# -- applying the table -------------------------------------------------------------------------
class _Applied:
    """One patch in place: ``owner.__dict__[attribute]`` was ``original`` and is now ``proxy``."""

    __slots__ = ("attribute", "original", "owner", "proxy")

    def __init__(self, owner: Any, attribute: str, original: Any, proxy: Any) -> None:
        self.owner = owner  # the class or module holding the attribute
        self.attribute = attribute
        self.original = original
        self.proxy = proxy


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
    ``runtime`` goes to every adapter's ``patches``: it makes the runtime at its first call and
    returns that one after. Until a client library is imported nothing needs wrapt; until a
    patched call needs the runtime, nothing needs the runtime's telemetry and freshness modules
    nor OpenTelemetry's API (so an application that imports the SDK first does not pay for them
    when it calls ``instrument()``). ``lock`` is the instrumentor's: a hook takes it, so a
    library imported during ``revert`` is patched before it or not at all.
    """

    def __init__(self, runtime: Callable[[], Runtime], lock: threading.RLock) -> None:
        self._runtime = runtime
        self._lock = lock
        self._applied: list[_Applied] = []
        self._pending: dict[str, list[Adapter]] = {}
        self._active = True

    def relock(self, lock: threading.RLock) -> None:
        """Take the instrumentor's new lock (it makes one in a forked child)."""
        self._lock = lock

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
                # Fires at once, in this thread, if the library was imported meanwhile.
                import_hooks.when_imported(library, self._imported)

    def revert(self) -> None:
        with self._lock:
            self._active = False
            for library in self._pending:
                import_hooks.discard(library, self._imported)
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
            patches = list(importlib.import_module(adapter.module).patches(self._runtime))
        except Exception:  # an adapter that cannot load must not stop the others
            _logs.logger().warning(
                "wm_middleware: %s not instrumented", adapter.module, exc_info=True
            )
            return
        for patch in patches:
            self._patch(patch)

    def _patch(self, patch: Patch) -> None:
        import wrapt  # here, not at start-up: it is needed once a client library is imported

        try:
            owner, attribute = _resolve(patch)
            original = vars(owner).get(attribute, getattr(owner, attribute))
            wrapt.wrap_function_wrapper(owner, attribute, patch.wrapper)
            proxy = vars(owner)[attribute]
        except Exception:
            _logs.logger().warning(
                "wm_middleware: could not patch %s.%s", patch.module, patch.name, exc_info=True
            )
            return
        self._applied.append(_Applied(owner, attribute, original, proxy))
        _logs.debug("wm_middleware: patched %s.%s", patch.module, patch.name)


def _put_back(applied: _Applied) -> None:
    current = vars(applied.owner).get(applied.attribute)
    if current is applied.proxy:
        setattr(applied.owner, applied.attribute, applied.original)
    else:
        _logs.logger().warning(
            "wm_middleware: %s.%s was re-patched by someone else; left as it is",
            getattr(applied.owner, "__qualname__", applied.owner),
            applied.attribute,
        )
