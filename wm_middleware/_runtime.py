"""The one path every intercepted call takes: lookup, fetch, store, invalidate, and telemetry.

Adapters describe a call (:class:`Read` or :class:`Write`) and hand over a thunk that performs it;
:class:`Runtime` does the rest. Adding telemetry, a cache-off mode or a second cache tier happens
here once, for every client family.

Value isolation lives here too. A :class:`Read` carries ``encode`` (what comes back from upstream
-> an immutable snapshot to store) and ``decode`` (snapshot -> a fresh object per caller), so a
caller that mutates its result never changes what the next caller gets. ``share`` says how that
snapshot crosses a shared tier to other processes: as the API's JSON, never pickled.

Nesting. Layers may stack: ``wrap(client)`` over ``instrument()``, or a model-level patch over a
transport-level one. The outermost layer handles the call and marks the context; inner layers
see the mark and pass the call straight through, so nothing is cached or traced twice.

Start-up. The adapters import this module when ``instrument()`` patches an SDK, but need a
:class:`Runtime` only at the first call they see: the freshness and telemetry modules, and
OpenTelemetry's API with them, are imported by the first ``Runtime`` made, not with this module.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ._calls import Read, Write
from ._core import MISSING, Loaded, WorkingMemory

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken

    from ._freshness import Freshness
    from ._freshness.ahead import Launch
    from ._near.serving import Serving
    from ._near.shadow import Shadow
    from ._telemetry import ReadObservation, Telemetry
    from .semantic import SemanticReuse

__all__ = ["Runtime", "handled_outside"]

T = TypeVar("T")

_HANDLING: ContextVar[bool] = ContextVar("wm_middleware_handling", default=False)


_enabled_check: Callable[[], bool] | None = None


def is_instrumentation_enabled() -> bool:
    """False inside OpenTelemetry's ``suppress_instrumentation()``.

    The test ``opentelemetry.instrumentation.utils.is_instrumentation_enabled`` makes, on the
    context key every instrumentation shares (kept in ``opentelemetry.context``), and its
    older plain spelling. Not that function itself: importing ``opentelemetry.instrumentation``
    loads the propagators' entry points, which cost the first patched call 5 to 10 ms.
    """
    global _enabled_check
    if _enabled_check is None:
        from opentelemetry import context

        key = getattr(context, "_SUPPRESS_INSTRUMENTATION_KEY", None)
        if key is None:  # an API that moved it: its own check
            from opentelemetry.instrumentation.utils import is_instrumentation_enabled as check
        else:

            def check() -> bool:
                return not (context.get_value(key) or context.get_value(_PLAIN_SUPPRESS))

        _enabled_check = check
    return _enabled_check()


_PLAIN_SUPPRESS: Final = "suppress_instrumentation"  # what older instrumentations set


def handled_outside() -> bool:
    """True while an outer layer of wm_middleware is handling the current call."""
    return _HANDLING.get()


def _encoded(read: Read, fetch: Callable[[], Any]) -> Callable[[], Any]:
    """``fetch`` as the memory runs it: marked as handled, its result encoded for storage."""

    def fetch_encoded() -> Any:
        # Marked as handled here, not around the lookup: a background refresh runs this in a
        # thread of its own, and its inner layers must still pass the call through.
        token = _HANDLING.set(True)
        try:
            return read.encode(fetch())
        finally:
            _HANDLING.reset(token)

    return fetch_encoded


def _aencoded(read: Read, fetch: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    """Async :func:`_encoded`: a refresh task runs it too."""

    async def fetch_encoded() -> Any:
        token = _HANDLING.set(True)
        try:
            return read.encode(await fetch())
        finally:
            _HANDLING.reset(token)

    return fetch_encoded


# Where a status check a read starts runs (see wm_middleware._freshness.ahead).
SYNC: Final = "thread"
ASYNC: Final = "task"

# How a read is routed (see Runtime._route).
_PASS: Final = object()
_BYPASS: Final = object()
_CACHE: Final = object()


class _Writes:
    """The writes of a :class:`Runtime`: each is run, observed, and followed by the invalidation
    of what it could have changed (and, through freshness, until its documents are indexed)."""

    __slots__ = ()
    memory: WorkingMemory[Any]
    freshness: Freshness
    telemetry: Telemetry

    def write(self, write: Write, call: Callable[[], T]) -> T:
        """Run a write, then drop what it could have changed (also when it failed). Inside
        another layer's call (``wrap()`` under ``instrument()``) that layer owns the span, but
        this layer's memory may hold the same entries, so it still drops them."""
        with self._writing(write) as started:
            answer = call()
            # Before the invalidation (on leaving the block): a read racing the write is capped.
            standing = self.freshness.written(write, answer, started)
        self.freshness.stand(standing)  # after it: what it left true outlives it
        return answer

    async def awrite(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        """Async :meth:`write`."""
        with self._writing(write) as started:
            answer = await call()
            standing = self.freshness.written(write, answer, started)
        self.freshness.stand(standing)
        return answer

    @contextmanager
    def _writing(self, write: Write) -> Iterator[float]:
        """Around a write (given when it began): its observation (unless an outer layer owns it,
        or instrumentation is suppressed), then the invalidation of its scopes, success or not."""
        if _HANDLING.get() or not is_instrumentation_enabled():
            try:
                yield time.monotonic()
            finally:
                self.memory.invalidate_scope(*write.scopes)
            return
        observation = self.telemetry.begin_write(write)
        token = _HANDLING.set(True)
        error: BaseException | None = None
        try:
            with observation.running():
                yield time.monotonic()
        except BaseException as raised:
            error = raised
            raise
        finally:
            _HANDLING.reset(token)
            observation.finish(self.memory.invalidate_scope(*write.scopes), error)


class Runtime(_Writes):
    """A working memory plus its telemetry: what one ``instrument()`` or ``wrap()`` runs on.

    Args:
        memory, telemetry: where entries live; spans and metrics.
        cache: ``False`` observes without caching: every read goes upstream and is recorded as
            ``bypass``, for comparing cached and uncached runs on one dashboard.
        freshness: follow writes until indexed, never at the cost of more requests than no
            cache (:mod:`wm_middleware._freshness`); ``False``: a write only invalidates.
        settle_interval: an entry fetched while a write is pending lives 3/4 of it (seconds).
        settle_max: the longest a scope settles after a write (seconds), finished or not.
        semantic: near-duplicate shadow or serve mode (:mod:`wm_middleware.semantic`);
            ``None``: off.

    Raises:
        ValueError: a bad ``freshness``, ``settle_interval`` or ``settle_max`` (named).

    A shared tier's ``on_operation`` hook (``RedisTier``) feeds ``wm.shared.*`` of ``telemetry``,
    unless the application set one itself.
    """

    __slots__ = ("_refreshes", "cache", "freshness", "memory", "near", "serving", "telemetry")

    def __init__(
        self,
        memory: WorkingMemory[Any],
        telemetry: Telemetry,
        *,
        cache: bool = True,
        freshness: bool = True,
        settle_interval: float = 1.0,
        settle_max: float = 60.0,
        semantic: SemanticReuse | None = None,
    ):
        from ._freshness import Freshness  # see the module's docstring

        self.freshness = Freshness(
            memory, telemetry, enabled=freshness, interval=settle_interval, settle_max=settle_max
        )
        self.memory = memory
        self._refreshes = memory.refresh_after is not None  # fixed for a memory's life
        self.telemetry = telemetry
        self.cache = cache
        self.near: Shadow | None = None
        self.serving: Serving | None = None  # near hits (serve mode), beside the shadow
        if semantic is not None:
            from ._near.shadow import Shadow  # only with the shadow mode on

            self.near = Shadow(semantic, memory, telemetry)
            if semantic.serve:
                from ._near.serving import Serving

                self.serving = Serving(self.near, memory, self.freshness)
        telemetry.watch(memory)
        _hear_tier(memory, telemetry)

    # -- reads ---------------------------------------------------------------------------------
    # ``read`` and ``aread`` are thin shells over the same decisions: ``_route`` (pass through,
    # bypass or cache), ``_look_up`` (the lock-free lookup, and a hit), then ``load`` / ``aload``
    # with what ``_loading`` gives. Telemetry is entered once: the read's observation begins with
    # the read and is finished once with its outcome.
    def read(self, read: Read, fetch: Callable[[], T]) -> T:
        """Serve ``read`` from the cache, or run ``fetch`` once for every concurrent caller."""
        route = self._route()
        if route is _PASS:
            return fetch()
        if route is _BYPASS:
            return self.bypass(read.operation, read.server, fetch, read.query, read.count, read)
        refresh = self._refresh(_encoded(read, fetch)) if self._refreshes else None
        observation, value = self._look_up(read, refresh, SYNC)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        near = None if self.near is None else self.near.begin(read)  # only a miss gets here
        if near is not None and self.serving is not None:  # serve mode: a near hit, if allowed
            served = self.serving.serve(near, read, observation, _encoded(read, fetch))
            if served is not MISSING:
                return served  # type: ignore[no-any-return]
        # No status check waits here: a read's only upstream request is its own fetch.
        loading = self._loading(observation, read)  # marks a read of a settling scope
        upstream = observation.fetching(_encoded(read, fetch))
        if observation.settling:
            upstream = self.freshness.saving(read, upstream, SYNC)
        with _failing(observation):
            loaded = self.memory.load(read.key, upstream, **loading)
        value = read.decode(loaded.value)
        if near is not None and self.near is not None:
            self.near.finish(near, loaded.outcome, value, observation)
        return self._done(observation, loaded, value, read, SYNC)  # type: ignore[no-any-return]

    async def aread(self, read: Read, fetch: Callable[[], Awaitable[T]]) -> T:
        """Async :meth:`read`. The shared fetch runs in a task of its own (see WorkingMemory).

        Under another event loop than asyncio (trio, through anyio) a miss loads in a worker
        thread (see :func:`_in_worker_thread`), so concurrent callers share one fetch there too.
        """
        route = self._route()
        if route is _PASS:
            return await fetch()
        if route is _BYPASS:
            return await self.abypass(
                read.operation, read.server, fetch, read.query, read.count, read
            )
        if not asyncio_running():
            return await self._aread_elsewhere(read, fetch)  # type: ignore[no-any-return]
        refresh = self._refresh(_aencoded(read, fetch)) if self._refreshes else None
        observation, value = self._look_up(read, refresh, ASYNC)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        near = None if self.near is None else self.near.begin(read)
        if near is not None and self.serving is not None:
            served = await self.serving.aserve(near, read, observation, _aencoded(read, fetch))
            if served is not MISSING:
                return served  # type: ignore[no-any-return]
        loading = self._loading(observation, read)
        upstream = observation.afetching(_aencoded(read, fetch))
        if observation.settling:
            upstream = self.freshness.asaving(read, upstream, ASYNC)
        with _failing(observation):
            loaded = await self.memory.aload(read.key, upstream, **loading)
        value = read.decode(loaded.value)
        if near is not None and self.near is not None:
            await self.near.afinish(near, loaded.outcome, value, observation)
        return self._done(observation, loaded, value, read, ASYNC)  # type: ignore[no-any-return]

    async def _aread_elsewhere(self, read: Read, fetch: Callable[[], Awaitable[Any]]) -> Any:
        """:meth:`aread` under an event loop that is not asyncio: the lookup here, the load (and
        a refresh) in a thread, each fetch back on the caller's loop."""
        try:
            import anyio.lowlevel

            token = anyio.lowlevel.current_token()  # the loop the fetches go back to
        except Exception:  # a loop anyio does not run, or an anyio without tokens: uncached
            return await self.abypass(
                read.operation, read.server, fetch, read.query, read.count, read
            )
        refresh = (
            self._refresh(_on_loop(_aencoded(read, fetch), token)) if self._refreshes else None
        )
        # No loop here takes a status check (the next read fetches instead): none is started.
        observation, value = self._look_up(read, refresh, None)
        if value is not MISSING:
            return value
        near = None if self.near is None else self.near.begin(read)
        serving = self.serving
        if near is not None and serving is not None:  # its wait for a vector blocks a thread
            verify = _on_loop(_aencoded(read, fetch), token)
            served = await _in_worker_thread(lambda: serving.serve(near, read, observation, verify))
            if served is not MISSING:
                return served
        loading = self._loading(observation, read)
        fetch_here = _on_loop(observation.afetching(_aencoded(read, fetch)), token)
        if observation.settling:
            fetch_here = self.freshness.saving(read, fetch_here)
        with _failing(observation):
            loaded = await _in_worker_thread(
                lambda: self.memory.load(read.key, fetch_here, **loading)
            )
        value = read.decode(loaded.value)
        shadow = self.near
        if near is not None and shadow is not None:  # its wait for a vector blocks a thread
            await _in_worker_thread(lambda: shadow.finish(near, loaded.outcome, value, observation))
        return self._done(observation, loaded, value, read, None)

    def _look_up(
        self, read: Read, refresh: Callable[[], Any] | None, how: Launch
    ) -> tuple[ReadObservation, Any]:
        """The read's observation, and its value when the memory holds it (the hit finishes the
        observation), else ``MISSING``. ``refresh`` is the fetch of a background refresh;
        ``how``: where a status check the hit starts runs (see :meth:`Freshness.ahead`)."""
        observation = self.telemetry.begin_read(read)
        is_async = how == ASYNC
        stored = self.memory.lookup(read.key, refresh, is_async=is_async, codec=read.share)
        if stored is MISSING:
            return observation, MISSING
        value = read.decode(stored)
        observation.settling = self.freshness.served(read, how)  # and earns a credit
        observation.hit(value)
        return observation, value

    def _loading(self, observation: ReadObservation, read: Read) -> dict[str, Any]:
        """What a miss passes to ``load`` / ``aload`` besides its key and fetch."""
        return {
            "ttl": self._settle_ttl(observation, read),
            "scopes": read.scopes,
            "info": observation,
            "codec": read.share,
            "flight": read.flight,
        }

    def _route(self) -> object:
        """How a read goes: through an outer layer, uncached (observed), or through the cache."""
        if _HANDLING.get():
            return _PASS
        if not self.cache or not is_instrumentation_enabled():
            return _BYPASS
        return _CACHE

    def _refresh(self, fetch: Callable[[], Any]) -> Callable[[], Any]:
        """A background refresh's fetch: a request no read asked for, spent from the ledger."""
        return self.freshness.ledger.spending(fetch)

    def _settle_ttl(self, observation: ReadObservation, read: Read) -> float | None:
        """Mark a read of a settling scope on its observation; the ttl of what it fetches
        (see :meth:`Freshness.cap`)."""
        freshness = self.freshness
        if freshness.settling(read.scopes):
            observation.settling = True
            return freshness.cap(read)
        return None

    def _done(
        self, observation: ReadObservation, loaded: Loaded, value: Any, read: Read, how: Launch
    ) -> Any:
        """Finish the observation of a read that went past the lock-free lookup, decoded as
        ``value``; one answered without a fetch of its own earns the ledger a credit (and may
        start a status check, see :meth:`Freshness.served`).

        ``loaded.tier`` ("local" | "shared") names the tier that served it: the value of the
        ``wm.cache.tier`` span attribute (hits of the lock-free lookup are all "local").
        """
        if loaded.outcome != "miss":
            self.freshness.served(read, how)
        observation.done(value, loaded.outcome, loaded.tier, loaded.leader)
        return value

    # -- calls that must not be cached ---------------------------------------------------------
    # ``bypass`` / ``abypass`` and ``write`` / ``awrite`` are thin shells: the decisions live
    # once in ``_bypassing`` and ``_writing``; only the call differs.
    def bypass(
        self,
        operation: str,
        server: tuple[str, int | None],
        call: Callable[[], T],
        query: str | None = None,
        count: Callable[[Any], int | None] | None = None,
        read: Read | None = None,
    ) -> T:
        """Run ``call`` uncached (raw responses, suppressed or uncacheable reads), observed.

        ``read`` describes the call when there is one (its ``record_id`` goes on the span);
        else ``operation``, ``server``, ``query`` and ``count`` do.
        """
        if _HANDLING.get():
            return call()
        with self._bypassing(_described(read, operation, server, query, count)) as observation:
            value = call()
        observation.bypassed(value)
        return value

    async def abypass(
        self,
        operation: str,
        server: tuple[str, int | None],
        call: Callable[[], Awaitable[T]],
        query: str | None = None,
        count: Callable[[Any], int | None] | None = None,
        read: Read | None = None,
    ) -> T:
        """Async :meth:`bypass`."""
        if _HANDLING.get():
            return await call()
        with self._bypassing(_described(read, operation, server, query, count)) as observation:
            value = await call()
        observation.bypassed(value)
        return value

    @contextmanager
    def _bypassing(self, read: Read) -> Iterator[ReadObservation]:
        """Mark the call handled (inner layers pass it through) around its observation, whose
        span is current (with instrumentation enabled); a failure finishes it."""
        observation = self.telemetry.begin_bypass(read, traced=is_instrumentation_enabled())
        token = _HANDLING.set(True)
        try:
            with observation.calling():
                yield observation
        except BaseException as error:
            observation.fail(error)
            raise
        finally:
            _HANDLING.reset(token)


def asyncio_running() -> bool:
    """True when the calling coroutine runs under asyncio, whose loop the memory waits on.

    Under another loop (trio: the 3.x async client runs on anyio) a miss loads in a worker thread
    instead (see :meth:`Runtime.aread`). ``sniffio`` (which anyio and httpx bring) names the
    library; without it, a running asyncio loop decides.
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


def _on_loop(fetch: Callable[[], Awaitable[Any]], token: EventLoopToken) -> Callable[[], Any]:
    """``fetch`` as a call a worker thread makes: it runs on the loop of ``token`` (anyio's)."""
    import anyio.from_thread

    async def fetch_there() -> Any:
        return await fetch()

    def call() -> Any:
        try:
            return anyio.from_thread.run(fetch_there, token=token)
        except Exception:
            raise
        except BaseException as error:  # the loop's own cancellation: it is ending
            raise RuntimeError("the event loop of this read has ended") from error

    return call


async def _in_worker_thread(call: Callable[[], T]) -> T:
    """Run ``call`` in a worker thread of the caller's loop (anyio's, so trio's too).

    A load there leads or joins the key's flight like any thread: callers on that loop, threads
    and asyncio tasks share one fetch. The caller waits for its thread even when cancelled (the
    fetch it may lead serves the others).
    """
    import anyio.to_thread

    return await anyio.to_thread.run_sync(call)


@contextmanager
def _failing(observation: ReadObservation) -> Iterator[None]:
    """Finish ``observation`` with the error a miss's load raises, and raise it."""
    try:
        yield
    except BaseException as error:
        observation.fail(error)
        raise


def _described(
    read: Read | None,
    operation: str,
    server: tuple[str, int | None],
    query: str | None,
    count: Callable[[Any], int | None] | None,
) -> Read:
    """The :class:`Read` a bypass observes: the one given, else one built from its parts."""
    if read is not None:
        return read
    if count is None:
        return Read(operation, None, (), server, query)
    return Read(operation, None, (), server, query, count=count)


def _hear_tier(memory: WorkingMemory[Any], telemetry: Telemetry) -> None:
    """Point the shared tier's ``on_operation`` hook at ``telemetry.record_shared``.

    Replaces only an empty hook or one an earlier runtime set (a new ``instrument()`` over the
    same memory reports to the new telemetry); a hook of the application's own stays.
    """
    from ._telemetry import Telemetry  # loaded already: ``telemetry`` is one

    tier = memory.shared
    if tier is None or not hasattr(tier, "on_operation"):
        return
    current = getattr(tier, "on_operation", None)
    if current is None or isinstance(getattr(current, "__self__", None), Telemetry):
        try:
            tier.on_operation = telemetry.record_shared
        except Exception:  # a tier that refuses the hook still works, unobserved
            pass
