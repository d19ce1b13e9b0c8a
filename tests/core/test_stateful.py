"""The cache against a plain reference model, driven by hypothesis under a fake clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from wm_middleware import WorkingMemory
from wm_middleware._core import make_key

from ..conftest import FakeClock

QUERIES = st.sampled_from(["a", "b", " a ", "c", "d", "e"])
LIMITS = st.sampled_from([None, 5, 10])


class Model:
    """What the cache should hold: key -> [value, expires, pinned, seq], plus recency order."""

    def __init__(self, max_entries: int, ttl: float) -> None:
        self.max_entries = max_entries
        self.ttl = ttl
        self.entries: dict[tuple[str, int | None], list[Any]] = {}
        self.order: list[tuple[str, int | None]] = []  # unpinned, oldest first
        self.hits = self.misses = self.evictions = self.expirations = 0
        self.stored = 0  # insertion sequence, to order entries that expire at the same time

    @staticmethod
    def key(query: str, limit: int | None) -> tuple[str, int | None]:
        return (" ".join(query.split()), limit)

    def live(self, key: tuple[str, int | None], now: float) -> bool:
        entry = self.entries.get(key)
        return entry is not None and (entry[2] or entry[1] > now)

    def expire(self, key: tuple[str, int | None], now: float) -> None:
        entry = self.entries.get(key)
        if entry is not None and not entry[2] and entry[1] <= now:
            del self.entries[key]
            self.order.remove(key)
            self.expirations += 1

    def touch(self, key: tuple[str, int | None]) -> None:
        if key in self.order:
            self.order.remove(key)
            self.order.append(key)

    def get(self, key: tuple[str, int | None], now: float) -> Any:
        if self.live(key, now):
            self.hits += 1
            self.touch(key)
            return self.entries[key][0]
        self.expire(key, now)
        self.misses += 1
        return None

    def store(self, key: tuple[str, int | None], value: int, now: float, pin: bool) -> None:
        entry = self.entries.get(key)
        if entry is not None and entry[2]:
            entry[0] = value
            return
        if key in self.order:
            self.order.remove(key)
        self.stored += 1
        self.entries[key] = [value, now + self.ttl, pin, self.stored]
        if not pin:
            self.order.append(key)
            # When full, expired entries go first, earliest expiry (then insertion) first.
            expired = sorted(
                (k for k in self.order if self.entries[k][1] <= now),
                key=lambda k: (self.entries[k][1], self.entries[k][3]),
            )
            for k in expired:
                if len(self.order) <= self.max_entries:
                    break
                self.order.remove(k)
                del self.entries[k]
                self.expirations += 1
            while len(self.order) > self.max_entries:
                oldest = self.order.pop(0)
                del self.entries[oldest]
                self.evictions += 1


@dataclass(frozen=True)
class Asked:
    """What a rule asks the cache about: a query as given and a limit, or none."""

    query: str
    limit: int | None

    @property
    def key(self) -> tuple[str, int | None]:
        """What the model holds it under."""
        return Model.key(self.query, self.limit)

    @property
    def params(self) -> dict[str, Any]:
        """The keyword arguments the cache is called with."""
        return {} if self.limit is None else {"limit": self.limit}


ASKED = st.builds(Asked, QUERIES, LIMITS)


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.wm: WorkingMemory[int] = WorkingMemory(max_entries=3, ttl=10.0, clock=self.clock)
        self.model = Model(3, 10.0)
        self.counter = 0

    def next_value(self) -> int:
        self.counter += 1
        return self.counter

    @rule(asked=ASKED)
    def get(self, asked: Asked) -> None:
        assert self.wm.get(asked.query, **asked.params) == self.model.get(asked.key, self.clock.now)

    @rule(asked=ASKED)
    def search(self, asked: Asked) -> None:
        value = self.next_value()
        expected = self.model.get(asked.key, self.clock.now)
        if expected is None:
            self.model.store(asked.key, value, self.clock.now, pin=False)
            expected = value
        assert self.wm.search(asked.query, lambda: value, **asked.params) == expected

    @rule(asked=ASKED, pin=st.booleans())
    def set(self, asked: Asked, pin: bool) -> None:
        value = self.next_value()
        self.wm.set(asked.query, value, pin=pin, **asked.params)
        self.model.store(asked.key, value, self.clock.now, pin)

    @rule(asked=ASKED)
    def has(self, asked: Asked) -> None:
        assert self.wm.has(asked.query, **asked.params) == self.model.live(
            asked.key, self.clock.now
        )

    @rule(asked=ASKED)
    def pin(self, asked: Asked) -> None:
        key = asked.key
        live = self.model.live(key, self.clock.now)
        assert self.wm.pin(asked.query, **asked.params) == live
        if live and not self.model.entries[key][2]:
            self.model.entries[key][2] = True
            self.model.order.remove(key)

    @rule(asked=ASKED)
    def unpin(self, asked: Asked) -> None:
        entry = self.model.entries.get(asked.key)
        was_pinned = entry is not None and entry[2]
        assert self.wm.unpin(asked.query, **asked.params) == was_pinned
        if entry is not None and was_pinned:
            entry[2] = False
            self.model.store(asked.key, entry[0], self.clock.now, pin=False)

    @rule(asked=ASKED)
    def invalidate_one(self, asked: Asked) -> None:
        key = asked.key
        if asked.limit is None:  # every entry of the query, whatever its limit
            keys = [k for k in self.model.entries if k[0] == key[0]]
        else:
            keys = [key] if key in self.model.entries else []
        assert self.wm.invalidate(asked.query, **asked.params) == len(keys)
        for k in keys:
            del self.model.entries[k]
            if k in self.model.order:
                self.model.order.remove(k)

    @precondition(lambda self: self.counter % 7 == 0)
    @rule()
    def clear(self) -> None:
        assert self.wm.invalidate() == len(self.model.entries)
        self.model.entries.clear()
        self.model.order.clear()

    @rule(seconds=st.sampled_from([0.5, 3.0, 9.99, 10.0, 25.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def counters_agree(self) -> None:
        stats = self.wm.stats()
        assert (stats.hits, stats.misses) == (self.model.hits, self.model.misses)
        assert stats.evictions == self.model.evictions
        assert stats.expirations == self.model.expirations
        assert stats.coalesced == 0
        assert stats.inflight == 0

    @invariant()
    def size_and_order_agree(self) -> None:
        assert len(self.wm) == len(self.model.entries)
        unpinned = list(self.wm._store._lru)  # least recently used first
        expected = [
            make_key(query, {} if limit is None else {"limit": limit})
            for query, limit in self.model.order
        ]
        assert unpinned == expected
        assert len(unpinned) <= 3


TestCacheAgainstModel = CacheMachine.TestCase
TestCacheAgainstModel.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
