"""The working memory: an LRU + TTL cache with pinning, scopes, statistics and single-flight.

Knows nothing of Supermemory, HTTP or OpenTelemetry: values are opaque and returned as stored.
Client adapters keep callers from corrupting entries by storing an immutable snapshot and
rebuilding a fresh object per call (see ``wm_middleware._runtime``), not in here.

Concurrency model. One ``threading.Lock`` guards every structure below. The hit path does not take
it: a hit is a dict probe, a deadline check, an ``OrderedDict.move_to_end`` and an integer
increment, each atomic under the GIL; a hit that races an eviction of the same key still returns
the value it read, which was live when read. Everything that changes membership (store, expire,
evict, invalidate, pin, flights) runs under the lock.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar, cast

from ._keys import _NORMALISED, Key, make_key, normalise_query
from ._singleflight import Flight, running_loop

__all__ = ["MISSING", "CacheStats", "Outcome", "WorkingMemory"]

T = TypeVar("T")
Outcome = Literal["hit", "miss", "coalesced"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
_INF: Final = math.inf


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A consistent snapshot of a :class:`WorkingMemory`'s counters.

    Every lookup (``get``, ``search``, ``asearch``) counts exactly one of ``hits``, ``misses`` and
    ``coalesced`` (joined a fetch already in flight). ``evictions`` are LRU drops at
    ``max_entries``; ``expirations`` are entries found past their TTL; ``invalidations`` are
    entries dropped by ``invalidate``, ``invalidate_scope`` or ``clear``. ``size`` counts pinned
    entries too; ``inflight`` is the number of fetches running now.
    """

    hits: int = 0
    misses: int = 0
    coalesced: int = 0
    evictions: int = 0
    expirations: int = 0
    invalidations: int = 0
    size: int = 0
    inflight: int = 0

    @property
    def lookups(self) -> int:
        """Every counted lookup."""
        return self.hits + self.misses + self.coalesced

    @property
    def hit_ratio(self) -> float:
        """Share of lookups that did not start a fetch of their own (0.0 with no lookups)."""
        lookups = self.lookups
        return (self.hits + self.coalesced) / lookups if lookups else 0.0


class _Entry:
    """One stored value. ``expires``/``refresh_at`` are monotonic deadlines (``inf``: never)."""

    __slots__ = ("expires", "refresh_at", "scopes", "value")

    def __init__(
        self, value: Any, expires: float, refresh_at: float, scopes: tuple[Hashable, ...]
    ) -> None:
        self.value = value
        self.expires = expires
        self.refresh_at = refresh_at
        self.scopes = scopes


def _check_ttl(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


def _check_fetch(fetch: object) -> None:
    if not callable(fetch):
        raise TypeError(f"fetch must be callable, not {type(fetch).__name__}")


class WorkingMemory(Generic[T]):
    """An LRU + TTL cache of search results with single-flight fetching.

    Args:
        max_entries: how many unpinned entries to keep; the least recently used goes first.
        ttl: default seconds an entry lives, checked on read against ``clock``.
        clock: a monotonic clock in seconds (tests pass a fake one).
        refresh_after: seconds after which a hit returns the stored value at once and starts one
            background refresh of it (stale-while-revalidate). Must be below ``ttl``.

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
        self._max_entries = max_entries
        self._refresh_after = refresh_after
        self._clock = clock
        self._lock = threading.Lock()
        # lock (membership): unpinned entries in LRU order, oldest first; pinned ones apart.
        self._lru: OrderedDict[Key, _Entry] = OrderedDict()
        self._pinned: dict[Key, _Entry] = {}
        # lock: scope -> the key, or the set of keys, of the entries that carry it. A lone key is
        # stored bare because most scopes (one query's parameter variants) hold one entry.
        self._index: dict[Hashable, Key | set[Key]] = {}
        # lock: key -> the fetch in progress for it.
        self._inflight: dict[Key, Flight] = {}
        # Strong references to background refresh tasks and threads until they end.
        self._background: set[object] = set()
        self._hits = 0  # incremented without the lock: ``x += 1`` on an int is atomic under the GIL
        self._misses = 0
        self._coalesced = 0
        self._evictions = 0
        self._expirations = 0
        self._invalidations = 0

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

    def __repr__(self) -> str:
        return (
            f"WorkingMemory(max_entries={self._max_entries}, ttl={self._ttl}, "
            f"refresh_after={self._refresh_after}, size={len(self)})"
        )

    def __len__(self) -> int:
        return len(self._lru) + len(self._pinned)

    # -- public API ----------------------------------------------------------------------------
    def search(
        self, query: str, fetch: Callable[[], T], *, ttl: float | None = None, **params: Any
    ) -> T:
        """Return the cached value for ``query`` and ``params``, or call ``fetch()`` once for it.

        Concurrent callers of one key (threads, or a mix with :meth:`asearch`) share one call of
        ``fetch``. Its exception reaches every caller sharing it and is not cached. ``ttl``
        overrides the default for the stored value.
        """
        # The hit path, inlined: it should cost little more than the dict probe it is.
        if params:
            key: Key = make_key(query, params)
        else:
            try:
                key = _NORMALISED[query]
            except (KeyError, TypeError):
                key = normalise_query(query)
        entry = self._lru.get(key)
        if entry is not None and ttl is None and callable(fetch):
            now = self._clock()
            if entry.expires > now:
                try:
                    self._lru.move_to_end(key)
                except KeyError:
                    pass  # evicted since the probe: the value read was live
                self._hits += 1
                if entry.refresh_at <= now:
                    self._start_refresh(key, entry, fetch, False, now)
                return entry.value  # type: ignore[no-any-return]
        _check_fetch(fetch)
        seconds = self._ttl if ttl is None else _check_ttl("ttl", ttl)
        value = self._peek(key, fetch, False)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        scopes = (normalise_query(query),) if params else ()
        return self._fetch_sync(key, fetch, seconds, scopes, None)[0]  # type: ignore[no-any-return]

    async def asearch(
        self,
        query: str,
        fetch: Callable[[], Awaitable[T]],
        *,
        ttl: float | None = None,
        **params: Any,
    ) -> T:
        """Async :meth:`search`: ``fetch()`` returns an awaitable.

        The fetch runs in a task of its own: a cancelled caller never cancels it for the others,
        and it is cancelled only when every caller waiting for it is gone.
        """
        if params:
            key: Key = make_key(query, params)
        else:
            try:
                key = _NORMALISED[query]
            except (KeyError, TypeError):
                key = normalise_query(query)
        entry = self._lru.get(key)
        if entry is not None and ttl is None and callable(fetch):
            now = self._clock()
            if entry.expires > now:
                try:
                    self._lru.move_to_end(key)
                except KeyError:
                    pass
                self._hits += 1
                if entry.refresh_at <= now:
                    self._start_refresh(key, entry, fetch, True, now)
                return entry.value  # type: ignore[no-any-return]
        _check_fetch(fetch)
        seconds = self._ttl if ttl is None else _check_ttl("ttl", ttl)
        value = self._peek(key, fetch, True)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        scopes = (normalise_query(query),) if params else ()
        return (await self._fetch_async(key, fetch, seconds, scopes, None))[0]  # type: ignore[no-any-return]

    def get(self, query: str, **params: Any) -> T | None:
        """The live value for ``query`` and ``params``, or ``None``. Counts a hit or a miss."""
        key = make_key(query, params)
        value = self._peek(key, None, False)
        if value is not MISSING:
            return cast(T, value)
        with self._lock:
            value = self._lookup_locked(key)
            if value is MISSING:
                self._misses += 1
                return None
            self._hits += 1
            return cast(T, value)

    def set(
        self, query: str, value: T, *, ttl: float | None = None, pin: bool = False, **params: Any
    ) -> None:
        """Store ``value`` for ``query`` and ``params``; ``pin=True`` pins it on insert.

        Setting a pinned key replaces its value and keeps it pinned.
        """
        key = make_key(query, params)
        seconds = self._ttl if ttl is None else _check_ttl("ttl", ttl)
        scopes = (normalise_query(query),) if params else ()
        with self._lock:
            self._store_locked(key, value, seconds, scopes, pin=pin)

    def has(self, query: str, **params: Any) -> bool:
        """True when a live entry exists. Counts nothing and does not refresh recency."""
        key = make_key(query, params)
        if key in self._pinned:
            return True
        entry = self._lru.get(key)
        return entry is not None and entry.expires > self._clock()

    def invalidate(self, query: str | None = None, **params: Any) -> int:
        """Drop entries and return how many were dropped.

        ``invalidate()`` drops everything; ``invalidate(q)`` drops every entry of query ``q``
        whatever its parameters; ``invalidate(q, **params)`` drops that one entry. A fetch in
        flight for a dropped key still answers its own callers but never stores its result, and
        callers arriving afterwards start a new fetch.
        """
        if query is None:
            if params:
                raise TypeError("invalidate() with parameters needs a query")
            with self._lock:
                return self._clear_locked()
        if params:
            key = make_key(query, params)
            with self._lock:
                flight = self._inflight.pop(key, None)
                if flight is not None:
                    flight.detached = True
                return self._drop_locked((key,))
        normalised = normalise_query(query)
        with self._lock:
            self._detach_flights_locked(lambda f: f.key == normalised or normalised in f.scopes)
            return self._drop_locked((normalised, *self._keys_of_scope_locked(normalised)))

    def invalidate_scope(self, *scopes: Hashable) -> int:
        """Drop every entry carrying any of ``scopes``; return how many were dropped.

        Adapters tag entries with scopes (a tenant, a container tag, a namespace) when they store
        them; a write then drops exactly what it could have changed. In-flight fetches carrying a
        scope are detached as by :meth:`invalidate`.
        """
        wanted = frozenset(scopes)
        if not wanted:
            return 0
        with self._lock:
            self._detach_flights_locked(lambda f: not wanted.isdisjoint(f.scopes))
            keys: list[Key] = []
            for scope in wanted:
                keys.extend(self._keys_of_scope_locked(scope))
            return self._drop_locked(keys)

    def clear(self) -> None:
        """Drop every entry (pinned ones too) and detach every fetch in flight."""
        with self._lock:
            self._clear_locked()

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
            entry.refresh_at = _INF
            self._pinned[key] = entry
            return True

    def unpin(self, query: str, **params: Any) -> bool:
        """Return a pinned entry to the LRU as most recent, with a fresh TTL. True if unpinned."""
        key = make_key(query, params)
        with self._lock:
            entry = self._pinned.pop(key, None)
            if entry is None:
                return False
            now = self._clock()
            entry.expires = now + self._ttl
            entry.refresh_at = self._refresh_deadline(now)
            self._lru[key] = entry
            self._evict_locked()
            return True

    def stats(self) -> CacheStats:
        """A snapshot of the counters, taken under the lock."""
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                coalesced=self._coalesced,
                evictions=self._evictions,
                expirations=self._expirations,
                invalidations=self._invalidations,
                size=len(self._lru) + len(self._pinned),
                inflight=len(self._inflight),
            )

    # -- the key-level interface used by the client adapters ----------------------------------
    def _peek(self, key: Key, fetch: Callable[[], Any] | None, is_async: bool) -> Any:
        """The hit path: the live value, counted as a hit, or ``MISSING`` (counted nowhere).

        Lock-free (see module docstring). With ``refresh_after`` set and ``fetch`` given, an old
        enough hit also starts the single background refresh of its key.
        """
        entry = self._lru.get(key)
        if entry is None:
            entry = self._pinned.get(key)
            if entry is None:
                return MISSING
            self._hits += 1
            return entry.value
        now = self._clock()
        if entry.expires <= now:
            return MISSING
        try:
            self._lru.move_to_end(key)
        except KeyError:
            pass  # evicted since the probe: the value read was live, so it is still a hit
        self._hits += 1
        if entry.refresh_at <= now and fetch is not None:
            self._start_refresh(key, entry, fetch, is_async, now)
        return entry.value

    def _fetch_sync(
        self,
        key: Key,
        fetch: Callable[[], Any],
        ttl: float,
        scopes: tuple[Hashable, ...],
        info: object,
    ) -> tuple[Any, Outcome, object]:
        """Look up ``key`` under the lock; on a miss run or join its single fetch, in this thread.

        Returns the value, how it was obtained, and the leader's ``info`` (this call's own
        ``info`` when it led). Counts exactly one of hit, miss, coalesced per call.
        """
        counted = False
        here = running_loop()
        while True:
            with self._lock:
                value = self._lookup_locked(key)
                if value is not MISSING:
                    if not counted:
                        self._hits += 1
                    return value, "hit", None
                flight = self._inflight.get(key)
                alone = flight is not None and flight.blocks(here)
                leader = flight is None
                if flight is None:
                    flight = Flight(key, scopes, ttl, info, None)
                    flight.waiters = 1
                    self._inflight[key] = flight
                elif not alone:
                    event = flight.join_thread()
                if not counted:
                    if leader or alone:
                        self._misses += 1
                    else:
                        self._coalesced += 1
                counted = True
            if alone:
                # Its fetch runs on the loop this thread would block: waiting would deadlock.
                return fetch(), "miss", info
            if leader:
                return self._lead_sync(flight, fetch), "miss", info
            event.wait()
            if flight.cancelled:
                continue  # its fetch died of something not ours: start again
            if flight.error is not None:
                raise flight.error
            return flight.value, "coalesced", flight.info

    async def _fetch_async(
        self,
        key: Key,
        fetch: Callable[[], Awaitable[Any]],
        ttl: float,
        scopes: tuple[Hashable, ...],
        info: object,
    ) -> tuple[Any, Outcome, object]:
        """Async :meth:`_fetch_sync`: the fetch runs in a task on this loop."""
        loop = asyncio.get_running_loop()
        counted = False
        while True:
            with self._lock:
                value = self._lookup_locked(key)
                if value is not MISSING:
                    if not counted:
                        self._hits += 1
                    return value, "hit", None
                flight = self._inflight.get(key)
                leader = flight is None
                if flight is None:
                    if not counted:
                        self._misses += 1
                    flight = Flight(key, scopes, ttl, info, loop)
                    self._inflight[key] = flight
                elif not counted:
                    self._coalesced += 1
                waiter = flight.join_async(loop)
            counted = True
            if leader:
                # Created outside the lock: a task factory may run code eagerly.
                flight.task = loop.create_task(self._run_async(flight, fetch))
            try:
                await waiter
            except asyncio.CancelledError:
                with self._lock:
                    if flight.leave_async(loop, waiter) and not flight.done:
                        if self._inflight.get(key) is flight:
                            del self._inflight[key]
                        flight.abandon()
                raise
            if flight.cancelled:
                continue
            if flight.error is not None:
                raise flight.error
            return flight.value, "miss" if leader else "coalesced", flight.info

    # -- flights -------------------------------------------------------------------------------
    def _lead_sync(self, flight: Flight, fetch: Callable[[], Any]) -> Any:
        try:
            value = fetch()
        except Exception as error:
            self._finish(flight, None, error, cancelled=False)
            raise
        except BaseException:
            # KeyboardInterrupt, SystemExit...: not the waiters' failure; they start again.
            self._finish(flight, None, None, cancelled=True)
            raise
        self._finish(flight, value, None, cancelled=False)
        return value

    async def _run_async(self, flight: Flight, fetch: Callable[[], Awaitable[Any]]) -> None:
        try:
            value = await fetch()
        except asyncio.CancelledError:
            self._finish(flight, None, None, cancelled=True)
            raise
        except Exception as error:
            self._finish(flight, None, error, cancelled=False)
        except BaseException:
            self._finish(flight, None, None, cancelled=True)
            raise
        else:
            self._finish(flight, value, None, cancelled=False)

    def _finish(
        self, flight: Flight, value: Any, error: BaseException | None, *, cancelled: bool
    ) -> None:
        with self._lock:
            if self._inflight.get(flight.key) is flight:
                del self._inflight[flight.key]
            if error is None and not cancelled and not flight.detached:
                self._store_locked(flight.key, value, flight.ttl, flight.scopes, pin=False)
            elif flight.refresh:
                # A failed refresh keeps the old value until its TTL; retry after a while.
                entry = self._lru.get(flight.key)
                if entry is not None and self._refresh_after is not None:
                    entry.refresh_at = self._clock() + self._refresh_after
            flight.finish(value, error, cancelled)
        flight.wake()

    def _start_refresh(
        self, key: Key, entry: _Entry, fetch: Callable[[], Any], is_async: bool, now: float
    ) -> None:
        loop = running_loop() if is_async else None
        if is_async and loop is None:
            return
        with self._lock:
            if entry.refresh_at > now or key in self._inflight:
                return
            entry.refresh_at = _INF  # one refresh per entry; a failure re-arms it
            flight = Flight(key, entry.scopes, self._ttl, None, loop)
            flight.refresh = True
            self._inflight[key] = flight
        if loop is not None:
            task = loop.create_task(self._run_async(flight, fetch))
            flight.task = task
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return

        def refresh() -> None:
            try:
                self._lead_sync(flight, fetch)
            except Exception:
                pass  # the stored value stays until its TTL; a later hit retries
            finally:
                self._background.discard(thread)

        thread = threading.Thread(target=refresh, name="wm-refresh", daemon=True)
        self._background.add(thread)
        thread.start()

    # -- storage (lock held) -------------------------------------------------------------------
    def _lookup_locked(self, key: Key) -> Any:
        entry = self._lru.get(key)
        if entry is None:
            entry = self._pinned.get(key)
            return MISSING if entry is None else entry.value
        if entry.expires <= self._clock():
            del self._lru[key]
            self._unindex_locked(key, entry)
            self._expirations += 1
            return MISSING
        self._lru.move_to_end(key)
        return entry.value

    def _refresh_deadline(self, now: float) -> float:
        return _INF if self._refresh_after is None else now + self._refresh_after

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
        if pin:
            self._pinned[key] = _Entry(value, now + ttl, _INF, scopes)
        else:
            self._lru[key] = _Entry(value, now + ttl, self._refresh_deadline(now), scopes)
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

    def _evict_locked(self) -> None:
        while len(self._lru) > self._max_entries:
            key, entry = self._lru.popitem(last=False)
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

    def _detach_flights_locked(self, matches: Callable[[Flight], bool]) -> None:
        for key, flight in list(self._inflight.items()):
            if matches(flight):
                flight.detached = True
                del self._inflight[key]

    def _clear_locked(self) -> int:
        dropped = len(self._lru) + len(self._pinned)
        self._lru.clear()
        self._pinned.clear()
        self._index.clear()
        for flight in self._inflight.values():
            flight.detached = True
        self._inflight.clear()
        self._invalidations += dropped
        return dropped


_NO_KEY: Final = object()
