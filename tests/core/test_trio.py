"""Async reads under trio, where no asyncio loop runs (issue 17, item 3).

The 3.x async client runs on anyio, so ``await client.search.memories(...)`` under
``trio.run`` reaches ``aload`` with no asyncio loop: it must lead the fetch in its own task,
store by the same invalidation rule, and never raise for the lack of a loop.
"""

from __future__ import annotations

import threading

import pytest

from wm_middleware import WorkingMemory

from ..conftest import FakeClock

trio = pytest.importorskip("trio")


def test_asearch_under_trio_fetches_once_and_then_hits() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    calls: list[int] = []

    async def fetch() -> str:
        calls.append(1)
        await trio.sleep(0)
        return "v"

    async def main() -> list[str]:
        return [await wm.asearch("q", fetch, limit=5) for _ in range(3)]

    assert trio.run(main) == ["v", "v", "v"]
    assert calls == [1]
    stats = wm.stats()
    assert (stats.misses, stats.hits, stats.inflight) == (1, 2, 0)


def test_aload_under_trio_reports_the_outcome_and_stores_under_the_key() -> None:
    wm: WorkingMemory[str] = WorkingMemory()

    async def fetch() -> str:
        return "v"

    async def main() -> tuple[str, str]:
        first = await wm.aload("k", fetch, scopes=("s",), info="span", flight="opts")
        again = await wm.aload("k", fetch)
        return (first.outcome, again.outcome)

    assert trio.run(main) == ("miss", "hit")
    assert wm.lookup("k") == "v"
    assert wm.invalidate_scope("s") == 1


def test_concurrent_trio_tasks_never_raise_and_one_result_is_stored() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    calls: list[int] = []
    results: list[str] = []

    async def fetch() -> str:
        calls.append(1)
        await trio.sleep(0.01)
        return "v"

    async def caller() -> None:
        results.append(await wm.asearch("q", fetch))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(caller)

    trio.run(main)
    assert results == ["v"] * 5
    assert 1 <= len(calls) <= 5  # tasks that find a flight running fetch alone
    assert wm.get("q") == "v"
    assert wm.stats().inflight == 0


def test_an_invalidation_during_a_trio_fetch_keeps_it_from_storing() -> None:
    wm: WorkingMemory[str] = WorkingMemory()

    async def main() -> str:
        started, release = trio.Event(), trio.Event()

        async def fetch() -> str:
            started.set()
            await release.wait()
            return "stale"

        result: list[str] = []

        async def caller() -> None:
            result.append(await wm.asearch("q", fetch, limit=5))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            await started.wait()
            assert wm.stats().inflight == 1
            wm.invalidate("q")
            release.set()
        return result[0]

    assert trio.run(main) == "stale"  # its own caller gets its answer
    assert not wm.has("q", limit=5)  # but it was not stored after the invalidation


def test_a_thread_joins_a_trio_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    calls: list[int] = []
    joined: list[str] = []

    async def main() -> str:
        release = trio.Event()

        async def fetch() -> str:
            calls.append(1)
            await release.wait()
            return "v"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wm.asearch, "q", fetch)
            await trio.sleep(0.01)
            thread = threading.Thread(target=lambda: joined.append(wm.search("q", lambda: "x")))
            thread.start()
            for _ in range(10_000):
                if wm.stats().coalesced == 1:
                    break
                await trio.sleep(0.001)
            release.set()
        thread.join(timeout=30)
        return joined[0]

    assert trio.run(main) == "v"
    assert calls == [1]


def test_an_error_under_trio_reaches_the_caller_unchanged_and_is_not_cached() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    error = ConnectionError("upstream down")

    async def failing() -> str:
        raise error

    async def main() -> None:
        with pytest.raises(ConnectionError) as raised:
            await wm.asearch("q", failing)
        assert raised.value is error

    trio.run(main)
    assert not wm.has("q")
    assert wm.stats().inflight == 0


def test_a_cancelled_trio_fetch_stores_nothing_and_leaves_the_key_usable() -> None:
    wm: WorkingMemory[str] = WorkingMemory()

    async def slow() -> str:
        await trio.sleep(3600)
        return "never"

    async def fast() -> str:
        return "v"

    async def main() -> str:
        with trio.move_on_after(0.01):
            await wm.asearch("q", slow)
        return await wm.asearch("q", fast)

    assert trio.run(main) == "v"
    assert wm.stats().inflight == 0


def test_a_refresh_due_under_trio_serves_the_old_value_without_raising(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)
    wm.set("q", "v1")
    clock.advance(11.0)

    async def fetch() -> str:
        return "v2"

    async def main() -> str:
        return await wm.asearch("q", fetch)

    assert trio.run(main) == "v1"  # no asyncio loop to refresh in: the old value, no error
    assert wm.stats().inflight == 0
