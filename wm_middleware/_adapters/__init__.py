"""One module per client family, and the table that ``instrument()`` applies and reverses.

An adapter module exposes:

* ``patches(runtime) -> list[Patch]``: wrapt wrappers closing over a
  :class:`~wm_middleware._runtime.Runtime`. It must not raise when the library is missing or of
  an unknown version: it returns only what it recognises;
* ``wrap(client, runtime) -> object | None``: a client-like copy whose reads go through
  ``runtime`` and whose writes invalidate, leaving ``client`` untouched; ``None`` when ``client``
  is not of this family.

What each route of the Supermemory API is (read, write, pass-through, what it scopes, its
query field, record id and semconv operation) is stated once, in :mod:`wm_middleware._api.routes`,
and tenants and scopes in :mod:`wm_middleware._api.tenancy`; every adapter reads them there.

Applied by every ``instrument()`` when the library is installed:

* ``sdk3``: ``supermemory._base_client.(Sync|Async)APIClient.request``;
* ``sdk5``: ``supermemory.client.(Async)Supermemory.search|profile|list`` and
  ``core.http_client.(Async)HttpClient.request``;
* ``openai_middleware``: the supermemory-openai-sdk middleware's profile search.

Applied only by ``instrument(httpx=True)``:

* ``httpx_transport``: ``httpx.Client.send`` and ``httpx.AsyncClient.send``.

Adding a client family is one new module and one line in :data:`ADAPTERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from .._runtime import Read, Runtime, Write

__all__ = ["ADAPTERS", "Bypass", "Patch", "asyncio_running", "run", "timeout_key"]

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Patch:
    """Wrap ``module``'s attribute ``name`` (dotted within the module) with ``wrapper``."""

    module: str
    name: str
    wrapper: Wrapper


# (import path of the adapter module, the ``instrument()`` flag it needs or None), in the order
# they are applied.
ADAPTERS: tuple[tuple[str, str | None], ...] = (
    ("wm_middleware._adapters.sdk3", None),
    ("wm_middleware._adapters.sdk5", None),
    ("wm_middleware._adapters.openai_middleware", None),
    ("wm_middleware._adapters.httpx_transport", "httpx"),
)


@dataclass(frozen=True, slots=True)
class Bypass:
    """A read that is observed but never cached (raw or streaming response, odd options)."""

    operation: str
    server: tuple[str, int | None]
    query: str | None


def timeout_key(timeout: object) -> Hashable:
    """A timeout (or a retry count) as flight-key material: ``httpx.Timeout`` by its parts.

    ``httpx.Timeout`` compares by value but is not hashable; anything else goes by ``repr``.
    """
    if hasattr(timeout, "read") and hasattr(timeout, "connect"):
        return tuple(getattr(timeout, name, None) for name in ("connect", "read", "write", "pool"))
    return repr(timeout)


def asyncio_running() -> bool:
    """True when the calling coroutine runs under asyncio, the only loop the memory serves.

    The 3.x async client runs on anyio, so also under trio; there a read is observed and passed
    through (never cached) rather than reach code that needs an asyncio loop. ``sniffio`` (which
    anyio and httpx bring) names the library; without it, a running asyncio loop decides.
    """
    try:
        import sniffio
    except ImportError:
        import asyncio

        return asyncio.events._get_running_loop() is not None
    try:
        return sniffio.current_async_library() == "asyncio"
    except sniffio.AsyncLibraryNotFoundError:
        return False


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
