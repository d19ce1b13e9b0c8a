"""Callers share a fetch only when key and flight key match; the value is stored under the key."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

from wm_middleware import WorkingMemory

from ..conftest import until
from .conftest import Held, running, wait_for


def test_threads_with_different_flight_keys_fetch_apart_and_store_under_the_key() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetches = {flight: Held(flight) for flight in ("strict", "loose")}
    results: dict[str, str] = {}

    def caller(flight: str) -> None:
        results[flight] = wm.load("k", fetches[flight], flight=flight).value

    with running(*(partial(caller, flight) for flight in fetches)):
        wait_for(
            lambda: sum(fetch.calls for fetch in fetches.values()) == 2,
            "the second flight key did not start a fetch of its own",
        )
        assert wm.stats().inflight == 2
        for fetch in fetches.values():
            fetch.release()
    assert results == {"strict": "strict", "loose": "loose"}
    assert [fetch.calls for fetch in fetches.values()] == [1, 1]
    assert wm.lookup("k") in ("strict", "loose")  # one key, whichever finished last
    stats = wm.stats()
    assert (stats.misses, stats.coalesced, stats.size) == (2, 0, 1)


def test_threads_with_the_same_flight_key_share_one_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held()
    results: list[object] = []
    with running(*[lambda: results.append(wm.load("k", fetch, flight="opts"))] * 2):
        wait_for(lambda: wm.stats().lookups == 2, "the second caller never joined")
        fetch.release()
    assert fetch.calls == 1
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
    await until(lambda: wm.stats().lookups == 2)
    release.set()
    loaded = await asyncio.gather(*callers)
    assert [item.value for item in loaded] == ["v", "v"]
    assert len(calls) == fetches
    assert wm.lookup("k") == "v"


def test_none_means_the_key_itself() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held()
    with running(lambda: wm.load("k", fetch)):
        wait_for(lambda: fetch.calls, "no fetch started")
        with running(lambda: wm.load("k", fetch, flight="k")):
            wait_for(
                lambda: wm.stats().coalesced == 1, "flight='k' did not join the key's own flight"
            )
            fetch.release()
    assert fetch.calls == 1


def test_an_invalidation_detaches_every_flight_of_the_key_whatever_its_flight_key() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held("stale")
    with running(*(partial(wm.load, "k", fetch, flight=f, scopes=("s",)) for f in ("a", "b"))):
        wait_for(lambda: wm.stats().inflight == 2, "both flights should run")
        wm.invalidate_scope("s")
        assert wm.stats().inflight == 0
        fetch.release()
    assert wm.stats().size == 0  # neither wrote after the invalidation
