"""The working memory: a thin facade composing the store, the flight group and the shared tier.

Knows nothing of Supermemory, HTTP or OpenTelemetry: values are opaque. Who holds what:

* :class:`~.store.Store` holds the entries (LRU + TTL, pins, scopes); this module's lock
  serialises every change to it. A hit (:meth:`WorkingMemory.lookup`) takes no lock: see the
  store's docstring.
* :class:`~.flight.Group` decides who fetches a missing key and who waits, under a lock of its
  own, and tells a leader whether it may store (the invalidation-during-a-fetch story is told in
  ``flight.py``). Lock order: the group's lock, then this one; never the other way round.
* :class:`_Leader` does a leader's work, written once as steps on data (:class:`_Plan` in,
  ``(value, outcome)`` out): re-check the store, fetch (directly or through the shared tier),
  commit. The fetch's two drivers, sync and async, only make the calls (awaited or not) and hand
  how each ended to one step that sorts and counts it (:meth:`_Leader._sorted`).
* :class:`~.settling.Settlements` holds the scopes that settle; :class:`~.outcomes.Counters` the
  lookup counters.
* :class:`_KeyedMemory` builds those parts and is the cache by key that adapters and the runtime
  call; :class:`WorkingMemory` adds checked options and the cache by query.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Iterator
from contextlib import contextmanager

from .flight import Flight, Group
from .forks import reset_in_child
from .keys import UNSET, Key, KeyMemo, make_key, normalise_query
from .outcomes import MISSING, SERVED, Counters, Loaded, TierResult
from .settling import Settle, Settlements, check_seconds
from .store import Entry, Store

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Any, Generic, TypeVar

    from .flight import AsyncLead, Lead
    from .outcomes import LeaderOutcome
    from .stats import CacheStats
    from .tier import SharedCodec, SharedTier

    T = TypeVar("T")
    _Led = tuple[Any, LeaderOutcome]  # what a leader's work returns: the value, what it found
    _Attempt = tuple[bool, Any]  # how a call ended: (returned, its value or its exception)
    # A drop listener (see on_drop): the keys and scopes dropped, or everything.
    Dropped = Callable[[tuple[Hashable, ...], tuple[Hashable, ...], bool], None]
else:
    from .generic import Generic, T

__all__ = ["WorkingMemory"]


def _age(now: float, stored: float) -> float:
    """Seconds since ``stored``; 0 when unknown (an infinite ttl makes it nan) or negative."""
    age = now - stored
    return age if age >= 0 else 0.0


def _is_shared_tier(shared: object) -> bool:
    from .tier import SharedTier  # here: only a memory given a tier needs the protocol

    return isinstance(shared, SharedTier)


def _not_callable(fetch: object) -> TypeError:
    return TypeError(f"fetch must be callable, not {type(fetch).__name__}")


def _check_search(fetch: object, ttl: float | None) -> None:
    """Refuse a search's bad ``ttl`` or ``fetch`` (``ttl`` first), even on a hit."""
    if ttl is not None:
        check_seconds("ttl", ttl)
    if not callable(fetch):
        raise _not_callable(fetch)


def _check_fetch(fetch: object, *, is_async: bool) -> None:
    import inspect  # on a miss, not with the core: see the package docstring

    if not callable(fetch):
        raise _not_callable(fetch)
    if not is_async and inspect.iscoroutinefunction(fetch):
        raise TypeError("fetch is an async function: use asearch / aload for it, not search / load")


def _call_sync(fetch: Callable[[], Any]) -> Any:
    """``fetch()``, refusing an awaitable: caching one would hand out a spent coroutine."""
    import inspect  # as in _check_fetch

    value = fetch()
    if inspect.isawaitable(value):
        if isinstance(value, Coroutine):
            value.close()  # never awaited, and never will be: no "never awaited" warning
        raise TypeError(
            "fetch returned an awaitable: use asearch / aload for an async fetch, not search / load"
        )
    return value


def _attempt(call: Callable[[], Any]) -> _Attempt:
    """``call()``'s outcome as data, for :meth:`_Leader._sorted`."""
    try:
        return True, call()
    except BaseException as error:
        return False, error


async def _aattempt(call: Awaitable[Any]) -> _Attempt:
    """As :func:`_attempt`, ``call`` awaited."""
    try:
        return True, await call
    except BaseException as error:
        return False, error


async def _fetched(value: Awaitable[Any]) -> TierResult:
    return TierResult(await value, "fetched")


class _Plan:
    """What a leader loads: where the value goes and how it crosses the tier."""

    __slots__ = ("codec", "key", "refresh", "scopes", "ttl")

    def __init__(
        self,
        key: Key,
        scopes: tuple[Hashable, ...],
        ttl: float,
        codec: SharedCodec | None,
        refresh: bool = False,  # a background refresh: no re-check, and a failure re-arms it
    ) -> None:
        self.key = key
        self.scopes = scopes
        self.ttl = ttl
        self.codec = codec
        self.refresh = refresh


class _Ran:
    """What the fetch did when the tier called it: tells the fetch's exception from the tier's."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        self.outcome: tuple[bool, Any] | None = None  # (fetched, value or exception)

    def calling(self, fetch: Callable[[], Any]) -> Callable[[], Any]:
        def guarded() -> Any:
            with self._recording():
                return self._fetched(_call_sync(fetch))

        return guarded

    def acalling(self, fetch: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        async def guarded() -> Any:
            with self._recording():
                return self._fetched(await fetch())

        return guarded

    @contextmanager
    def _recording(self) -> Iterator[None]:
        try:
            yield
        except BaseException as error:
            self.outcome = (False, error)
            raise

    def _fetched(self, value: Any) -> Any:
        self.outcome = (True, value)
        return value


class _Leader:
    """A leader's work for one memory, over the memory's own parts (it holds no state of its own).

    Each step takes a :class:`_Plan`; :meth:`lead` and :meth:`alead` chain them into what the
    flight group runs for the leader of a flight.
    """

    __slots__ = ("clock", "copy", "counts", "flights", "lock", "settling", "shared", "store")

    def __init__(
        self,
        store: Store,
        lock: threading.Lock,
        flights: Group,
        counts: Counters,
        settling: Settlements,
        shared: SharedTier | None,
        clock: Callable[[], float],
        copy: bool,
    ) -> None:
        self.store = store
        self.lock = lock
        self.flights = flights
        self.counts = counts
        self.settling = settling
        self.shared = shared
        self.clock = clock
        self.copy = copy

    def plan(
        self, key: Key, scopes: tuple[Hashable, ...], ttl: float, codec: SharedCodec | None
    ) -> _Plan:
        """The plan of a load, its ``ttl`` capped by a settle of its scopes (the tier's too)."""
        return _Plan(key, scopes, self.settling.cap(key, scopes, ttl), codec)

    def copied(self, value: Any) -> Any:
        if not self.copy:
            return value
        import copy  # here: copy=True is the exception, and copy costs start-up time

        return copy.deepcopy(value)

    # -- the steps -----------------------------------------------------------------------------
    def _recheck(self, plan: _Plan, count: bool) -> _Led | None:
        """Step 1: the key may have been stored since the caller's lock-free miss."""
        if plan.refresh:
            return None
        with self.lock:
            entry = self.store.lookup(plan.key, self.clock())
        if entry is None:
            return None
        self.counts.hits += count
        return entry.value, "hit"

    def _fetch(self, plan: _Plan, fetch: Callable[[], Any], count: bool) -> TierResult:
        """Step 2, sync driver: the fetch, or the shared tier around it (see :meth:`_sorted`)."""
        if self.shared is None:
            self.counts.misses += count  # before the fetch: waiters see it counted
            return TierResult(_call_sync(fetch), "fetched")
        ran, shared = _Ran(), self.shared
        attempt = _attempt(
            lambda: shared.load(plan.key, plan.scopes, plan.ttl, ran.calling(fetch), plan.codec)
        )
        result = self._sorted(attempt, ran, count)
        if result is None:  # the tier broke before the fetch ran: run it here
            attempt = _attempt(lambda: TierResult(ran.calling(fetch)(), "fetched"))
            result = self._sorted(attempt, ran, count)
        assert result is not None  # the fetch ran: its value, or its exception raised
        return result

    async def _afetch(
        self, plan: _Plan, fetch: Callable[[], Awaitable[Any]], count: bool
    ) -> TierResult:
        """Step 2, async driver: as :meth:`_fetch`, the calls awaited."""
        if self.shared is None:
            self.counts.misses += count
            return TierResult(await fetch(), "fetched")
        ran, shared = _Ran(), self.shared
        attempt = await _aattempt(
            shared.aload(plan.key, plan.scopes, plan.ttl, ran.acalling(fetch), plan.codec)
        )
        result = self._sorted(attempt, ran, count)
        if result is None:
            attempt = await _aattempt(_fetched(ran.acalling(fetch)()))
            result = self._sorted(attempt, ran, count)
        assert result is not None
        return result

    def _sorted(self, attempt: _Attempt, ran: _Ran, count: bool) -> TierResult | None:
        """What a call of the tier's load (or, after it broke, of the fetch) came to, counted:
        the result, or ``None`` when the tier broke before the fetch ran (the driver then runs
        the fetch itself). Raises what must reach the caller (see :meth:`_fault`)."""
        returned, got = attempt
        result: TierResult | None = got if returned else self._fault(got, ran, count)
        if result is not None and count:
            self.counts.led(result.outcome)
        return result

    def _fault(self, error: BaseException, ran: _Ran, count: bool) -> TierResult | None:
        """Sort out an exception out of that call: the fetch's own, or the tier's fault.

        The tier should absorb its own failures (see ``tier.py``); one that does not is counted
        as a shared error and never reaches the caller: a tier that broke after the fetch ran
        yields the fetched value, one that broke before it ``None``. The fetch's exception, and
        any that is not an ``Exception`` (cancellation, ``KeyboardInterrupt``), propagate
        unchanged.
        """
        if isinstance(error, Exception):
            if ran.outcome is None:
                self.counts.shared_faults += 1
                return None
            fetched, got = ran.outcome
            if fetched:
                self.counts.shared_faults += 1
                return TierResult(got, "fetched")
            error = got  # the fetch's own exception, as the tier passed it on or not
        self.counts.misses += count  # the fetch ran, and failed (or the call was stopped)
        raise error

    def _commit(self, flight: Flight, plan: _Plan, result: TierResult) -> _Led:
        """Step 3: store the result, unless an invalidation detached the flight meanwhile."""
        kept = self.copied(result.value) if result.keep_local else None
        with self.flights.committing(flight) as current, self.lock:
            if current and result.keep_local:
                # Capped again: a fetch that began before a settle must not outlive it, nor a
                # copy of a shared entry that entry.
                ttl = self.settling.cap(plan.key, plan.scopes, plan.ttl)
                if result.left is not None:
                    ttl = min(ttl, max(result.left, 0.001))
                self.store.put(plan.key, kept, ttl, plan.scopes, self.clock())
            elif plan.refresh:
                self.store.rearm(plan.key, self.clock())
        return result.value, result.outcome

    def _failed(self, plan: _Plan) -> None:
        if plan.refresh:  # the old value stays until its TTL; a later hit retries
            with self.lock:
                self.store.rearm(plan.key, self.clock())

    # -- the drivers: the same steps, the fetch awaited or not ---------------------------------
    def lead(self, plan: _Plan, fetch: Callable[[], Any]) -> Lead:
        def lead(flight: Flight, count: bool) -> _Led:
            led = self._recheck(plan, count)
            if led is not None:
                return led
            try:
                result = self._fetch(plan, fetch, count)
            except BaseException:
                self._failed(plan)
                raise
            return self._commit(flight, plan, result)

        return lead

    def alead(self, plan: _Plan, fetch: Callable[[], Awaitable[Any]]) -> AsyncLead:
        async def lead(flight: Flight, count: bool) -> _Led:
            led = self._recheck(plan, count)
            if led is not None:
                return led
            try:
                result = await self._afetch(plan, fetch, count)
            except BaseException:
                self._failed(plan)
                raise
            return self._commit(flight, plan, result)

        return lead

    def loaded(self, led: _Led, leading: bool, info: object, leader: object) -> Loaded:
        """What a caller of load / aload reads, from what :class:`Group` returned."""
        value, outcome = led
        if not leading:
            return Loaded(self.copied(value), "coalesced", "local", leader)
        served, tier = SERVED[outcome]
        return Loaded(self.copied(value), served, tier, info if served == "miss" else None)

    def refresh(
        self, entry: Entry, fetch: Callable[[], Any], is_async: bool, codec: SharedCodec | None
    ) -> None:
        """Start the one background refresh of ``entry``, unless it is not due (any more)."""
        with self.lock:
            if not self.store.claim_refresh(entry, self.clock()):
                return
        plan = _Plan(entry.key, entry.scopes, entry.ttl, codec, refresh=True)
        lead = self.alead(plan, fetch) if is_async else self.lead(plan, fetch)
        if not self.flights.refresh(entry.key, entry.scopes, lead, is_async=is_async):
            self._failed(plan)  # a flight of the key runs already, or no loop runs to refresh in


class _KeyedMemory:
    """A cache by key, whole by itself: its parts, and the interface adapters and the runtime
    call (lookup, load, aload, invalidate_scope, drop_local, stats).

    The adapters build their keys themselves (any hashable); queries, options and their checks
    are :class:`WorkingMemory`'s. Arguments are taken as checked.
    """

    def __init__(
        self,
        max_entries: int,
        ttl: float,
        clock: Callable[[], float],
        refresh_after: float | None,
        shared: SharedTier | None,
        copy: bool,
    ) -> None:
        self._lock = threading.Lock()  # serialises every change to the store
        self._max_entries = max_entries
        self._refresh_after = refresh_after
        self._clock = clock
        self._shared = shared
        self._copy = copy
        self._store = Store(max_entries, refresh_after)
        self._ttl = ttl  # the default of a load, and of a set
        self._keys = KeyMemo(min(4096, max(64, 4 * max_entries)))
        self._flights = Group()
        self._counts = Counters()
        self._settling = Settlements(clock, self._drop_settled)
        self._dropped: list[Dropped] = []  # listeners, called after each drop (see on_drop)
        self._leader = _Leader(
            self._store,
            self._lock,
            self._flights,
            self._counts,
            self._settling,
            shared,
            clock,
            copy,
        )
        if shared is not None:
            shared.bind(self)
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``forks.py``): a new lock. A thread of the parent that held the
        old one at the fork may have left the store half changed: then the child starts empty."""
        held = self._lock.locked()  # the forking thread never forks holding it
        self._lock = self._leader.lock = threading.Lock()
        if held:
            self._store = self._leader.store = Store(self._max_entries, self._refresh_after)

    def lookup(
        self,
        key: Key,
        fetch: Callable[[], Any] | None = None,
        *,
        is_async: bool = False,
        codec: SharedCodec | None = None,
    ) -> Any:
        """The live value stored under ``key`` counted as a hit, or :data:`MISSING` (not counted).

        Lock-free on a live entry due no refresh (see ``store.py``). With ``refresh_after`` set
        and ``fetch`` given, an old enough hit also starts the single background refresh of its
        key: in a thread, or in a task of the running asyncio loop when ``is_async`` (then
        ``fetch`` returns an awaitable), through the shared tier with ``codec`` as :meth:`load`
        does. Adapters build ``key`` themselves (any hashable); on ``MISSING`` they call
        :meth:`load`.
        """
        now = self._clock()
        entry = self._store.find(key, now)
        if entry is None:  # missing, expired or due a refresh: look again under the lock
            with self._lock:
                entry = self._store.lookup(key, now)
            if entry is None:
                return MISSING
            if entry.fresh <= now and fetch is not None:  # due a refresh: refresh_after is set
                self._leader.refresh(entry, fetch, is_async, codec)
        self._counts.hits += 1
        return self._copied(entry.value) if self._copy else entry.value

    def load(
        self,
        key: Key,
        fetch: Callable[[], Any],
        *,
        ttl: float | None = None,
        scopes: tuple[Hashable, ...] = (),
        info: object = None,
        codec: SharedCodec | None = None,
        flight: Hashable | None = None,
    ) -> Loaded:
        """Look ``key`` up; on a miss lead or join its single fetch, in this thread.

        Callers share a fetch only when both ``key`` and ``flight`` match (``None``: the key
        itself), so callers whose requests differ in what decides the outcome (retries,
        timeouts...) pass different ``flight`` keys; the value is stored under ``key`` either
        way. The leader asks the shared tier, if any, which may answer from its store, from
        another process's fetch, or by running ``fetch``. The result is stored under ``key`` for
        ``ttl`` seconds (default: the memory's) with ``scopes`` for :meth:`invalidate_scope`,
        unless an invalidation or ``set`` of the key came meanwhile. ``info`` is this caller's
        handle (e.g. a span context); a follower gets the leader's in :attr:`Loaded.leader`.
        Counts exactly one of hit, miss, coalesced. ``fetch``'s exception propagates unchanged to
        every caller sharing it and is cached nowhere. ``codec`` says how the value crosses the
        shared tier (see :class:`~wm_middleware._core.tier.SharedCodec`).

        Raises:
            TypeError, ValueError: bad ``fetch`` (see :meth:`search`) or ``ttl``.
            RuntimeError: ``fetch`` asked for ``key`` while computing it.
        """
        plan = self._plan(key, fetch, ttl, scopes, codec, is_async=False)
        led, leading, leader = self._flights.do(
            key, self._leader.lead(plan, fetch), flight=flight, scopes=scopes, info=info
        )
        return self._leader.loaded(led, leading, info, leader)

    async def aload(
        self,
        key: Key,
        fetch: Callable[[], Awaitable[Any]],
        *,
        ttl: float | None = None,
        scopes: tuple[Hashable, ...] = (),
        info: object = None,
        codec: SharedCodec | None = None,
        flight: Hashable | None = None,
    ) -> Loaded:
        """Async :meth:`load`.

        Under asyncio the leader's fetch runs in a task of its own: a cancelled caller never
        cancels it for the others; it is cancelled only when every caller waiting for it is
        gone. Under another event loop (trio, through anyio) no asyncio loop runs: the caller
        leads the fetch in its own task (threads and asyncio callers may join it), or fetches
        alone when a flight of the key runs already; the result is stored by the same rule.
        """
        plan = self._plan(key, fetch, ttl, scopes, codec, is_async=True)
        led, leading, leader = await self._flights.ado(
            key, self._leader.alead(plan, fetch), flight=flight, scopes=scopes, info=info
        )
        return self._leader.loaded(led, leading, info, leader)

    def peek(self, key: Key) -> Any:
        """The live value stored under ``key`` (what a hit would serve now), or :data:`MISSING`.
        Counts nothing, refreshes neither recency nor the entry."""
        entry = self._store.live(key, self._clock())
        return MISSING if entry is None else entry.value

    def entries(self, *scopes: Hashable) -> list[tuple[Key, Any, float, tuple[Hashable, ...]]]:
        """``(key, value, age, its scopes)`` of each live entry carrying any of ``scopes``;
        ``age``: seconds since it was stored (0 when unknown). Counts nothing, refreshes
        neither recency nor the entry."""
        now = self._clock()
        with self._lock:
            keys = {key for scope in scopes for key in self._store.keys_of(scope)}
            live = [entry for key in keys if (entry := self._store.live(key, now)) is not None]
        return [(e.key, e.value, _age(now, e.expires - e.ttl), e.scopes) for e in live]

    def count_near(self, verdict: str, bound: float = 0.0) -> None:
        """Count one near-duplicate comparison or near hit: ``verdict`` is one of :data:`NEAR`
        (``agreed`` and ``disagreed`` also count a candidate; ``served`` keeps the highest
        ``bound`` a near hit was served under)."""
        counts = self._counts
        counts.near[verdict] += 1  # a KeyError for a verdict that is none
        if verdict in ("agreed", "disagreed"):
            counts.near["candidates"] += 1
        elif verdict == "served":
            counts.near_bound = max(counts.near_bound, bound)

    def invalidate_scope(self, *scopes: Hashable) -> int:
        """Drop every entry carrying any of ``scopes``; return how many were dropped here.

        Adapters tag entries with scopes (a tenant, a container tag, a namespace) when they store
        them; a write then drops exactly what it could have changed. In-flight fetches carrying a
        scope are detached as by :meth:`invalidate`. The shared tier, if any, is told too.
        """
        if not scopes:
            return 0
        dropped = self.drop_local(scopes=scopes)
        self._tell_tier((), scopes)
        return dropped

    def drop_local(
        self,
        *,
        keys: Iterable[Hashable] = (),
        scopes: Iterable[Hashable] = (),
        everything: bool = False,
    ) -> int:
        """Drop matching entries of this process only, and detach matching flights.

        What a shared tier calls when another process invalidates; never calls the tier back.
        Returns how many entries were dropped.
        """
        keys, scopes = tuple(keys), tuple(scopes)
        with self._flights.forgetting(keys, scopes, everything=everything), self._lock:
            if everything:
                self._keys.clear()  # the query text it holds lives no longer than the entries
                dropped = self._store.clear()
            else:
                dropped = self._store.drop(keys, scopes)
        for listener in self._dropped:  # outside the locks: a listener may take its own
            listener(keys, scopes, everything)
        return dropped

    def on_drop(self, listener: Dropped) -> None:
        """Call ``listener(keys, scopes, everything)`` after every drop of this process's
        entries: each invalidation here, and another process's heard through the shared tier
        (whatever keeps copies beside the memory forgets them with it). It must not raise."""
        self._dropped.append(listener)

    def __len__(self) -> int:
        """Entries stored now, pinned ones included."""
        return len(self._store)

    def stats(self) -> CacheStats:
        """A snapshot of the counters, taken under the lock."""
        inflight = len(self._flights)  # ends dead flights first, so takes the group's lock
        tier_errors = 0
        if self._shared is not None:
            try:
                tier_errors = self._shared.errors
            except Exception:  # a broken tier must not break the stats (or the telemetry)
                pass
        with self._lock:
            return self._counts.snapshot(
                self._store, joined=self._flights.joined, inflight=inflight, tier_errors=tier_errors
            )

    def _plan(
        self,
        key: Key,
        fetch: object,
        ttl: float | None,
        scopes: tuple[Hashable, ...],
        codec: SharedCodec | None,
        *,
        is_async: bool,
    ) -> _Plan:
        """The plan of a load, from its checked arguments."""
        _check_fetch(fetch, is_async=is_async)
        seconds = self._ttl if ttl is None else check_seconds("ttl", ttl)
        return self._leader.plan(key, scopes, seconds, codec)

    def _copied(self, value: Any) -> Any:
        return self._leader.copied(value)

    def _drop_settled(self, scopes: tuple[Hashable, ...]) -> None:
        """A settle ended: its scopes (and entries keyed by a scope, a plain query) go."""
        self.drop_local(keys=scopes, scopes=scopes)
        self._tell_tier(scopes, scopes)

    def _tell_tier(self, keys: tuple[Hashable, ...] | None, scopes: tuple[Hashable, ...]) -> None:
        """Pass an invalidation on to the shared tier (``keys=None``: everything).

        Called outside the locks: the tier calls :meth:`drop_local` of every bound memory, this
        one included. A tier that raises is counted as a shared error; the caller's write does
        not fail for it.
        """
        shared = self._shared
        if shared is None:
            return
        try:
            if keys is None:
                shared.clear()
            else:
                shared.invalidate(keys=keys, scopes=scopes)
        except Exception:
            self._counts.shared_faults += 1


class WorkingMemory(_KeyedMemory, Generic[T]):
    """An LRU + TTL cache of search results with single-flight fetching.

    Args (all keyword-only):
        max_entries: how many unpinned entries to keep. When full, expired entries go first,
            then the least recently used.
        ttl: default seconds an entry lives, checked on read against ``clock``.
        clock: a monotonic clock in seconds (tests pass a fake one).
        refresh_after: seconds after which a hit returns the stored value at once and starts one
            background refresh of it (stale-while-revalidate). Must be below ``ttl``. A refresh
            keeps the entry's own ``ttl``; one that fails leaves the old value until it expires.
        shared: an optional second tier shared with other processes (``RedisTier``). Lookups go
            L1, then the in-process flight, then the tier, then the fetch. ``get``, ``set``,
            ``has`` and ``pin`` stay local; ``invalidate``, ``invalidate_scope`` and ``clear``
            reach the tier too.
        copy: ``False`` (the default): every caller gets the very object that was stored, so a
            caller that mutates its result changes what the next caller gets. ``True``: the
            value is deep-copied (:func:`copy.deepcopy`) when stored and again for every caller
            (hit, miss or coalesced), so no caller's mutation ever reaches the cache or another
            caller. Off by default because a deep copy costs on every hit (about 250 µs for a
            search response of 10 results, against well under 1 µs for a hit without it).
            ``instrument()`` and ``wrap()`` need neither: they store an immutable snapshot and
            build a fresh object per caller.

    Keys are the query (outer whitespace stripped, inner runs folded, case kept) plus every
    keyword parameter, order-independent.

    Raises:
        TypeError, ValueError: on a bad argument, with a message naming it.
    """

    def __init__(
        self,
        *,
        max_entries: int = 100,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        refresh_after: float | None = None,
        shared: SharedTier | None = None,
        copy: bool = False,
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int):
            raise TypeError(f"max_entries must be an int, not {type(max_entries).__name__}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        ttl = check_seconds("ttl", ttl)
        if not callable(clock):
            raise TypeError(f"clock must be callable, not {type(clock).__name__}")
        if refresh_after is not None:
            refresh_after = check_seconds("refresh_after", refresh_after)
            if refresh_after >= ttl:
                raise ValueError(f"refresh_after must be below ttl ({ttl}), got {refresh_after}")
        if shared is not None and not _is_shared_tier(shared):
            raise TypeError(
                f"shared must be a SharedTier (e.g. RedisTier), not {type(shared).__name__}"
            )
        if not isinstance(copy, bool):
            raise TypeError(f"copy must be a bool, not {type(copy).__name__}")
        super().__init__(max_entries, ttl, clock, refresh_after, shared, copy)

    # -- configuration -------------------------------------------------------------------------
    @property
    def max_entries(self) -> int:
        """How many unpinned entries are kept."""
        return self._max_entries

    @property
    def ttl(self) -> float:
        """The default time to live, in seconds."""
        return self._ttl

    @property
    def refresh_after(self) -> float | None:
        """Age in seconds after which a hit triggers a background refresh, or ``None``."""
        return self._refresh_after

    @property
    def shared(self) -> SharedTier | None:
        """The shared second tier, or ``None``."""
        return self._shared

    @property
    def copy(self) -> bool:
        """Whether values are deep-copied on the way in and out (see the class docstring)."""
        return self._copy

    @property
    def refreshing(self) -> int:
        """Background refreshes still running (also those whose key was invalidated since)."""
        return self._flights.background

    def __repr__(self) -> str:
        return (
            f"WorkingMemory(max_entries={self._max_entries}, ttl={self._ttl}, "
            f"refresh_after={self._refresh_after}, size={len(self)})"
        )

    # -- by query ------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        fetch: Callable[[], T],
        *,
        ttl: float | None = None,
        container_tags: Any = UNSET,
        limit: Any = UNSET,
        **params: Any,
    ) -> T:
        """Return the cached value for ``query`` and ``params``, or call ``fetch()`` once for it.

        Concurrent callers of one key (threads, or a mix with :meth:`asearch`) share one call of
        ``fetch``. Its exception reaches every caller sharing it and is not cached. ``ttl``
        overrides the default for the stored value; it is checked on a hit too. Every option is
        keyword-only. ``container_tags`` and ``limit`` are parameters like any other (named or
        in ``**params``, they make the same key); they are named because most searches carry
        them, and their key is memoised as they come.

        Raises:
            TypeError: ``fetch`` is not callable, is an ``async def`` function or returns an
                awaitable (nothing is cached); a parameter cannot be frozen into a key.
            ValueError: a bad ``ttl``, or parameters nested too deeply.
            RuntimeError: ``fetch`` asked for its own key while computing it.
        """
        # A str query alone is first tried as its own key: one in normal form is its key
        # (normalising is idempotent, and a key with parameters is never a str), so the common
        # hit builds no key. Any other query is normalised, refusing what cannot be a key.
        plain = not params and container_tags is UNSET and limit is UNSET and type(query) is str
        key = query if plain else self._keys.search_key(query, container_tags, limit, params)
        if ttl is not None or not callable(fetch):
            _check_search(fetch, ttl)
        entry = self._store.find(key, self._clock())
        if entry is not None:  # the common hit: a live entry due no refresh
            self._counts.hits += 1
            return self._copied(entry.value) if self._copy else entry.value  # type: ignore[no-any-return]
        key = self._keys.query(query) if plain else key  # the query may not be in normal form
        value = self.lookup(key, fetch)  # a hit due a refresh (which it starts), or a miss
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        loaded = self.load(key, fetch, ttl=ttl, scopes=self._keys.scopes(query, key))
        return loaded.value  # type: ignore[no-any-return]

    async def asearch(
        self,
        query: str,
        fetch: Callable[[], Awaitable[T]],
        *,
        ttl: float | None = None,
        container_tags: Any = UNSET,
        limit: Any = UNSET,
        **params: Any,
    ) -> T:
        """Async :meth:`search`: ``fetch()`` returns an awaitable. See :meth:`aload`."""
        plain = not params and container_tags is UNSET and limit is UNSET and type(query) is str
        key = query if plain else self._keys.search_key(query, container_tags, limit, params)
        if ttl is not None or not callable(fetch):
            _check_search(fetch, ttl)
        entry = self._store.find(key, self._clock())  # probed as in search()
        if entry is not None:
            self._counts.hits += 1
            return self._copied(entry.value) if self._copy else entry.value  # type: ignore[no-any-return]
        key = self._keys.query(query) if plain else key
        value = self.lookup(key, fetch, is_async=True)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        loaded = await self.aload(key, fetch, ttl=ttl, scopes=self._keys.scopes(query, key))
        return loaded.value  # type: ignore[no-any-return]

    def get(self, query: str, **params: Any) -> T | None:
        """The live value for ``query`` and ``params``, or ``None``. Counts a hit or a miss."""
        key = make_key(query, params)
        with self._lock:
            entry = self._store.lookup(key, self._clock())
        if entry is None:
            self._counts.misses += 1
            return None
        self._counts.hits += 1
        return self._copied(entry.value)  # type: ignore[no-any-return]

    def set(
        self, query: str, value: T, *, ttl: float | None = None, pin: bool = False, **params: Any
    ) -> None:
        """Store ``value`` for ``query`` and ``params``; ``pin=True`` pins it on insert.

        Setting a pinned key replaces its value and keeps it pinned. An explicit set wins over a
        fetch or refresh of the key in flight: that one still answers its own callers, but its
        result is not stored. Local to this process, even with a shared tier.
        """
        key = make_key(query, params)
        seconds = self._ttl if ttl is None else check_seconds("ttl", ttl)
        scopes = (normalise_query(query),) if params else ()
        kept = self._copied(value)
        with self._flights.forgetting(keys=(key,)), self._lock:
            self._store.put(key, kept, seconds, scopes, self._clock(), pin=pin)

    def has(self, query: str, **params: Any) -> bool:
        """True when a live entry exists. Counts nothing and does not refresh recency."""
        return self._store.has(make_key(query, params), self._clock())

    def pin(self, query: str, **params: Any) -> bool:
        """Pin a live entry: immune to LRU eviction and expiry until unpinned. True if pinned."""
        key = make_key(query, params)
        with self._lock:
            return self._store.pin(key, self._clock())

    def unpin(self, query: str, **params: Any) -> bool:
        """Return a pinned entry to the LRU as most recent, with a fresh TTL. True if unpinned."""
        key = make_key(query, params)
        with self._lock:
            return self._store.unpin(key, self._clock(), self._ttl)

    # -- invalidation --------------------------------------------------------------------------
    def invalidate(self, query: str | None = None, **params: Any) -> int:
        """Drop entries and return how many were dropped here.

        ``invalidate()`` drops everything; ``invalidate(q)`` drops every entry of query ``q``
        whatever its parameters; ``invalidate(q, **params)`` drops that one entry. A fetch in
        flight for a dropped key still answers its own callers but never stores its result, and
        callers arriving afterwards start a new fetch. The shared tier, if any, is told too.
        """
        if query is None:
            if params:
                raise TypeError("invalidate() with parameters needs a query")
            dropped = self.drop_local(everything=True)
            self._tell_tier(None, ())
            return dropped
        if params:
            key = make_key(query, params)
            dropped = self.drop_local(keys=(key,))
            self._tell_tier((key,), ())
            return dropped
        normalised = normalise_query(query)
        dropped = self.drop_local(keys=(normalised,), scopes=(normalised,))
        self._tell_tier((normalised,), (normalised,))
        return dropped

    def clear(self) -> None:
        """Drop every entry (pinned ones too), detach every fetch in flight, tell the tier."""
        self.invalidate()

    # -- settling ------------------------------------------------------------------------------
    def settle(
        self,
        *scopes: Hashable,
        within: float,
        until: Callable[[], object] | None = None,
        every: float = 1.0,
    ) -> Settle:
        """Mark ``scopes`` as settling: a write to them is accepted but not yet readable.

        For a backend that applies writes asynchronously (Supermemory indexes each document for
        seconds): while the scopes settle, every entry stored for them lives at most until the
        settle ends, and when it ends the scopes are dropped (here, and in the shared tier), so
        the next read fetches the settled state. It ends at the first of:

        * ``until()`` returning true, polled every ``every`` seconds on a background thread
          (its exceptions mean "not yet");
        * :meth:`Settle.end` called on the returned handle (e.g. by your own status check);
        * ``within`` seconds from now: then normal caching resumes.

        A scope is what :meth:`invalidate_scope` takes, or a query (str, normalised as by
        :meth:`invalidate`): ``settle("user prefs", ...)`` covers that query's entries whatever
        their parameters. Entries already stored are not shortened but are dropped at the end;
        drop them now with :meth:`invalidate` if the write changed them at once. Hits are
        untouched: nothing is checked on the hit path.

        Raises:
            TypeError: an unhashable scope, a non-callable or ``async`` ``until``, a non-number.
            ValueError: no scope, or ``within`` / ``every`` not a finite number of seconds > 0.
        """
        return self._settling.begin(scopes, within=within, until=until, every=every)

    def settling(self, *scopes: Hashable) -> bool:
        """True while any of ``scopes`` (as for :meth:`settle`) settles."""
        return self._settling.settling(scopes)
