"""``RedisTier``: the shared tier's public face, its per-process state and its two drivers.

What a call does is decided in :mod:`.protocol`, once; :meth:`RedisTier.load` and
:meth:`RedisTier.aload` only carry out its steps, on sync connections or on the running event
loop's own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterable
from types import TracebackType
from typing import Any, Final, Literal

from redis.exceptions import RedisError

from .._core import InvalidationSink, SharedCodec, TierResult
from .._core.lazy import OnFirstCall
from .._core.tier import SettleBoard
from .breaker import Breaker
from .connections import (
    Conns,
    Endpoint,
    aclose_client,
    async_client,
    close_client,
    endpoint_of,
    sync_client,
)
from .encoding import json_encode
from .evidence import SharedEvidence
from .health import BreakerOpen, Health, logger
from .memories import Memories
from .protocol import (
    CLEAR,
    Block,
    Done,
    Fetch,
    Flush,
    Invalidation,
    Layout,
    Load,
    Pending,
    Plan,
    SharedOutcome,
    Values,
    mac_key,
)
from .scripts import Run, arun, run
from .settling import SharedSettling
from .subscriber import Subscriber

__all__ = ["RedisTier", "SharedOutcome"]

_TIER_ERRORS: Final = (RedisError, OSError, asyncio.TimeoutError)


class _Process:
    """Everything that must not cross a fork: connections, locks, the subscriber."""

    def __init__(self, tier: RedisTier) -> None:
        self._endpoint = tier._endpoint
        self._timeout = tier._op_timeout
        # A blocked BLMOVE lasts up to the lease: its socket must wait longer.
        self._blocking_timeout = tier._lease + tier._op_timeout
        self.pid = os.getpid()
        self.lock = threading.Lock()  # guards loops
        self.sync_conns = OnFirstCall(
            functools.partial(_sync_conns, self._endpoint, self._timeout, self._blocking_timeout)
        )
        self.loops: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], Conns]] = {}
        self.subscriber = Subscriber(
            tier._endpoint,
            tier._op_timeout,
            tier._layout.channel,
            tier._memories,
            tier._health,
            _weak_call(tier._replay),
            (tier._layout.settling_channel, _weak_heard(tier._heard_settle)),
        )

    def loop_conns(self) -> Conns:
        """The running event loop's own connections (asyncio clients are bound to a loop)."""
        loop = asyncio.get_running_loop()
        found = self.loops.get(id(loop))
        if found is not None and found[0]() is loop:
            return found[1]
        with self.lock:
            for ident, (ref, _) in list(self.loops.items()):
                alive = ref()
                if alive is None or alive.is_closed():
                    del self.loops[ident]
            conns = Conns(
                async_client(self._endpoint, self._timeout, self._timeout),
                async_client(self._endpoint, self._blocking_timeout, self._timeout),
            )
            self.loops[id(loop)] = (weakref.ref(loop), conns)
        return conns

    def close(self, wait: float) -> None:
        self.subscriber.stop(wait)
        conns = self.sync_conns.take()
        with self.lock:
            loops, self.loops = list(self.loops.values()), {}
        if conns is not None:
            close_client(conns.main)
            close_client(conns.blocking)
        for ref, found in loops:
            _close_on_loop(ref(), found, wait)


class _Accounts:
    """The :class:`~.protocol.Ledger` of a tier: errors, breaker, health, pending invalidations
    and the ``on_operation`` hook, kept across loads."""

    def __init__(self, tier: RedisTier, breaker: Breaker, health: Health, layout: Layout) -> None:
        self._tier = tier
        self._breaker = breaker
        self._health = health
        self._layout = layout
        self.errors = 0
        self.forgeries = 0
        self._lock = threading.Lock()
        self.replaying = threading.Lock()  # held across one replay's round trips
        self.pending = Pending()
        self._registered: dict[str, float] = {}  # tenant -> monotonic time of registration

    def after_fork(self, breaker: Breaker) -> None:
        self._breaker = breaker
        self._lock = threading.Lock()
        self.replaying = threading.Lock()
        self.pending.after_fork()
        self._registered = {}

    def succeeded(self) -> None:
        self._breaker.succeeded()
        self._health.succeeded()

    def failed(self, started: float, error: BaseException) -> None:
        with self._lock:
            self.errors += 1
        self._breaker.failed()
        self._health.failed(error)
        self.report("error", started)

    def report(self, outcome: SharedOutcome, started: float) -> None:
        hook = self._tier.on_operation
        if hook is not None:
            try:
                hook(outcome, time.perf_counter() - started)
            except Exception:
                pass  # telemetry never breaks a call

    def forged(self, started: float) -> None:
        with self._lock:
            self.forgeries += 1
            first = self.forgeries == 1
        if first:  # once per tier: a writer rewriting entries must not flood the log
            logger.warning(
                "shared tier %s: refused an entry whose MAC does not verify under the tier's "
                "secret (written or altered by someone without it); refused entries are counted "
                "in RedisTier.forged",
                self._tier.endpoint.shown,
            )
        self.report("forged", started)

    def replay(self, conns: Callable[[], Conns]) -> None:
        """Deliver pending invalidations now on ``conns()``, if the breaker lets us (sync, on any
        thread; one thread at a time, so a message is not published twice by two threads)."""
        if not self.pending:
            return
        with self.replaying:
            if not self.pending:
                return
            if not self._breaker.allow():
                self.failed(time.perf_counter(), BreakerOpen("circuit breaker open"))
                return
            flush = self.flush()
            if flush is None:
                self._breaker.succeeded()  # delivered meanwhile by another thread
                return
            main = conns().main
            step: Run | None = flush.start()
            while step is not None:
                started = time.perf_counter()
                try:
                    reply = run(main, step)
                except _TIER_ERRORS as error:
                    self.failed(started, error)
                    step = flush.failed(error)
                else:
                    self.succeeded()
                    step = flush.replied(reply)
            if flush.ok:
                self.flushed(flush)

    def flush(self) -> Flush | None:
        items = self.pending.snapshot()
        return Flush(items, self._layout) if items else None

    def flushed(self, flush: Flush) -> None:
        self.pending.remove(flush.items)

    def unregistered(self, plan: Plan) -> bool:
        # Cluster only (standalone registers inside get-or-lease): the registry lives in the
        # namespace's slot, so it cannot be touched by a script on the tenant's slot.
        registered = self._registered.get(plan.tenant, -math.inf)
        return time.monotonic() - registered >= plan.token_ms / 2000

    def registered(self, plan: Plan) -> None:
        self._registered[plan.tenant] = time.monotonic()


class RedisTier:
    """A shared second tier on Redis >= 6.2 or Valkey, standalone or Cluster.

    Args:
        target: a ``redis://`` / ``rediss://`` / ``unix://`` URL, or a redis-py client (``Redis``,
            ``RedisCluster`` or their asyncio twins). The tier makes its own connections from the
            client's address and credentials, with its own timeouts and no retries.
        namespace: prefix of every key and the channel; also the tenant of calls with no
            ``("tenant", ...)`` scope.
        secret: when given (str or bytes), tenant fingerprints are HMAC-SHA256 under it, and
            every entry carries a MAC under a key derived from it (over the entry's Redis key,
            header and value): an entry that does not verify is refused, counted in
            :attr:`forged`, and fetched and stored over. Give every process of a namespace the
            same secret. Without one, whoever can write the tier's keys chooses what it serves.
        op_timeout: seconds allowed for connecting and for each Redis operation (its whole
            reply, however slowly the bytes arrive).
        lease: seconds a leader may fetch before another process takes over. A caller waits for
            other processes' fetches at most two leases in all, then fetches itself.
        breaker_cooldown: seconds the tier is skipped after ``breaker_errors`` consecutive errors.
        breaker_errors: consecutive tier errors that open the circuit breaker.
        encode / decode: ``encode(value) -> bytes | None`` (None keeps the value local) and
            ``decode(bytes) -> value``; both or neither. Default: JSON, sharing only values that
            survive a JSON round trip unchanged.
        max_value_bytes: encoded values above this stay local to the process.

    Raises:
        TypeError / ValueError: an argument of the wrong type or out of range (a URL is shown
            with its password masked).

    ``on_operation``, when set to a callable ``(outcome, seconds)``, hears every tier operation
    (see :data:`SharedOutcome`); it must be cheap, and what it raises is ignored. The tier logs
    one WARNING (logger ``wm_middleware.shared``) when it cannot reach the server and one INFO
    when it can again, and one WARNING per cause the server refuses a command for (a missing
    database, ``NOPERM``). ``close()`` (or ``with RedisTier(url) as tier:``) releases its
    connections and stops its subscriber thread; a later call opens them again.
    """

    def __init__(
        self,
        target: object,
        *,
        namespace: str = "wm",
        secret: str | bytes | None = None,
        op_timeout: float = 0.1,
        lease: float = 30.0,
        breaker_cooldown: float = 10.0,
        breaker_errors: int = 3,
        encode: Callable[[Any], bytes | None] | None = None,
        decode: Callable[[bytes], Any] | None = None,
        max_value_bytes: int = 1_048_576,
    ) -> None:
        _check(namespace, secret, op_timeout, lease, breaker_cooldown, breaker_errors)
        _check_codec(encode, decode, max_value_bytes)
        self._endpoint = endpoint_of(target)
        self._namespace = namespace
        key = secret.encode() if isinstance(secret, str) else secret
        self._layout = Layout(namespace, key, float(lease), self._endpoint.cluster)
        self._op_timeout = float(op_timeout)
        self._lease = float(lease)
        self._values = Values(
            encode or json_encode,
            decode or json.loads,
            max_value_bytes,
            None if key is None else mac_key(key),
        )
        self._breaker = Breaker(breaker_errors, float(breaker_cooldown))
        self._health = Health(self._endpoint.shown)
        self._memories = Memories()
        self._accounts = _Accounts(self, self._breaker, self._health, self._layout)
        self._process: _Process | None = None
        self._settles: SharedSettling | None = None  # made by the first settles()
        self.on_operation: Callable[[SharedOutcome, float], None] | None = None

    # -- the SharedTier protocol ----------------------------------------------------------------
    @property
    def errors(self) -> int:
        """Tier operations that failed or timed out and were treated as a miss."""
        return self._accounts.errors

    @property
    def forged(self) -> int:
        """Entries refused because their MAC did not verify under ``secret`` (forged, altered or
        copied from another key); each was read past as a miss. Always 0 without a secret."""
        return self._accounts.forgeries

    @property
    def breaker_state(self) -> Literal["closed", "open", "half_open"]:
        """The circuit breaker: ``closed`` (tier in use), ``open`` (skipped), ``half_open``."""
        return self._breaker.state

    @property
    def endpoint(self) -> Endpoint:
        """Where the tier's server is (credentials kept, shown masked)."""
        return self._endpoint

    @property
    def namespace(self) -> str:
        """The prefix of every key and channel of this tier."""
        return self._namespace

    @property
    def op_timeout(self) -> float:
        """The bound, in seconds, of every operation on the server."""
        return self._op_timeout

    @property
    def subscribed(self) -> bool:
        """Whether this process's invalidation subscriber is confirmed."""
        return self._process is not None and self._process.subscriber.confirmed

    def bind(self, memory: InvalidationSink) -> None:
        """Register ``memory`` to hear invalidations from other processes (starts listening)."""
        self._memories.bind(memory)
        self._proc()

    def load(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Any],
        codec: SharedCodec | None = None,
    ) -> TierResult:
        """Shared hit, or wait for another process's fetch, or lease, fetch and store.

        With ``codec`` the value is stored as ``codec.dump(value)`` (then encoded as any value)
        and a stored entry is read back through ``codec.load``.
        """
        call = self._begin(key, scopes, ttl, codec)
        if call is None:
            return TierResult(fetch(), "fetched")
        conns = self._proc().sync_conns()
        action = call.start()
        while not isinstance(action, Done):
            if isinstance(action, Fetch):
                try:
                    value = fetch()
                except BaseException:
                    _quietly(conns, call.abandoned(), self._accounts)
                    raise
                action = call.fetched(value)
                continue
            try:
                reply = _exchange(conns, action)
            except _TIER_ERRORS as error:
                action = call.failed(error)
            else:
                action = call.replied(reply)
        return action.result

    async def aload(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Awaitable[Any]],
        codec: SharedCodec | None = None,
    ) -> TierResult:
        """Async :meth:`load`: the same steps on this event loop's own connections."""
        call = self._begin(key, scopes, ttl, codec)
        if call is None:
            return TierResult(await fetch(), "fetched")
        conns = self._proc().loop_conns()
        action = call.start()
        while not isinstance(action, Done):
            if isinstance(action, Fetch):
                try:
                    value = await fetch()
                except BaseException:
                    await _aquietly(conns, call.abandoned(), self._accounts)
                    raise
                action = call.fetched(value)
                continue
            try:
                reply = await _aexchange(conns, action)
            except _TIER_ERRORS as error:
                action = call.failed(error)
            else:
                action = call.replied(reply)
        return action.result

    def invalidate(self, *, keys: Iterable[Hashable] = (), scopes: Iterable[Hashable] = ()) -> None:
        """Make every process miss ``keys`` and every entry carrying one of ``scopes``.

        What cannot reach Redis now stays pending in this process and is replayed on the next
        successful contact, before this process serves anything from Redis again.
        """
        item = Invalidation.of(self._layout, keys, scopes)
        if item.names:
            self._accounts.pending.add(item)
            self._replay()

    def clear(self) -> None:
        """Make every process miss every entry of this namespace."""
        self._accounts.pending.add(CLEAR)
        self._replay()

    def settles(self) -> SettleBoard:
        """The fleet's settling scopes, as this process knows them: what one process's write
        settles, every process sharing the tier caps (see :mod:`.settling`)."""
        board = self._settles
        if board is None:
            with _PROCESS_LOCK:
                if self._settles is None:
                    self._settles = SharedSettling(self._layout, self._send)
                board = self._settles
            self._proc()  # the subscriber hears the settling channel from now on
            board.reload()
        return board

    def evidence(self, family: str) -> SharedEvidence:
        """The fleet's near-duplicate verdicts of one configuration family (see
        :mod:`.evidence`): each process's counted once, sealed under the secret."""
        return SharedEvidence(self._layout, self._send, family)

    def _send(self, step: Run) -> Any:
        """Run one step on this process's connection (raises on a failure, said as a load's)."""
        try:
            return run(self._proc().sync_conns().main, step)
        except _TIER_ERRORS as error:
            self._health.failed(error)
            raise

    def _heard_settle(self, data: bytes | None) -> None:
        board = self._settles
        if board is not None:
            board.heard(data)

    @property
    def _pending(self) -> Pending:
        return self._accounts.pending

    def close(self) -> None:
        """Close this process's connections and stop its subscriber (a later call reopens)."""
        process, self._process = self._process, None
        if process is not None and process.pid == os.getpid():
            process.close(wait=1.0 + self._op_timeout)

    def __enter__(self) -> RedisTier:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"RedisTier({self._endpoint.shown!r}, namespace={self._namespace!r}, "
            f"breaker={self.breaker_state})"
        )

    def _replay(self) -> None:
        """Deliver pending invalidations now, if the breaker lets us (see ``_Accounts.replay``)."""
        self._accounts.replay(lambda: self._proc().sync_conns())

    # -- process, connections ------------------------------------------------------------------
    def _begin(
        self, key: Hashable, scopes: tuple[Hashable, ...], ttl: float, codec: SharedCodec | None
    ) -> Load | None:
        plan = self._layout.plan(key, scopes, ttl)
        if plan is None:
            return None
        self._memories.remember(plan, key, scopes)  # even if Redis is skipped: L1 keeps it
        process = self._proc()
        if not self._breaker.allow():
            return None
        epoch = process.subscriber.epoch
        trusted = lambda: process.subscriber.trusted(epoch)  # noqa: E731
        return Load(plan, self._layout, self._accounts, codec, self._values, trusted)

    def _proc(self) -> _Process:
        process = self._process
        if process is None or process.pid != os.getpid():
            with _PROCESS_LOCK:
                process = self._process
                if process is None or process.pid != os.getpid():
                    if process is not None:
                        # A forked child: nothing of the parent's is used, not even a lock the
                        # parent may have held while forking.
                        self._breaker = Breaker(self._breaker.limit, self._breaker.cooldown)
                        self._accounts.after_fork(self._breaker)
                        self._memories.after_fork()
                    process = self._process = _Process(self)
                    process.subscriber.start()
        return process


def _sync_conns(endpoint: Endpoint, timeout: float, blocking_timeout: float) -> Conns:
    return Conns(
        sync_client(endpoint, timeout, timeout),
        sync_client(endpoint, blocking_timeout, timeout),
    )


def _exchange(conns: Conns, action: Run | Block) -> Any:
    if isinstance(action, Block):
        signal = action.signal
        return conns.blocking.blmove(signal, signal, action.seconds, "RIGHT", "LEFT")
    return run(conns.main, action)


async def _aexchange(conns: Conns, action: Run | Block) -> Any:
    if isinstance(action, Block):
        signal = action.signal
        return await conns.blocking.blmove(signal, signal, action.seconds, "RIGHT", "LEFT")
    return await arun(conns.main, action)


def _quietly(conns: Conns, step: Run | None, accounts: _Accounts) -> None:
    """Send ``step`` (a release after a failed fetch); a tier error is only counted."""
    started = time.perf_counter()
    try:
        if step is not None:
            run(conns.main, step)
    except _TIER_ERRORS as error:
        accounts.failed(started, error)


async def _aquietly(conns: Conns, step: Run | None, accounts: _Accounts) -> None:
    started = time.perf_counter()
    try:
        if step is not None:
            await arun(conns.main, step)
    except _TIER_ERRORS as error:
        accounts.failed(started, error)


# Guards the creation of a tier's per-process state; a forked child gets a fresh one.
_PROCESS_LOCK = threading.Lock()


def _new_process_lock() -> None:
    global _PROCESS_LOCK
    _PROCESS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_process_lock)


def _weak_heard(method: Callable[[bytes | None], None]) -> Callable[[bytes | None], None]:
    """:func:`_weak_call` for a method that hears a message."""
    ref = weakref.WeakMethod(method)

    def heard(data: bytes | None) -> None:
        found = ref()
        if found is not None:
            found(data)

    return heard


def _weak_call(method: Callable[[], None]) -> Callable[[], None]:
    """``method`` without keeping its object alive (a dropped tier stops its subscriber)."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        found = ref()
        if found is not None:
            found()

    return call


_CLOSING: set[asyncio.Future[Any]] = set()  # closings scheduled on a running loop


def _close_on_loop(loop: asyncio.AbstractEventLoop | None, conns: Conns, wait: float) -> None:
    """Close an event loop's clients on that loop, however it is doing (best effort)."""
    if loop is None or loop.is_closed():
        return  # nothing can run there any more
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:  # called from that loop: it closes them as soon as the caller awaits
        task = loop.create_task(_aclose_conns(conns))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
        return
    try:
        if loop.is_running():  # on another thread
            asyncio.run_coroutine_threadsafe(_aclose_conns(conns), loop).result(wait)
        else:
            loop.run_until_complete(_aclose_conns(conns))
    except Exception:
        pass  # closing never fails the caller


async def _aclose_conns(conns: Conns) -> None:
    await aclose_client(conns.main)
    await aclose_client(conns.blocking)


def _check(
    namespace: object,
    secret: object,
    op_timeout: object,
    lease: object,
    breaker_cooldown: object,
    breaker_errors: object,
) -> None:
    """Arguments of ``RedisTier``, checked up front with errors that name them."""
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("namespace must be a non-empty str")
    if any(c in namespace for c in "{} \t\r\n"):
        raise ValueError(f"namespace may not hold braces or whitespace: {namespace!r}")
    if secret is not None and not isinstance(secret, (str, bytes)):
        raise TypeError(f"secret must be str, bytes or None, not {type(secret).__name__}")
    if secret is not None and not secret:
        raise ValueError("secret must not be empty")
    for name, value in (("op_timeout", op_timeout), ("lease", lease)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
        if not (0 < value < math.inf):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")
    if isinstance(breaker_cooldown, bool) or not isinstance(breaker_cooldown, (int, float)):
        raise TypeError("breaker_cooldown must be a number of seconds")
    if not (0 <= breaker_cooldown < math.inf):
        raise ValueError(f"breaker_cooldown must be >= 0, got {breaker_cooldown!r}")
    if isinstance(breaker_errors, bool) or not isinstance(breaker_errors, int):
        raise TypeError("breaker_errors must be an int")
    if breaker_errors < 1:
        raise ValueError(f"breaker_errors must be >= 1, got {breaker_errors!r}")


def _check_codec(encode: object, decode: object, max_value_bytes: object) -> None:
    if (encode is None) != (decode is None):
        raise ValueError("pass encode and decode together, or neither")
    if encode is not None and not (callable(encode) and callable(decode)):
        raise TypeError("encode and decode must be callables")
    if isinstance(max_value_bytes, bool) or not isinstance(max_value_bytes, int):
        raise TypeError("max_value_bytes must be an int")
    if max_value_bytes < 1:
        raise ValueError(f"max_value_bytes must be >= 1, got {max_value_bytes!r}")
