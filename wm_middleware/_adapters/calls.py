"""What the adapters' wrappers share: handing a call to the runtime, and telling calls apart.

Imported with the first adapter, not by ``instrument()``: it needs the runtime's vocabulary.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .._api.routes import Match, attempted, creates_only, record_id_of
from .._calls import Follow, Read, Write
from .._runtime import Runtime

__all__ = ["Bypass", "ClientVia", "memo_key_of", "remember", "run", "timeout_key", "write_of"]


@dataclass(frozen=True, slots=True)
class Bypass:
    """A read that is observed but never cached (raw or streaming response, odd options)."""

    operation: str
    server: tuple[str, int | None]
    query: str | None


def write_of(
    found: Match,
    scopes: tuple[Hashable, ...],
    server: tuple[str, int | None],
    body: object,
    follow: Callable[[], Follow | None],
    operation: str | None = None,
) -> Write:
    """The :class:`Write` of a call ``found`` at a write route: the row states its facts.

    ``operation``: the SDK method's name when the route's is not it (3.x, by response type);
    ``follow`` is called only for a write that indexes something (not for a delete).
    """
    route = found.route
    assert route.semconv is not None, route  # every write row names its semconv operation
    return Write(
        route.operation if operation is None else operation,
        scopes,
        server,
        route.deletes,
        attempted(found, body),
        operation_name=route.semconv,
        record_id=record_id_of(found, body),
        follow=None if route.deletes else follow(),
        creates=creates_only(found, body),
    )


class ClientVia(ABC):
    """A :class:`~wm_middleware._calls.Via`: the writing client, held weakly; each adapter says
    how a GET goes through its kind of client (:meth:`_send`, :meth:`_asend`) and when it is
    closed (:meth:`_open`). An async client's asyncio loop is the one its write ran on (held
    weakly too): a thread that is not one of anyio's asks that loop to make the request."""

    __slots__ = ("__weakref__", "_client", "_loop", "asynchronous", "timeout")

    def __init__(self, client: object, asynchronous: bool, timeout: object) -> None:
        self._client = weakref.ref(client)
        self.asynchronous = asynchronous
        self.timeout = timeout
        loop = _running_loop() if asynchronous else None
        self._loop = None if loop is None else weakref.ref(loop)

    @property
    def alive(self) -> bool:
        client = self._client()
        return client is not None and self._open(client)

    def get(self, path: str, params: Mapping[str, str], within: float) -> Any:
        if not self.asynchronous:
            return self._send(self._live(), path, params, within)
        import anyio.from_thread

        try:  # a worker thread of anyio's (asyncio or trio): its loop makes the request
            return anyio.from_thread.run(self.aget, path, params, within)
        except getattr(anyio, "NoEventLoopError", RuntimeError):  # anyio 3: a RuntimeError
            pass
        loop = None if self._loop is None else self._loop()
        if loop is None or not loop.is_running() or loop is _running_loop():
            raise LookupError("no loop to make an async client's request on") from None
        import asyncio

        made = asyncio.run_coroutine_threadsafe(self.aget(path, params, within), loop)
        try:  # the request's own timeout bounds it; the margin is for a busy loop
            return made.result(within + _LOOP_MARGIN)
        except TimeoutError:
            made.cancel()
            raise

    async def aget(self, path: str, params: Mapping[str, str], within: float) -> Any:
        return await self._asend(self._live(), path, params, within)

    def _live(self) -> Any:
        client = self._client()
        if client is None or not self._open(client):
            raise LookupError("the client that made the write is closed or gone")
        return client

    @abstractmethod
    def _open(self, client: Any) -> bool: ...

    @abstractmethod
    def _send(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any: ...

    @abstractmethod
    async def _asend(
        self, client: Any, path: str, params: Mapping[str, str], within: float
    ) -> Any: ...


_LOOP_MARGIN: Final = 1.0  # seconds a thread waits beyond a request's timeout for its loop


def _running_loop() -> Any:
    """The asyncio loop running in this thread, or ``None``."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def timeout_key(timeout: object) -> Hashable:
    """A timeout (or a retry count) as flight-key material: ``httpx.Timeout`` by its parts.

    ``httpx.Timeout`` compares by value but is not hashable; anything else goes by ``repr``.
    """
    if hasattr(timeout, "read") and hasattr(timeout, "connect"):
        return tuple(getattr(timeout, name, None) for name in ("connect", "read", "write", "pool"))
    return repr(timeout)


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


# -- the memo of a client's plain reads: a repeat skips route matching and key building ---------
MEMO_ENTRIES: Final = 256  # per client
_MEMO_TEXT: Final = 2048  # characters of request text a memoised request may carry
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def memo_key_of(head: tuple[Hashable, ...], data: object) -> Hashable | None:
    """An exact, type-aware key of ``head`` (what names the call) and a small flat ``data`` dict
    (its body or arguments); ``None`` for any other ``data``.

    Types are part of it: ``1``, ``1.0`` and ``True`` are equal in Python, not on the wire.
    """
    if type(data) is not dict:
        return None
    values = tuple(data.values())
    kinds = tuple(map(type, values))
    if _SCALARS.issuperset(kinds):  # the common body: str, int, float, bool and None only
        if kinds.count(str) == len(kinds):
            text = sum(map(len, values))
        else:
            text = sum(len(value) for value in values if type(value) is str)
        if text > _MEMO_TEXT:
            return None
        return (*head, tuple(data), values, kinds)
    items: list[Hashable] = list(head)
    text = 0
    for name, value in data.items():
        kind = type(value)
        if kind in _SCALARS:
            items.append((name, kind, value))
            text += len(value) if kind is str else 0
        elif kind is list and all(type(item) is str for item in value):
            items.append((name, kind, tuple(value)))
            text += sum(map(len, value))
        else:
            return None
    return tuple(items) if text <= _MEMO_TEXT else None


def remember(memo: dict[Hashable, Read], key: Hashable, read: Read) -> None:
    """Keep ``read`` in a client's ``memo`` under ``key``, at most :data:`MEMO_ENTRIES` of them."""
    if len(memo) >= MEMO_ENTRIES:
        memo.clear()
    memo[key] = read
