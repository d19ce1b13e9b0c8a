"""The LRU + TTL store: entries, expiry queues, the scope index and the entry counters.

A plain data structure with no concurrency story of its own: its owner (the working memory)
serialises every call that changes membership. The one exception is :meth:`Store.find`, the hit
path, which its owner calls without a lock: a dict probe, a deadline check and an
``OrderedDict.move_to_end``, each atomic under the GIL; a find that races an eviction of the same
key still returns the entry it read, which was live when read.

Expiry order. With a per-call ``ttl`` the order in which entries expire is not the LRU order, so
each distinct TTL has a queue of its entries in insertion order, which is their expiry order. When
the store is full the heads of those queues that have expired go first, then the least recently
used entry. Queues are cleaned lazily (an entry dropped otherwise stays queued until it reaches
the head, or until the queues hold twice the entries and are compacted): O(1) amortised per put,
plus one probe per distinct TTL on an eviction. Past 32 distinct TTLs, new ones share the nearest
queue, which bounds that probe and makes "expired first" a best effort for them.

Pinned entries live apart: never evicted, never expired, not counted against ``max_entries``.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable

from .keys import Key

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Any, Final


__all__ = ["Entry", "Store"]

_INF: Final = math.inf
_MAX_QUEUES: Final = 32  # expiry queues, one per distinct TTL up to this many
_NO_KEY: Final = object()


class Entry:
    """One stored value. ``expires``/``fresh`` are monotonic deadlines (``inf``: never).

    ``fresh`` is when a hit stops being plain: ``min(expires, refresh due)``, so the hit path
    compares one number. While a refresh of the entry runs it equals ``expires``. Compared by
    identity: the expiry queues tell a live entry from a dropped one of the same key.
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

    def __repr__(self) -> str:
        return f"Entry(key={self.key!r}, expires={self.expires}, ttl={self.ttl})"


class Store:
    """Entries by key, in LRU order, with per-TTL expiry queues and a scope index.

    Args:
        max_entries: unpinned entries kept; a put past it drops expired entries, then the least
            recently used.
        refresh_after: seconds after a put at which an entry's hit is due a refresh, or ``None``.

    Times are passed in (``now``, from the owner's clock). ``evictions``, ``expirations`` and
    ``invalidations`` count entries dropped each way.
    """

    __slots__ = (
        "_expiry",
        "_index",
        "_lru",
        "_max_entries",
        "_pinned",
        "_queued",
        "_refresh_after",
        "evictions",
        "expirations",
        "invalidations",
    )

    def __init__(self, max_entries: int, refresh_after: float | None) -> None:
        self._max_entries = max_entries
        self._refresh_after = refresh_after
        # Unpinned entries in LRU order, oldest first; pinned ones apart.
        self._lru: OrderedDict[Key, Entry] = OrderedDict()
        self._pinned: dict[Key, Entry] = {}
        # ttl -> unpinned entries put with it, in insertion (= expiry) order; may hold entries
        # dropped since (they are skipped); ``_queued`` counts them all.
        self._expiry: dict[float, deque[Entry]] = {}
        self._queued = 0
        # scope -> the key, or the set of keys, of the entries that carry it. A lone key is
        # stored bare because most scopes (one query's parameter variants) hold one entry.
        self._index: dict[Hashable, Key | set[Key]] = {}
        self.evictions = 0
        self.expirations = 0
        self.invalidations = 0

    def __len__(self) -> int:
        return len(self._lru) + len(self._pinned)

    # -- reads ---------------------------------------------------------------------------------
    def find(self, key: Key, now: float) -> Entry | None:
        """The live entry of ``key`` due no refresh, made most recent, or ``None``. No lock needed.

        ``None`` says the entry is missing, expired or due a refresh; :meth:`lookup`, under the
        owner's lock, tells those apart. One comparison: ``fresh`` is the earlier deadline.
        """
        lru = self._lru
        entry = lru.get(key)
        if entry is None:
            return self._pinned.get(key)  # never due: a pinned entry's ``fresh`` is infinite
        if entry.fresh <= now:
            return None
        try:
            lru.move_to_end(key)
        except KeyError:
            pass  # evicted since the probe: the entry read was live, so it is still a hit
        return entry

    def lookup(self, key: Key, now: float) -> Entry | None:
        """:meth:`find`, dropping (and counting) the entry when it has expired."""
        entry = self._lru.get(key)
        if entry is None:
            return self._pinned.get(key)
        if entry.expires <= now:
            del self._lru[key]
            self._unindex(key, entry)
            self.expirations += 1
            return None
        self._lru.move_to_end(key)
        return entry

    def has(self, key: Key, now: float) -> bool:
        """True when ``key`` holds a live entry. Changes nothing."""
        return self.live(key, now) is not None

    def live(self, key: Key, now: float) -> Entry | None:
        """The live entry of ``key``, or ``None``. Changes nothing (neither recency nor counts)."""
        pinned = self._pinned.get(key)
        if pinned is not None:
            return pinned  # a pinned entry never expires
        entry = self._lru.get(key)
        return entry if entry is not None and entry.expires > now else None

    def keys_of(self, scope: Hashable) -> tuple[Key, ...]:
        """Keys of the entries carrying ``scope``."""
        keys = self._index.get(scope, _NO_KEY)
        if keys is _NO_KEY:
            return ()
        if isinstance(keys, set):
            return tuple(keys)
        return (keys,)

    # -- refresh -------------------------------------------------------------------------------
    def claim_refresh(self, entry: Entry, now: float) -> bool:
        """Mark ``entry`` as being refreshed, unless it is not due or no longer stored."""
        if entry.fresh > now or self._lru.get(entry.key) is not entry:
            return False
        entry.fresh = entry.expires  # one refresh per entry; rearm() makes it due again
        return True

    def rearm(self, key: Key, now: float) -> None:
        """Make a refresh of ``key`` due again ``refresh_after`` from now (one stored nothing)."""
        entry = self._lru.get(key)
        if entry is not None and self._refresh_after is not None:
            entry.fresh = min(entry.expires, now + self._refresh_after)

    # -- writes --------------------------------------------------------------------------------
    def put(
        self,
        key: Key,
        value: Any,
        ttl: float,
        scopes: tuple[Hashable, ...],
        now: float,
        *,
        pin: bool = False,
    ) -> None:
        """Store ``value`` for ``ttl`` seconds. A pinned key keeps its pin and takes the value."""
        pinned = self._pinned.get(key)
        if pinned is not None:
            pinned.value = value
            return
        old = self._lru.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        entry = self._entry(key, value, now, ttl, scopes)
        if pin:
            entry.fresh = _INF
            self._pinned[key] = entry
        else:
            self._lru[key] = entry
            self._queue(entry)
        for scope in scopes:
            keys = self._index.get(scope, _NO_KEY)
            if keys is _NO_KEY:
                self._index[scope] = key
            elif isinstance(keys, set):
                keys.add(key)
            elif keys != key:
                self._index[scope] = {keys, key}
        if not pin:
            self._evict(now)

    def pin(self, key: Key, now: float) -> bool:
        """Pin the live entry of ``key``. True if it is pinned now."""
        if key in self._pinned:
            return True
        entry = self._lru.get(key)
        if entry is None or entry.expires <= now:
            return False
        del self._lru[key]
        entry.fresh = _INF
        self._pinned[key] = entry
        return True

    def unpin(self, key: Key, now: float, ttl: float) -> bool:
        """Return a pinned entry to the LRU as most recent, living ``ttl`` from now."""
        entry = self._pinned.pop(key, None)
        if entry is None:
            return False
        # A new entry object: the old one may still sit in an expiry queue, and must read as
        # dropped there.
        self._lru[key] = fresh = self._entry(key, entry.value, now, ttl, entry.scopes)
        self._queue(fresh)
        self._evict(now)
        return True

    def drop(self, keys: Iterable[Key], scopes: Iterable[Hashable] = ()) -> int:
        """Drop ``keys`` and every entry carrying one of ``scopes``; return how many."""
        wanted = list(keys)
        for scope in scopes:
            wanted.extend(self.keys_of(scope))
        dropped = 0
        for key in wanted:
            entry = self._lru.pop(key, None)
            if entry is None:
                entry = self._pinned.pop(key, None)
            if entry is not None:
                self._unindex(key, entry)
                dropped += 1
        self.invalidations += dropped
        return dropped

    def clear(self) -> int:
        """Drop every entry, pinned ones too; return how many."""
        dropped = len(self)
        self._lru.clear()
        self._pinned.clear()
        self._index.clear()
        self._expiry.clear()
        self._queued = 0
        self.invalidations += dropped
        return dropped

    # -- inside --------------------------------------------------------------------------------
    def _entry(
        self, key: Key, value: Any, now: float, ttl: float, scopes: tuple[Hashable, ...]
    ) -> Entry:
        expires = now + ttl
        fresh = expires
        if self._refresh_after is not None:
            fresh = min(expires, now + self._refresh_after)
        return Entry(key, value, expires, fresh, ttl, scopes)

    def _queue(self, entry: Entry) -> None:
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
            self._compact()

    def _compact(self) -> None:
        """Rebuild the expiry queues without the entries dropped since they were queued."""
        lru = self._lru
        for ttl, queue in list(self._expiry.items()):
            live = deque(entry for entry in queue if lru.get(entry.key) is entry)
            if live:
                self._expiry[ttl] = live
            else:
                del self._expiry[ttl]
        self._queued = sum(len(queue) for queue in self._expiry.values())

    def _evict(self, now: float) -> None:
        lru = self._lru
        if len(lru) <= self._max_entries:
            return
        # Expired entries first: the head of each TTL's queue expires first within it.
        for ttl, queue in list(self._expiry.items()):
            while queue and len(lru) > self._max_entries:
                entry = queue[0]
                if lru.get(entry.key) is entry:
                    if entry.expires > now:
                        break
                    del lru[entry.key]
                    self._unindex(entry.key, entry)
                    self.expirations += 1
                queue.popleft()
                self._queued -= 1
            if not queue:
                del self._expiry[ttl]
        while len(lru) > self._max_entries:
            key, entry = lru.popitem(last=False)
            self._unindex(key, entry)
            self.evictions += 1

    def _unindex(self, key: Key, entry: Entry) -> None:
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
