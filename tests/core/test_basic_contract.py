"""The basic contract of a working memory: a repeated lookup hits, an unknown one misses, entries
expire after their TTL, concurrent searches share one fetch, the least recently used entry is
evicted first, invalidation drops what it names, stats count it all, and a value comes back as
stored."""

from __future__ import annotations

import asyncio

from wm_middleware import WorkingMemory

from ..conftest import FakeClock


def test_second_lookup_hits(clock: FakeClock) -> None:
    wm: WorkingMemory[list[str]] = WorkingMemory(clock=clock)
    calls: list[int] = []
    assert wm.search("user preferences", lambda: calls.append(1) or ["dark mode"]) == ["dark mode"]
    assert wm.search("user preferences", lambda: calls.append(1) or ["other"]) == ["dark mode"]
    assert calls == [1]
    assert wm.get("user preferences") == ["dark mode"]


def test_unknown_query_misses(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    assert wm.get("never stored") is None
    assert wm.stats().misses == 1


def test_entry_expires_after_ttl(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, clock=clock)
    wm.set("q", "old")
    clock.advance(59.9)
    assert wm.get("q") == "old"
    clock.advance(0.2)
    assert wm.get("q") is None
    assert wm.search("q", lambda: "new") == "new"
    assert wm.stats().expirations == 1


async def test_twenty_concurrent_searches_share_one_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetches = 0

    async def fetch() -> str:
        nonlocal fetches
        fetches += 1
        await asyncio.sleep(0.01)
        return "shared"

    results = await asyncio.gather(*(wm.asearch("project context", fetch) for _ in range(20)))
    assert results == ["shared"] * 20
    assert fetches == 1
    stats = wm.stats()
    assert (stats.misses, stats.coalesced, stats.hits) == (1, 19, 0)


def test_lru_evicts_least_recently_used(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(max_entries=2, clock=clock)
    wm.set("a", "A")
    wm.set("b", "B")
    assert wm.get("a") == "A"  # "b" is now the least recently used
    wm.set("c", "C")
    assert wm.has("a")
    assert wm.has("c")
    assert not wm.has("b")
    assert wm.stats().evictions == 1


def test_invalidate_one_query_keeps_the_others(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.set("a", "A")
    wm.set("b", "B")
    assert wm.invalidate("a") == 1
    assert not wm.has("a")
    assert wm.get("b") == "B"


def test_invalidate_all(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.set("a", "A")
    wm.set("b", "B", limit=3)
    assert wm.invalidate() == 2
    assert len(wm) == 0
    assert wm.stats().invalidations == 2


def test_stats_count_hits_misses_and_size(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(clock=clock)
    wm.search("a", lambda: "A")
    wm.search("a", lambda: "A")
    wm.search("b", lambda: "B")
    stats = wm.stats()
    assert (stats.hits, stats.misses, stats.size) == (1, 2, 2)
    assert stats.hit_ratio == 1 / 3


def test_a_ttl_shorter_than_the_gap_between_searches_fetches_every_time() -> None:
    clock = FakeClock()
    wm: WorkingMemory[int] = WorkingMemory(ttl=0.001, clock=clock)
    calls: list[int] = []
    for i in range(3):
        assert wm.search("q", lambda i=i: calls.append(i) or i) == i  # type: ignore[misc]
        clock.advance(0.01)
    assert calls == [0, 1, 2]


def test_value_is_returned_as_stored_and_set_does_not_fetch(clock: FakeClock) -> None:
    wm: WorkingMemory[dict[str, object]] = WorkingMemory(clock=clock)
    shape = {"success": True, "results": [{"memory": "likes tea"}], "count": 1}
    wm.set("drinks", shape)
    got = wm.search("drinks", lambda: {"unexpected": True})
    assert got is shape  # the core is generic: adapters add isolation on top
    assert wm.stats().misses == 0
