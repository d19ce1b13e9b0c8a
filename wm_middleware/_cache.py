"""The working memory: an LRU + TTL cache with pinning, scopes, statistics and single-flight.

Knows nothing of Supermemory, HTTP or OpenTelemetry: values are opaque and returned as stored.
Client adapters keep callers from corrupting entries by storing an immutable snapshot and
rebuilding a fresh object per call (see ``wm_middleware._runtime``), not in here. Who fetches a
missing key, and who waits for whom, is :class:`~wm_middleware._singleflight.Group`'s business.

Concurrency model. One ``threading.Lock`` guards every structure below and the flight table. The
hit path does not take it: a hit is a dict probe, a deadline check, an ``OrderedDict.move_to_end``
and an integer increment, each atomic under the GIL; a hit that races an eviction of the same key
still returns the value it read, which was live when read. Everything that changes membership
(store, expire, evict, invalidate, pin, flights) runs under the lock.

Expiry order. With a per-call ``ttl`` the order in which entries expire is not the LRU order, so
each distinct TTL has a queue of its entries in insertion order, which is their expiry order. When
the cache is full the heads of those queues that have expired go first, then the least recently
used entry. Queues are cleaned lazily (an entry dropped otherwise stays queued until it reaches
the head, or until the queues hold twice the entries and are compacted): O(1) amortised per store,
plus one probe per distinct TTL on an eviction. Past 32 distinct TTLs, new ones share the nearest
queue, which bounds that probe and makes "expired first" a best effort for them.
"""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar, cast

from ._keys import UNSET, Key, KeyMemo, make_key, normalise_query
from ._singleflight import MISSING, AsyncLoad, Group, Load
from ._tier import SharedCodec, SharedTier, TierOutcome, TierResult

__all__ = ["MISSING", "CacheStats", "Loaded", "Outcome", "Tier", "WorkingMemory"]

T = TypeVar("T")
Outcome = Literal["hit", "miss", "coalesced"]
Tier = Literal["local", "shared"]
_INF: Final = math.inf
_MAX_QUEUES: Final = 32  # expiry queues, one per distinct TTL up to this many

# How the group's answer reads for the caller: (outcome, tier).
_SERVED: Final[dict[str, tuple[Outcome, Tier]]] = {
    "hit": ("hit", "local"),
    "coalesced": ("coalesced", "local"),
    "fetched": ("miss", "local"),
    "shared_hit": ("hit", "shared"),
    "shared_wait": ("coalesced", "shared"),
}


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A consistent snapshot of a :class:`WorkingMemory`'s counters.

    Every lookup (``get``, ``search``, ``asearch``, ``load``, ``aload``) counts exactly one of
    ``hits``, ``misses`` and ``coalesced`` (joined a fetch already in flight). ``evictions`` are
    LRU drops at ``max_entries``; ``expirations`` are entries found, or dropped to make room, past
    their TTL; ``invalidations`` are entries dropped by ``invalidate``, ``invalidate_scope``,
    ``clear`` or the shared tier. ``size`` counts pinned entries too; ``inflight`` is the number
    of fetches running now.

    With a shared tier: a value the tier had stored is a hit and also a ``shared_hit``; a lookup
    that waited for another process's fetch is ``coalesced`` and also a ``shared_wait``; ``misses``
    are the fetches this process ran. ``shared_errors`` are tier operations that failed or timed
    out and were treated as a miss.
    """

    hits: int = 0
    misses: int = 0
    coalesced: int = 0
    evictions: int = 0
    expirations: int = 0
    invalidations: int = 0
    size: int = 0
    inflight: int = 0
    shared_hits: int = 0
    shared_waits: int = 0
    shared_errors: int = 0

    @property
    def lookups(self) -> int:
        """Every counted lookup."""
        return self.hits + self.misses + self.coalesced

    @property
    def hit_ratio(self) -> float:
        """Share of lookups that did not start a fetch of their own (0.0 with no lookups)."""
        lookups = self.lookups
        return (self.hits + self.coalesced) / lookups if lookups else 0.0


@dataclass(frozen=True, slots=True)
class Loaded:
    """What :meth:`WorkingMemory.load` returns: the value and how it was obtained.

    ``outcome`` is ``"hit"``, ``"miss"`` (this call ran the fetch) or ``"coalesced"`` (it shared
    another caller's fetch). ``tier`` is ``"shared"`` when the shared tier served it (a shared hit,
    or another process's fetch), else ``"local"``. ``leader`` is the ``info`` of the call whose
    fetch produced the value (this call's own on a miss; ``None`` on a hit or a shared result).
    """

    value: Any
    outcome: Outcome
    tier: Tier
    leader: object


class _Entry:
    """One stored value. ``expires``/``fresh`` are monotonic deadlines (``inf``: never).

    ``fresh`` is when a hit stops being plain: ``min(expires, refresh due)``, so the hit path
    compares one number. While a refresh of the entry runs it equals ``expires``.
    """

    __slots__ = ("expires", "fresh", "key", "scopes", "ttl", "value")

    def __init__(
        self,
        key: Key,
        value: Any,
        expires: float,
        fresh: float,
        ttl: float,
        scopes: tuple[Hashable, ...],
    ) -> None:
        self.key = key
        self.value = value
        self.expires = expires
        self.fresh = fresh
        self.ttl = ttl
        self.scopes = scopes


def _check_ttl(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


def _check_fetch(fetch: object, *, is_async: bool) -> None:
    if not callable(fetch):
        raise TypeError(f"fetch must be callable, not {type(fetch).__name__}")
    if not is_async and inspect.iscoroutinefunction(fetch):
        raise TypeError("fetch is an async function: use asearch / aload for it, not search / load")


def _call_sync(fetch: Callable[[], Any]) -> Any:
    """``fetch()``, refusing an awaitable: caching one would hand out a spent coroutine."""
    value = fetch()
    if inspect.isawaitable(value):
        if isinstance(value, Coroutine):
            value.close()  # never awaited, and never will be: no "never awaited" warning
        raise TypeError(
            "fetch returned an awaitable: use asearch / aload for an async fetch, not search / load"
        )
    return value


class WorkingMemory(Generic[T]):
    """An LRU + TTL cache of search results with single-flight fetching.

    Args:
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

    Keys are the query (outer whitespace stripped, inner runs folded, case kept) plus every
    keyword parameter, order-independent. Values are returned exactly as stored.

    Raises:
        TypeError, ValueError: on a bad argument, with a message naming it.
    """

    def __init__(
        self,
        max_entries: int = 100,
        ttl: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        refresh_after: float | None = None,
        shared: SharedTier | None = None,
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int):
            raise TypeError(f"max_entries must be an int, not {type(max_entries).__name__}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._ttl = _check_ttl("ttl", ttl)
        if not callable(clock):
            raise TypeError(f"clock must be callable, not {type(clock).__name__}")
        if refresh_after is not None:
            refresh_after = _check_ttl("refresh_after", refresh_after)
            if refresh_after >= self._ttl:
                raise ValueError(
                    f"refresh_after must be below ttl ({self._ttl}), got {refresh_after}"
                )
        if shared is not None and not isinstance(shared, SharedTier):
            raise TypeError(
                f"shared must be a SharedTier (e.g. RedisTier), not {type(shared).__name__}"
            )
        self._max_entries = max_entries
        self._refresh_after = refresh_after
        self._clock = clock
        self._shared = shared
        self._lock = threading.Lock()
        # lock (membership): unpinned entries in LRU order, oldest first; pinned ones apart.
        self._lru: OrderedDict[Key, _Entry] = OrderedDict()
        self._pinned: dict[Key, _Entry] = {}
        # Bound once: the hit path saves a method lookup on each.
        self._probe = self._lru.get
        self._touch = self._lru.move_to_end
        # lock: ttl -> unpinned entries stored with it, in insertion (= expiry) order; may hold
        # entries dropped since (they are skipped); ``_queued`` counts them all.
        self._expiry: dict[float, deque[_Entry]] = {}
        self._queued = 0
        # lock: scope -> the key, or the set of keys, of the entries that carry it. A lone key is
        # stored bare because most scopes (one query's parameter variants) hold one entry.
        self._index: dict[Hashable, Key | set[Key]] = {}
        self._memo = KeyMemo(min(4096, max(64, 4 * max_entries)))
        self._named_keys = self._memo.named_keys.get
        self._flights = Group(
            self._lock,
            lookup=self._lookup_locked,
            coalesced=self._count_coalesced,
            store=self._store_flight_locked,
            refresh_failed=self._refresh_failed_locked,
        )
        self._hits = 0  # incremented without the lock: ``x += 1`` on an int is atomic under the GIL
        self._misses = 0
        self._coalesced = 0
        self._evictions = 0
        self._expirations = 0
        self._invalidations = 0
        self._shared_hits = 0
        self._shared_waits = 0
        self._shared_faults = 0  # tier exceptions the tier should have absorbed itself
        if shared is not None:
            shared.bind(self)

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
    def refreshing(self) -> int:
        """Background refreshes still running (also those whose key was invalidated since)."""
        return self._flights.background

    def __repr__(self) -> str:
        return (
            f"WorkingMemory(max_entries={self._max_entries}, ttl={self._ttl}, "
            f"refresh_after={self._refresh_after}, size={len(self)})"
        )

    def __len__(self) -> int:
        return len(self._lru) + len(self._pinned)

    # -- public API ----------------------------------------------------------------------------
    def search(
        self,
        query: str,
        fetch: Callable[[], T],
        ttl: float | None = None,
        container_tags: Any = UNSET,
        limit: Any = UNSET,
        **params: Any,
    ) -> T:
        """Return the cached value for ``query`` and ``params``, or call ``fetch()`` once for it.

        Concurrent callers of one key (threads, or a mix with :meth:`asearch`) share one call of
        ``fetch``. Its exception reaches every caller sharing it and is not cached. ``ttl``
        overrides the default for the stored value.

        ``container_tags`` and ``limit`` are parameters like any other (given or not, they make
        the same key as in ``**params``). They are named because most searches carry them: a
        named argument costs the call no keyword dict, and their key is memoised as they come.
        ``ttl``, ``container_tags`` and ``limit`` may also be given by position, in that order.

        Raises:
            TypeError: ``fetch`` is not callable, is an ``async def`` function or returns an
                awaitable (nothing is cached); a parameter cannot be frozen into a key.
            ValueError: a bad ``ttl``, or parameters nested too deeply.
            RuntimeError: ``fetch`` asked for its own key while computing it.
        """
        # The hit path, inlined: it should cost little more than the dict probe it is. A query
        # already in normal form is its own key (normalising is idempotent, and keys with
        # parameters are frozensets, never equal to a str), so it is probed as given first.
        # Bound methods stored on self are called through locals: ``self._probe(...)`` compiles
        # to a LOAD_METHOD that CPython 3.11 cannot specialise for an instance attribute.
        probe = self._probe
        key: Key | None
        if container_tags is UNSET and limit is UNSET and not params:
            key = query
            try:
                entry = probe(query)
            except TypeError:  # unhashable: refused below, by normalising it
                entry = None
            if entry is None:
                key = self._memo.query(query)
                entry = probe(key)
        else:
            key = None
            if not params and (type(limit) is int or limit is UNSET):
                # The memo's probe, inlined: KeyMemo.named says what a slot is and why it is
                # exact. An unhashable query is refused by KeyMemo.named below.
                named = self._named_keys
                kind = type(container_tags)
                try:
                    if kind is list or kind is tuple:
                        key = named((query, limit, tuple(container_tags)))
                    elif container_tags is UNSET:
                        key = named((query, limit))
                except TypeError:
                    pass
            if key is None:
                key = self._memo.named(query, container_tags, limit, params)
            entry = probe(key)
        clock = self._clock
        if entry is not None and ttl is None and callable(fetch) and entry.fresh > clock():
            touch = self._touch
            try:
                touch(key)
            except KeyError:
                pass  # evicted since the probe: the value read was live
            self._hits += 1
            return entry.value  # type: ignore[no-any-return]
        _check_fetch(fetch, is_async=False)
        value = self.lookup(key, fetch)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        scopes = () if type(key) is str else (self._memo.query(query),)
        return self.load(key, fetch, ttl=ttl, scopes=scopes).value  # type: ignore[no-any-return]

    async def asearch(
        self,
        query: str,
        fetch: Callable[[], Awaitable[T]],
        ttl: float | None = None,
        container_tags: Any = UNSET,
        limit: Any = UNSET,
        **params: Any,
    ) -> T:
        """Async :meth:`search`: ``fetch()`` returns an awaitable.

        The fetch runs in a task of its own: a cancelled caller never cancels it for the others,
        and it is cancelled only when every caller waiting for it is gone.
        """
        # The same hit path as search(), inlined again: a shared helper's call would cost more
        # than a third of the hit.
        probe = self._probe
        key: Key | None
        if container_tags is UNSET and limit is UNSET and not params:
            key = query
            try:
                entry = probe(query)
            except TypeError:
                entry = None
            if entry is None:
                key = self._memo.query(query)
                entry = probe(key)
        else:
            key = None
            if not params and (type(limit) is int or limit is UNSET):
                named = self._named_keys
                kind = type(container_tags)
                try:
                    if kind is list or kind is tuple:
                        key = named((query, limit, tuple(container_tags)))
                    elif container_tags is UNSET:
                        key = named((query, limit))
                except TypeError:
                    pass
            if key is None:
                key = self._memo.named(query, container_tags, limit, params)
            entry = probe(key)
        clock = self._clock
        if entry is not None and ttl is None and callable(fetch) and entry.fresh > clock():
            touch = self._touch
            try:
                touch(key)
            except KeyError:
                pass
            self._hits += 1
            return entry.value  # type: ignore[no-any-return]
        _check_fetch(fetch, is_async=True)
        value = self.lookup(key, fetch, is_async=True)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        scopes = () if type(key) is str else (self._memo.query(query),)
        return (await self.aload(key, fetch, ttl=ttl, scopes=scopes)).value  # type: ignore[no-any-return]

    def get(self, query: str, **params: Any) -> T | None:
        """The live value for ``query`` and ``params``, or ``None``. Counts a hit or a miss."""
        key = make_key(query, params)
        value = self.lookup(key)
        if value is not MISSING:
            return cast(T, value)
        with self._lock:
            value = self._lookup_locked(key, True)
            if value is MISSING:
                self._misses += 1
                return None
            return cast(T, value)

    def set(
        self, query: str, value: T, *, ttl: float | None = None, pin: bool = False, **params: Any
    ) -> None:
        """Store ``value`` for ``query`` and ``params``; ``pin=True`` pins it on insert.

        Setting a pinned key replaces its value and keeps it pinned. An explicit set wins over a
        fetch or refresh of the key in flight: that one still answers its own callers, but its
        result is not stored. Local to this process, even with a shared tier.
        """
        key = make_key(query, params)
        seconds = self._ttl if ttl is None else _check_ttl("ttl", ttl)
        scopes = (normalise_query(query),) if params else ()
        with self._lock:
            self._flights.forget_locked(key)
            self._store_locked(key, value, seconds, scopes, pin=pin)

    def has(self, query: str, **params: Any) -> bool:
        """True when a live entry exists. Counts nothing and does not refresh recency."""
        key = make_key(query, params)
        if key in self._pinned:
            return True
        entry = self._lru.get(key)
        return entry is not None and entry.expires > self._clock()

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
        # A query's plain entry is keyed by the query; its parameter variants carry it as a scope.
        dropped = self.drop_local(keys=(normalised,), scopes=(normalised,))
        self._tell_tier((normalised,), (normalised,))
        return dropped

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

    def clear(self) -> None:
        """Drop every entry (pinned ones too), detach every fetch in flight, tell the tier."""
        self.invalidate()

    def _tell_tier(self, keys: tuple[Hashable, ...] | None, scopes: tuple[Hashable, ...]) -> None:
        """Pass an invalidation on to the shared tier (``keys=None``: everything).

        Called outside the lock: the tier calls :meth:`drop_local` of every bound memory, this
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
            self._shared_faults += 1

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
        keys = tuple(keys)
        wanted = frozenset(scopes)
        with self._lock:
            if everything:
                return self._clear_locked()
            for key in keys:
                self._flights.forget_locked(key)
            if wanted:
                self._flights.forget_matching_locked(lambda f: not wanted.isdisjoint(f.scopes))
            dropped: list[Key] = list(keys)
            for scope in wanted:
                dropped.extend(self._keys_of_scope_locked(scope))
            return self._drop_locked(dropped)

    def pin(self, query: str, **params: Any) -> bool:
        """Pin a live entry: immune to LRU eviction and expiry until unpinned. True if pinned."""
        key = make_key(query, params)
        with self._lock:
            if key in self._pinned:
                return True
            entry = self._lru.get(key)
            if entry is None or entry.expires <= self._clock():
                return False
            del self._lru[key]
            entry.fresh = _INF
            self._pinned[key] = entry
            return True

    def unpin(self, query: str, **params: Any) -> bool:
        """Return a pinned entry to the LRU as most recent, with a fresh TTL. True if unpinned."""
        key = make_key(query, params)
        with self._lock:
            entry = self._pinned.pop(key, None)
            if entry is None:
                return False
            # A new entry object: the old one may still sit in an expiry queue, and must read as
            # dropped there.
            now = self._clock()
            self._lru[key] = fresh = self._entry(key, entry.value, now, self._ttl, entry.scopes)
            self._queue_locked(fresh)
            self._evict_locked()
            return True

    def stats(self) -> CacheStats:
        """A snapshot of the counters, taken under the lock."""
        inflight = len(self._flights)  # ends dead flights first, so takes the lock itself
        shared_errors = self._shared_faults
        if self._shared is not None:
            try:
                shared_errors += self._shared.errors
            except Exception:  # a broken tier must not break the stats (or the telemetry)
                pass
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                coalesced=self._coalesced,
                evictions=self._evictions,
                expirations=self._expirations,
                invalidations=self._invalidations,
                size=len(self._lru) + len(self._pinned),
                inflight=inflight,
                shared_hits=self._shared_hits,
                shared_waits=self._shared_waits,
                shared_errors=shared_errors,
            )

    # -- the key-level interface: what client adapters call ------------------------------------
    def lookup(
        self,
        key: Key,
        fetch: Callable[[], Any] | None = None,
        *,
        is_async: bool = False,
        codec: SharedCodec | None = None,
    ) -> Any:
        """The live value stored under ``key`` counted as a hit, or :data:`MISSING` (not counted).

        Lock-free (see the module docstring). With ``refresh_after`` set and ``fetch`` given, an
        old enough hit also starts the single background refresh of its key: in a thread, or in
        a task of the running loop when ``is_async`` (then ``fetch`` returns an awaitable), through
        the shared tier with ``codec`` as :meth:`load` does. Adapters build ``key`` themselves (any
        hashable); on ``MISSING`` they call :meth:`load`.
        """
        probe = self._probe  # locals, not ``self._probe(...)``: see search()
        entry = probe(key)
        if entry is None:
            entry = self._pinned.get(key)
            if entry is None:
                return MISSING
            self._hits += 1
            return entry.value
        clock = self._clock
        now = clock()
        if entry.fresh <= now:
            if entry.expires <= now:
                return MISSING
            if fetch is not None and self._refresh_after is not None:
                self._start_refresh(entry, fetch, is_async, codec)
        touch = self._touch
        try:
            touch(key)
        except KeyError:
            pass  # evicted since the probe: the value read was live, so it is still a hit
        self._hits += 1
        return entry.value

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
        """Look ``key`` up under the lock; on a miss lead or join its single fetch, in this thread.

        The leader asks the shared tier, if any, which may answer from its store, from another
        process's fetch, or by running ``fetch``. The result is stored under ``key`` for ``ttl``
        seconds (default: the memory's) with ``scopes`` for :meth:`invalidate_scope`, unless an
        invalidation or ``set`` of the key came meanwhile. ``info`` is this caller's handle (e.g.
        a span context); a follower gets the leader's in :attr:`Loaded.leader`. Counts exactly
        one of hit, miss, coalesced. ``fetch``'s exception propagates unchanged to every caller
        sharing it and is cached nowhere. ``codec`` says how the value crosses the shared tier
        (see :class:`~wm_middleware._tier.SharedCodec`; default: the tier's own rule). A caller
        joins an in-flight fetch only with the same key and the same ``flight`` (``None``: the key
        alone); one with another ``flight`` fetches beside it, and the leader's value is stored.

        Raises:
            TypeError: bad ``fetch`` (see :meth:`search`) or ``ttl``.
            RuntimeError: ``fetch`` asked for ``key`` while computing it.
        """
        _check_fetch(fetch, is_async=False)
        seconds = self._ttl if ttl is None else _check_ttl("ttl", ttl)
        value, how, leader = self._flights.do(
            key, self._sync_load(key, scopes, seconds, fetch, codec), seconds, scopes, info, flight
        )
        outcome, tier = _SERVED[how]
        return Loaded(
            value, outcome, tier, leader if outcome != "hit" and tier == "local" else None
        )

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
        """Async :meth:`load`: the leader's fetch runs in a task of its own on this loop.

        A cancelled caller never cancels the fetch for the others; it is cancelled only when every
        caller waiting for it is gone.
        """
        _check_fetch(fetch, is_async=True)
        seconds = self._ttl if ttl is None else _check_ttl("ttl", ttl)
        value, how, leader = await self._flights.ado(
            key,
            self._async_load(key, scopes, seconds, fetch, codec),
            seconds,
            scopes,
            info,
            flight,
        )
        outcome, tier = _SERVED[how]
        return Loaded(
            value, outcome, tier, leader if outcome != "hit" and tier == "local" else None
        )

    # -- what a leader runs: the fetch, or the shared tier around it ----------------------------
    def _count_led(self, outcome: TierOutcome) -> None:
        if outcome == "shared_hit":
            self._hits += 1
            self._shared_hits += 1
        elif outcome == "shared_wait":
            self._coalesced += 1
            self._shared_waits += 1
        else:
            self._misses += 1

    def _count_coalesced(self) -> None:
        self._coalesced += 1

    def _sync_load(
        self,
        key: Key,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Any],
        codec: SharedCodec | None = None,
    ) -> Load:
        shared = self._shared
        if shared is None:

            def load(count: bool) -> TierResult:
                if count:
                    self._misses += 1
                return TierResult(_call_sync(fetch), "fetched")

            return load
        ran: list[tuple[bool, Any]] = []  # what the fetch did, if the tier called it

        def guarded() -> Any:
            try:
                value = _call_sync(fetch)
            except BaseException as error:
                ran.append((False, error))
                raise
            ran.append((True, value))
            return value

        def load_shared(count: bool) -> TierResult:
            try:
                try:
                    result = shared.load(key, scopes, ttl, guarded, codec=codec)
                except Exception as error:
                    result = self._tier_fault(error, ran) or TierResult(guarded(), "fetched")
            except BaseException:
                if count:
                    self._misses += 1  # the fetch ran, and failed
                raise
            if count:
                self._count_led(result.outcome)
            return result

        return load_shared

    def _async_load(
        self,
        key: Key,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Awaitable[Any]],
        codec: SharedCodec | None = None,
    ) -> AsyncLoad:
        shared = self._shared
        if shared is None:

            async def load(count: bool) -> TierResult:
                if count:
                    self._misses += 1
                return TierResult(await fetch(), "fetched")

            return load
        ran: list[tuple[bool, Any]] = []

        async def guarded() -> Any:
            try:
                value = await fetch()
            except BaseException as error:
                ran.append((False, error))
                raise
            ran.append((True, value))
            return value

        async def load_shared(count: bool) -> TierResult:
            try:
                try:
                    result = await shared.aload(key, scopes, ttl, guarded, codec=codec)
                except Exception as error:
                    result = self._tier_fault(error, ran) or TierResult(await guarded(), "fetched")
            except BaseException:
                if count:
                    self._misses += 1
                raise
            if count:
                self._count_led(result.outcome)
            return result

        return load_shared

    def _tier_fault(self, error: Exception, ran: list[tuple[bool, Any]]) -> TierResult | None:
        """Sort out an exception out of the tier's load: the fetch's own, or the tier's fault.

        The tier should absorb its own failures (see ``_tier``); one that does not is counted as
        a shared error and never reaches the caller. The fetch's exception propagates unchanged.
        A tier that broke after the fetch ran yields the fetched value; one that broke before it
        yields ``None``: the caller then runs the fetch itself.
        """
        if not ran:
            self._shared_faults += 1
            return None
        fetched, got = ran[-1]
        if not fetched:
            if got is error:
                raise error
            raise got
        self._shared_faults += 1
        return TierResult(got, "fetched")

    # -- background refresh --------------------------------------------------------------------
    def _start_refresh(
        self,
        entry: _Entry,
        fetch: Callable[[], Any],
        is_async: bool,
        codec: SharedCodec | None = None,
    ) -> None:
        now = self._clock()

        def claim() -> bool:  # lock held
            if entry.fresh > now or self._lru.get(entry.key) is not entry:
                return False
            entry.fresh = entry.expires  # one refresh per entry; a failure re-arms it
            return True

        load: Load | AsyncLoad
        if is_async:
            load = self._async_load(entry.key, entry.scopes, entry.ttl, fetch, codec)
        else:
            load = self._sync_load(entry.key, entry.scopes, entry.ttl, fetch, codec)
        self._flights.refresh(entry.key, claim, load, entry.ttl, entry.scopes, is_async=is_async)

    def _refresh_failed_locked(self, key: Hashable) -> None:
        entry = self._lru.get(key)
        if entry is not None and self._refresh_after is not None:
            entry.fresh = min(entry.expires, self._clock() + self._refresh_after)

    # -- storage (lock held) -------------------------------------------------------------------
    def _lookup_locked(self, key: Hashable, count: bool) -> Any:
        entry = self._lru.get(key)
        if entry is None:
            entry = self._pinned.get(key)
            if entry is None:
                return MISSING
        elif entry.expires <= self._clock():
            del self._lru[key]
            self._unindex_locked(key, entry)
            self._expirations += 1
            return MISSING
        else:
            self._lru.move_to_end(key)
        if count:
            self._hits += 1
        return entry.value

    def _entry(
        self, key: Key, value: Any, now: float, ttl: float, scopes: tuple[Hashable, ...]
    ) -> _Entry:
        expires = now + ttl
        fresh = expires
        if self._refresh_after is not None:
            fresh = min(expires, now + self._refresh_after)
        return _Entry(key, value, expires, fresh, ttl, scopes)

    def _store_flight_locked(
        self, key: Hashable, value: Any, ttl: float, scopes: tuple[Hashable, ...]
    ) -> None:
        self._store_locked(key, value, ttl, scopes, pin=False)

    def _store_locked(
        self, key: Key, value: Any, ttl: float, scopes: tuple[Hashable, ...], *, pin: bool
    ) -> None:
        pinned = self._pinned.get(key)
        if pinned is not None:
            pinned.value = value
            return
        now = self._clock()
        old = self._lru.pop(key, None)
        if old is not None:
            self._unindex_locked(key, old)
        entry = self._entry(key, value, now, ttl, scopes)
        if pin:
            entry.fresh = _INF
            self._pinned[key] = entry
        else:
            self._lru[key] = entry
            self._queue_locked(entry)
        for scope in scopes:
            keys = self._index.get(scope, _NO_KEY)
            if keys is _NO_KEY:
                self._index[scope] = key
            elif type(keys) is set:
                keys.add(key)
            elif keys != key:
                self._index[scope] = {cast(Key, keys), key}
        if not pin:
            self._evict_locked()

    def _queue_locked(self, entry: _Entry) -> None:
        queue = self._expiry.get(entry.ttl)
        if queue is None:
            if len(self._expiry) < _MAX_QUEUES:
                queue = self._expiry[entry.ttl] = deque()
            else:
                # Too many distinct TTLs for a queue each: share the nearest. That queue's order
                # then only approximates expiry order, so an expired entry behind a live head
                # waits for a read or for LRU eviction; the cost per eviction stays bounded.
                queue = self._expiry[min(self._expiry, key=lambda ttl: abs(ttl - entry.ttl))]
        queue.append(entry)
        self._queued += 1
        if self._queued > 2 * len(self._lru) + 64:
            self._compact_locked()

    def _compact_locked(self) -> None:
        """Rebuild the expiry queues without the entries dropped since they were queued."""
        lru = self._lru
        for ttl, queue in list(self._expiry.items()):
            live = deque(entry for entry in queue if lru.get(entry.key) is entry)
            if live:
                self._expiry[ttl] = live
            else:
                del self._expiry[ttl]
        self._queued = sum(len(queue) for queue in self._expiry.values())

    def _evict_locked(self) -> None:
        lru = self._lru
        if len(lru) <= self._max_entries:
            return
        # Expired entries first: the head of each TTL's queue expires first within it.
        now = self._clock()
        for ttl, queue in list(self._expiry.items()):
            while queue and len(lru) > self._max_entries:
                entry = queue[0]
                if lru.get(entry.key) is entry:
                    if entry.expires > now:
                        break
                    del lru[entry.key]
                    self._unindex_locked(entry.key, entry)
                    self._expirations += 1
                queue.popleft()
                self._queued -= 1
            if not queue:
                del self._expiry[ttl]
        while len(lru) > self._max_entries:
            key, entry = lru.popitem(last=False)
            self._unindex_locked(key, entry)
            self._evictions += 1

    def _unindex_locked(self, key: Key, entry: _Entry) -> None:
        for scope in entry.scopes:
            keys = self._index.get(scope, _NO_KEY)
            if type(keys) is set:
                keys.discard(key)
                if len(keys) == 1:
                    self._index[scope] = next(iter(keys))
                elif not keys:
                    del self._index[scope]
            elif keys == key:
                del self._index[scope]

    def _keys_of_scope_locked(self, scope: Hashable) -> Iterable[Key]:
        keys = self._index.get(scope, _NO_KEY)
        if keys is _NO_KEY:
            return ()
        if type(keys) is set:
            return tuple(keys)
        return (cast(Key, keys),)

    def _drop_locked(self, keys: Iterable[Key]) -> int:
        dropped = 0
        for key in keys:
            entry = self._lru.pop(key, None)
            if entry is None:
                entry = self._pinned.pop(key, None)
            if entry is not None:
                self._unindex_locked(key, entry)
                dropped += 1
        self._invalidations += dropped
        return dropped

    def _clear_locked(self) -> int:
        dropped = len(self._lru) + len(self._pinned)
        self._lru.clear()
        self._pinned.clear()
        self._index.clear()
        self._expiry.clear()
        self._queued = 0
        self._memo.clear()
        self._flights.forget_all_locked()
        self._invalidations += dropped
        return dropped


_NO_KEY: Final = object()
