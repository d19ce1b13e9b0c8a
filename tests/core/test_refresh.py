"""Stale-while-revalidate: ``refresh_after``."""

from __future__ import annotations

import asyncio

import pytest

from wm_middleware import WorkingMemory
from wm_middleware._core import MISSING

from ..conftest import FakeClock, until
from .conftest import Held, old_entry, wait_for


@pytest.mark.parametrize("by_key", [False, True])
def test_an_old_hit_returns_at_once_and_refreshes_once_in_a_thread(
    clock: FakeClock, by_key: bool
) -> None:
    # by_key: lookup(), which serves a live entry due no refresh without the lock and sorts out
    # an old one under the lock.
    wm = old_entry(clock)
    refresh = Held("v2")

    def read() -> object:
        return wm.lookup("q", refresh) if by_key else wm.search("q", refresh)

    assert [read() for _ in range(5)] == ["v1"] * 5
    wait_for(lambda: refresh.calls, "no refresh started")
    refresh.release()
    wait_for(lambda: wm.stats().inflight == 0, "refresh never ended")
    assert refresh.threads == ["wm-refresh"]  # exactly one, on a worker thread
    assert read() == "v2"
    assert wm.stats().hits == 6


def test_an_expired_entry_by_key_is_missing_and_counted_as_expired(clock: FakeClock) -> None:
    wm = old_entry(clock)
    clock.advance(50.0)
    assert wm.lookup("q", lambda: "v2") is MISSING
    stats = wm.stats()
    assert (stats.hits, stats.expirations, stats.inflight) == (0, 1, 0)


def test_a_young_hit_does_not_refresh(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)
    wm.search("q", lambda: "v1")
    clock.advance(9.0)
    assert wm.search("q", lambda: "v2") == "v1"
    assert wm.stats().inflight == 0


def test_a_failed_refresh_keeps_the_old_value_until_its_ttl(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)
    wm.search("q", lambda: "v1")
    attempts: list[int] = []

    def failing() -> str:
        attempts.append(1)
        raise ConnectionError("down")

    clock.advance(11.0)
    assert wm.search("q", failing) == "v1"
    wait_for(lambda: wm.stats().inflight == 0 and attempts, "refresh never ended")
    assert wm.search("q", failing) == "v1"  # not re-armed yet: no second attempt
    assert attempts == [1]
    clock.advance(10.0)  # re-armed after another refresh_after
    assert wm.search("q", failing) == "v1"
    wait_for(lambda: len(attempts) == 2 and wm.stats().inflight == 0, "no retry")
    clock.advance(40.0)
    assert wm.get("q") is None  # the TTL still ends it


async def test_an_async_refresh_runs_as_a_task_on_the_callers_loop(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)

    async def first() -> str:
        return "v1"

    await wm.asearch("q", first)
    loops: list[asyncio.AbstractEventLoop] = []

    async def refresh() -> str:
        loops.append(asyncio.get_running_loop())
        return "v2"

    clock.advance(11.0)
    assert await asyncio.gather(*(wm.asearch("q", refresh) for _ in range(5))) == ["v1"] * 5
    for _ in range(100):
        if wm.stats().inflight == 0 and loops:
            break
        await asyncio.sleep(0)
    assert loops == [asyncio.get_running_loop()]
    assert await wm.asearch("q", refresh) == "v2"


def test_invalidate_during_a_refresh_wins(clock: FakeClock) -> None:
    wm = old_entry(clock)
    refresh = Held("stale-v2")
    wm.search("q", refresh)
    wait_for(lambda: wm.stats().inflight == 1, "no refresh")
    wm.invalidate("q")
    refresh.release()
    wait_for(lambda: not wm.refreshing, "refresh never ended")
    assert not wm.has("q")


def test_a_refresh_keeps_the_per_call_ttl(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)
    wm.search("q", lambda: "v1", ttl=100.0)
    clock.advance(11.0)
    assert wm.search("q", lambda: "v2") == "v1"
    wait_for(lambda: wm.get("q") == "v2" and not wm.refreshing, "refresh never stored")
    clock.advance(70.0)  # past the default ttl of the refreshed value, within its own 100 s
    assert wm.has("q")
    clock.advance(31.0)
    assert not wm.has("q")


async def test_an_async_refresh_keeps_the_per_call_ttl(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)

    async def value(v: str) -> str:
        return v

    await wm.asearch("q", lambda: value("v1"), ttl=100.0, limit=1)
    clock.advance(11.0)
    assert await wm.asearch("q", lambda: value("v2"), limit=1) == "v1"
    await until(lambda: not wm.refreshing)
    clock.advance(70.0)
    assert wm.get("q", limit=1) == "v2"


def test_one_refresher_at_a_time_serves_the_old_value_meanwhile(clock: FakeClock) -> None:
    # Caffeine's refreshAfterWrite: one refresh per key, the old value is served until it lands.
    wm = old_entry(clock)
    refresh = Held("v2")
    for _ in range(3):
        assert wm.search("q", refresh) == "v1"
        clock.advance(1.0)
    refresh.release()
    wait_for(lambda: not wm.refreshing, "refresh never ended")
    assert refresh.calls == 1
    assert wm.search("q", refresh) == "v2"
