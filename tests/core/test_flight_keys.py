"""Callers share a fetch only when key and flight key match; the value is stored under the key."""

from __future__ import annotations

import asyncio
import threading

import pytest

from wm_middleware import WorkingMemory

from .conftest import wait_for


def test_threads_with_different_flight_keys_fetch_apart_and_store_under_the_key() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    release = threading.Event()
    calls: list[str] = []

    def fetch(name: str) -> str:
        calls.append(name)
        release.wait(timeout=30)
        return name

    results: dict[str, str] = {}

    def caller(flight: str) -> None:
        results[flight] = wm.load("k", lambda: fetch(flight), flight=flight).value

    threads = [threading.Thread(target=caller, args=(flight,)) for flight in ("strict", "loose")]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(calls) == 2, "the second flight key did not start a fetch of its own")
    assert wm.stats().inflight == 2
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert results == {"strict": "strict", "loose": "loose"}
    assert sorted(calls) == ["loose", "strict"]
    assert wm.lookup("k") in ("strict", "loose")  # one key, whichever finished last
    stats = wm.stats()
    assert (stats.misses, stats.coalesced, stats.size) == (2, 0, 1)


def test_threads_with_the_same_flight_key_share_one_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    release = threading.Event()
    calls: list[int] = []

    def fetch() -> str:
        calls.append(1)
        release.wait(timeout=30)
        return "v"

    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(wm.load("k", fetch, flight="opts")))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: wm.stats().lookups == 2, "the second caller never joined")
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert calls == [1]
    assert sorted(loaded.outcome for loaded in results) == ["coalesced", "miss"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("flights", "fetches"), [(("a", "b"), 2), (("a", "a"), 1), ((None, None), 1)]
)
async def test_tasks_join_only_a_flight_with_their_flight_key(
    flights: tuple[str | None, str | None], fetches: int
) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    release = asyncio.Event()
    calls: list[int] = []

    async def fetch() -> str:
        calls.append(1)
        await release.wait()
        return "v"

    callers = [asyncio.create_task(wm.aload("k", fetch, flight=flight)) for flight in flights]
    for _ in range(10_000):
        if wm.stats().lookups == 2:
            break
        await asyncio.sleep(0.001)
    release.set()
    loaded = await asyncio.gather(*callers)
    assert [item.value for item in loaded] == ["v", "v"]
    assert len(calls) == fetches
    assert wm.lookup("k") == "v"


def test_none_means_the_key_itself() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    release = threading.Event()
    calls: list[int] = []

    def fetch() -> str:
        calls.append(1)
        release.wait(timeout=30)
        return "v"

    first = threading.Thread(target=lambda: wm.load("k", fetch))
    first.start()
    wait_for(lambda: calls, "no fetch started")
    second = threading.Thread(target=lambda: wm.load("k", fetch, flight="k"))
    second.start()
    wait_for(lambda: wm.stats().coalesced == 1, "flight='k' did not join the key's own flight")
    release.set()
    first.join(timeout=30)
    second.join(timeout=30)
    assert calls == [1]


def test_an_invalidation_detaches_every_flight_of_the_key_whatever_its_flight_key() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    release = threading.Event()

    def fetch() -> str:
        release.wait(timeout=30)
        return "stale"

    threads = [
        threading.Thread(target=lambda f=flight: wm.load("k", fetch, flight=f, scopes=("s",)))
        for flight in ("a", "b")
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: wm.stats().inflight == 2, "both flights should run")
    wm.invalidate_scope("s")
    assert wm.stats().inflight == 0
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert wm.stats().size == 0  # neither wrote after the invalidation
