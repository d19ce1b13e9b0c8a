"""An explicit write during a fetch or a background refresh of the same key wins: the in-flight
result answers its own callers but is not stored (as with ``invalidate``)."""

from __future__ import annotations

import asyncio

import pytest

from wm_middleware import WorkingMemory

from ..conftest import FakeClock, until
from .conftest import Held, old_entry, running, wait_for


@pytest.mark.parametrize("pin", [False, True], ids=["set", "set pinned"])
def test_a_set_during_a_fetch_wins(pin: bool) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held("fetched")
    results: list[str] = []
    with running(lambda: results.append(wm.search("q", fetch))):
        wait_for(lambda: wm.stats().inflight == 1, "no fetch started")
        wm.set("q", "manual", pin=pin)
        fetch.release()
    assert results == ["fetched"]  # the fetch still answers its own caller
    assert wm.get("q") == "manual"
    assert wm.stats().inflight == 0


async def test_a_set_during_an_async_fetch_wins() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    release = asyncio.Event()

    async def fetch() -> str:
        await release.wait()
        return "fetched"

    caller = asyncio.create_task(wm.asearch("q", fetch, limit=3))
    await until(lambda: wm.stats().inflight)
    wm.set("q", "manual", limit=3)
    release.set()
    assert await caller == "fetched"
    assert wm.get("q", limit=3) == "manual"


def test_a_set_during_a_background_refresh_wins(clock: FakeClock) -> None:
    wm = old_entry(clock)
    refresh = Held("refreshed")
    assert wm.search("q", refresh) == "v1"
    wait_for(lambda: wm.refreshing == 1, "no refresh started")
    wm.set("q", "manual")
    refresh.release()
    wait_for(lambda: not wm.refreshing, "refresh never ended")
    assert wm.get("q") == "manual"


def test_a_caller_after_the_set_is_served_the_set_value_not_the_flight() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held("fetched")
    with running(lambda: wm.search("q", fetch)):
        wait_for(lambda: wm.stats().inflight == 1, "no fetch started")
        wm.set("q", "manual")
        assert wm.search("q", lambda: "other") == "manual"
        fetch.release()
