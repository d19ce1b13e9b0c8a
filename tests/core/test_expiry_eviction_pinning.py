"""TTL, LRU eviction, pinning, invalidation and counting."""

from __future__ import annotations

from wm_middleware import WorkingMemory

from ..conftest import FakeClock


def test_per_call_ttl_overrides_the_default(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, clock=clock)
    wm.search("short", lambda: "s", ttl=1.0)
    wm.set("long", "l", ttl=600.0)
    clock.advance(2.0)
    assert not wm.has("short")
    clock.advance(100.0)
    assert wm.has("long")


def test_expiry_is_checked_on_read_without_timers(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=1.0, clock=clock)
    wm.set("q", "v")
    clock.advance(5.0)
    assert len(wm) == 1  # nothing runs in the background to expire it
    assert wm.get("q") is None
    assert len(wm) == 0


def test_a_hit_refreshes_recency(clock: FakeClock) -> None:
    wm: WorkingMemory[int] = WorkingMemory(max_entries=3, clock=clock)
    for i, q in enumerate("abc"):
        wm.set(q, i)
    wm.search("a", lambda: -1)
    wm.set("d", 3)
    assert [q for q in "abcd" if wm.has(q)] == ["a", "c", "d"]


def test_pinned_entries_survive_eviction_and_expiry(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(max_entries=2, ttl=10.0, clock=clock)
    wm.set("allergy", "peanuts", pin=True)
    wm.set("a", "A")
    wm.set("b", "B")
    assert len(wm) == 3  # pinned entries do not count toward max_entries
    wm.set("c", "C")
    clock.advance(1000.0)
    assert wm.get("allergy") == "peanuts"
    assert wm.stats().evictions == 1


def test_pin_and_unpin_an_existing_entry(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(max_entries=1, ttl=10.0, clock=clock)
    wm.set("q", "v", limit=5)
    assert wm.pin("q", limit=5)
    assert not wm.pin("absent")
    wm.set("other", "o")
    clock.advance(100.0)
    assert wm.get("q", limit=5) == "v"
    assert wm.unpin("q", limit=5)
    assert not wm.unpin("q", limit=5)
    # Back in the LRU as most recent with a fresh TTL; the cache is over capacity by one.
    assert wm.has("q", limit=5)
    assert not wm.has("other")
    clock.advance(11.0)
    assert not wm.has("q", limit=5)


def test_pinning_an_expired_entry_fails(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=1.0, clock=clock)
    wm.set("q", "v")
    clock.advance(2.0)
    assert not wm.pin("q")


def test_setting_a_pinned_key_keeps_it_pinned(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=1.0, clock=clock)
    wm.set("q", "old", pin=True)
    wm.set("q", "new")
    clock.advance(10.0)
    assert wm.get("q") == "new"


def test_invalidate_and_clear_remove_pinned_entries(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.set("a", "A", pin=True)
    wm.set("b", "B", pin=True)
    assert wm.invalidate("a") == 1
    assert not wm.has("a")
    wm.clear()
    assert not wm.has("b")
    assert len(wm) == 0


def test_invalidate_query_drops_every_parameter_variant(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.set("q", "plain")
    wm.set("q", "five", limit=5)
    wm.set("q", "ten", limit=10, container_tags=["t"])
    wm.set("other", "o", limit=5)
    assert wm.invalidate("  q ") == 3
    assert wm.get("other", limit=5) == "o"


def test_invalidate_query_with_params_drops_one_entry(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.set("q", "five", limit=5)
    wm.set("q", "ten", limit=10)
    assert wm.invalidate("q", limit=5) == 1
    assert wm.invalidate("q", limit=5) == 0
    assert wm.get("q", limit=10) == "ten"
    assert wm.invalidate("q") == 1


def test_invalidate_scope_drops_what_carries_it(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.load(("k", 1), lambda: "a", scopes=(("tenant", "t1"), ("tag", "t1", "x")))
    wm.load(("k", 2), lambda: "b", scopes=(("tenant", "t1"), ("tag", "t1", "y")))
    wm.load(("k", 3), lambda: "c", scopes=(("tenant", "t2"),))
    assert wm.invalidate_scope(("tag", "t1", "x")) == 1
    assert wm.invalidate_scope(("tenant", "t1")) == 1
    assert wm.invalidate_scope(("tenant", "t1")) == 0
    assert wm.invalidate_scope() == 0
    assert len(wm) == 1
    assert wm._store._index == {("tenant", "t2"): ("k", 3)}


def test_entries_of_scopes_are_the_live_ones_with_their_age_and_count_nothing(
    clock: FakeClock,
) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=10.0, clock=clock)
    wm.load(("k", 1), lambda: "a", scopes=(("tenant", "t1"), ("tag", "t1", "x")))
    clock.advance(2.0)
    wm.load(("k", 2), lambda: "b", scopes=(("tenant", "t1"),), ttl=1.0)
    wm.load(("k", 3), lambda: "c", scopes=(("tenant", "t2"),))
    clock.advance(0.5)
    before = wm.stats()
    found = sorted(wm.entries(("tenant", "t1"), ("tag", "t1", "x")))
    assert found == [
        (("k", 1), "a", 2.5, (("tenant", "t1"), ("tag", "t1", "x"))),
        (("k", 2), "b", 0.5, (("tenant", "t1"),)),
    ]
    clock.advance(1.0)  # ("k", 2) has expired
    assert [key for key, *_ in wm.entries(("tenant", "t1"))] == [("k", 1)]
    assert wm.entries(("tenant", "nobody")) == []
    assert (wm.stats().hits, wm.stats().misses) == (before.hits, before.misses)


def test_index_is_cleaned_on_eviction_and_expiry(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(max_entries=2, ttl=5.0, clock=clock)
    for limit in range(5):
        wm.set("q", str(limit), limit=limit)
    assert wm._store._index == {"q": set(wm._store._lru)}
    clock.advance(10.0)
    assert wm.get("q", limit=3) is None
    assert wm.get("q", limit=4) is None
    assert wm._store._index == {}


def test_has_counts_nothing_and_every_lookup_counts_once(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.has("q")
    assert wm.stats().lookups == 0
    wm.get("q")  # miss
    wm.search("q", lambda: "v")  # miss
    wm.search("q", lambda: "v")  # hit
    wm.get("q")  # hit
    stats = wm.stats()
    assert (stats.hits, stats.misses, stats.coalesced) == (2, 2, 0)
    assert stats.lookups == 4


def test_when_full_an_expired_entry_goes_before_a_live_one(clock: FakeClock) -> None:
    # cachetools' TTLCache: expired items are removed first.
    wm: WorkingMemory[int] = WorkingMemory(max_entries=2, ttl=60.0, clock=clock)
    wm.set("live", 1)  # the least recently used ...
    wm.set("short", 2, ttl=1.0)  # ... but this one has expired when the third arrives
    clock.advance(2.0)
    wm.set("new", 3)
    assert wm.has("live")
    assert wm.has("new")
    stats = wm.stats()
    assert (stats.evictions, stats.expirations, stats.size) == (0, 1, 2)


def test_expired_entries_go_first_whatever_their_per_call_ttl(clock: FakeClock) -> None:
    wm: WorkingMemory[int] = WorkingMemory(max_entries=3, ttl=60.0, clock=clock)
    wm.set("c", 3)  # the least recently used, and live
    wm.set("a", 1, ttl=5.0)
    wm.set("b", 2, ttl=1.0)
    clock.advance(10.0)  # a and b expired
    wm.set("d", 4)
    wm.set("e", 5)
    assert wm.has("c")
    assert wm.has("d")
    assert wm.has("e")
    stats = wm.stats()
    assert (stats.evictions, stats.expirations, stats.size) == (0, 2, 3)


def test_a_full_cache_of_live_entries_still_evicts_the_least_recently_used(
    clock: FakeClock,
) -> None:
    wm: WorkingMemory[int] = WorkingMemory(max_entries=2, ttl=60.0, clock=clock)
    wm.set("a", 1, ttl=1000.0)
    wm.set("b", 2, ttl=5.0)
    wm.get("a")
    wm.set("c", 3)
    assert not wm.has("b")
    assert wm.has("a")
    assert wm.has("c")
    assert wm.stats().evictions == 1


def test_heavy_churn_with_many_ttls_keeps_the_size_bound(clock: FakeClock) -> None:
    wm: WorkingMemory[int] = WorkingMemory(max_entries=10, ttl=60.0, clock=clock)
    for i in range(5_000):
        wm.set(f"q{i}", i, ttl=1.0 + i % 7)
        if i % 3 == 0:
            wm.get(f"q{i // 2}")
        clock.advance(0.01)
    stats = wm.stats()
    assert stats.size == 10
    assert stats.evictions + stats.expirations == 5_000 - 10


def test_many_distinct_ttls_keep_the_size_bound_and_expire_first(clock: FakeClock) -> None:
    wm: WorkingMemory[int] = WorkingMemory(max_entries=50, ttl=60.0, clock=clock)
    for i in range(5_000):
        wm.set(f"q{i}", i, ttl=1.0 + i / 100)  # every entry has a TTL of its own
        clock.advance(0.05)
    stats = wm.stats()
    assert stats.size == 50
    assert stats.evictions + stats.expirations == 5_000 - 50
    assert stats.expirations > 0
    wm.set("live", 1, ttl=2000.0)
    clock.advance(1000.0)  # everything else has expired now
    wm.set("new", 2)
    assert wm.has("live")
