"""Single-flight across asyncio tasks, event loops and threads: sharing, cancellation, errors."""

from __future__ import annotations

import asyncio
import threading

import pytest

from wm_middleware import WorkingMemory

from ..conftest import until
from .conftest import Held, raising_into, running, wait_for


class Upstream:
    """An async fetch that counts its calls and is released on demand."""

    def __init__(self, value: str = "result") -> None:
        self.value = value
        self.calls = 0
        self.cancelled = 0
        self.release = threading.Event()
        self.started = threading.Event()

    async def fetch(self) -> str:
        self.calls += 1
        self.started.set()
        try:
            # A threading.Event, polled: tests release it from other threads and loops.
            while not self.release.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.001)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self.value


# ``until`` is tests/conftest.py's.


async def test_a_thousand_concurrent_callers_share_one_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Upstream()
    callers = [asyncio.create_task(wm.asearch("q", upstream.fetch)) for _ in range(1000)]
    await until(lambda: wm.stats().lookups == 1000)
    upstream.release.set()
    assert await asyncio.gather(*callers) == ["result"] * 1000
    assert upstream.calls == 1
    stats = wm.stats()
    assert (stats.misses, stats.coalesced, stats.inflight) == (1, 999, 0)


def test_eight_threads_share_one_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held("shared")
    gate = threading.Barrier(8)
    results: list[str] = []

    def caller() -> None:
        gate.wait(timeout=30)
        results.append(wm.search("q", fetch))

    with running(*[caller] * 8):
        wait_for(lambda: wm.stats().lookups == 8, "the callers never all looked up")
        fetch.release()
    assert results == ["shared"] * 8
    assert fetch.calls == 1
    assert wm.stats().coalesced == 7


def test_four_threads_each_with_its_own_loop_share_one_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Upstream()
    results: list[str] = []
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            results.append(asyncio.run(wm.asearch("q", upstream.fetch)))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    with running(*[caller] * 4):
        wait_for(lambda: wm.stats().lookups == 4, "the callers never all looked up")
        upstream.release.set()
    assert errors == []
    assert results == ["result"] * 4
    assert upstream.calls == 1
    # The cache survived four loops coming and going: the next loop hits.
    assert asyncio.run(wm.asearch("q", upstream.fetch)) == "result"
    assert upstream.calls == 1


def test_threads_and_tasks_mixed_share_one_fetch() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    blocking_fetch = Held("v")
    async_calls = 0

    async def async_fetch() -> str:
        nonlocal async_calls
        async_calls += 1
        return "v"

    async def async_callers() -> list[str]:
        tasks = [asyncio.create_task(wm.asearch("q", async_fetch)) for _ in range(3)]
        await until(lambda: wm.stats().lookups == 6)
        blocking_fetch.release()
        return list(await asyncio.gather(*tasks))

    results: list[str] = []
    with running(*[lambda: results.append(wm.search("q", blocking_fetch))] * 3):
        wait_for(lambda: wm.stats().lookups == 3, "the threads never all looked up")
        results.extend(asyncio.run(async_callers()))
    assert results == ["v"] * 6
    assert blocking_fetch.calls + async_calls == 1


async def test_a_sync_caller_on_the_fetching_loop_does_not_deadlock() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Upstream("async")
    task = asyncio.create_task(wm.asearch("q", upstream.fetch))
    await until(lambda: upstream.started.is_set())
    # Blocking on the flight would block the loop its fetch needs: it fetches alone instead.
    assert wm.search("q", lambda: "sync") == "sync"
    upstream.release.set()
    assert await task == "async"
    assert wm.stats().misses == 2


async def test_cancelling_one_of_three_waiters_does_not_cancel_the_others() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Upstream()
    callers = [asyncio.create_task(wm.asearch("q", upstream.fetch)) for _ in range(3)]
    await until(lambda: upstream.started.is_set())
    callers[0].cancel()  # the leader, even
    with pytest.raises(asyncio.CancelledError):
        await callers[0]
    upstream.release.set()
    assert await asyncio.gather(*callers[1:]) == ["result", "result"]
    assert upstream.calls == 1
    assert upstream.cancelled == 0
    assert wm.has("q")


async def test_cancelling_every_waiter_cancels_the_fetch_and_leaks_nothing() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Upstream()
    callers = [asyncio.create_task(wm.asearch("q", upstream.fetch)) for _ in range(3)]
    await until(lambda: upstream.started.is_set())
    for caller in callers:
        caller.cancel()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    await until(lambda: upstream.cancelled == 1)
    stats = wm.stats()
    assert (stats.inflight, stats.size) == (0, 0)
    # The next caller starts afresh.
    upstream.release.set()
    assert await wm.asearch("q", upstream.fetch) == "result"
    assert upstream.calls == 2


async def test_a_timed_out_waiter_leaves_the_fetch_to_the_others() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Upstream()
    patient = asyncio.create_task(wm.asearch("q", upstream.fetch))
    await until(lambda: upstream.started.is_set())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(wm.asearch("q", upstream.fetch), timeout=0.01)
    upstream.release.set()
    assert await patient == "result"
    assert upstream.cancelled == 0


def test_a_waiter_whose_fetch_loop_shut_down_starts_again() -> None:
    """The fetch dies with its loop, not by anyone's choice: the waiter on another loop retries."""
    wm: WorkingMemory[str] = WorkingMemory()
    first, second = Upstream("first"), Upstream("second")
    second.release.set()
    second_result: list[str] = []
    loop_a = asyncio.new_event_loop()
    leader = loop_a.create_task(wm.asearch("q", first.fetch))
    loop_a.run_until_complete(asyncio.sleep(0.01))  # the fetch task is now running on loop A

    def other_loop() -> None:
        second_result.append(asyncio.run(wm.asearch("q", second.fetch)))

    thread = threading.Thread(target=other_loop)
    thread.start()
    while wm.stats().coalesced < 1:
        threading.Event().wait(0.001)
    leader.cancel()  # the leader leaves, but a waiter remains: the fetch continues...
    loop_a.run_until_complete(asyncio.gather(leader, return_exceptions=True))
    assert first.cancelled == 0
    # ...until loop A shuts down, cancelling every task it still holds.
    for task in asyncio.all_tasks(loop_a):
        task.cancel()
    loop_a.run_until_complete(asyncio.sleep(0.01))
    loop_a.close()
    thread.join(timeout=30)
    assert second_result == ["second"]
    assert first.cancelled == 1
    assert second.calls == 1


async def test_an_error_reaches_every_waiter_once_and_is_not_cached() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    calls = 0
    release = asyncio.Event()

    async def failing() -> str:
        nonlocal calls
        calls += 1
        await release.wait()
        raise ConnectionError("upstream down")

    callers = [asyncio.create_task(wm.asearch("q", failing)) for _ in range(8)]
    await until(lambda: wm.stats().lookups == 8)
    release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    assert calls == 1  # waiters did not re-run the failed fetch one after another
    assert not wm.has("q")
    assert wm.stats().inflight == 0

    async def healthy() -> str:
        return "ok"

    assert await wm.asearch("q", healthy) == "ok"


def test_a_sync_error_reaches_every_thread_and_is_not_cached() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    failing = Held(error=ValueError("bad request"))
    errors: list[BaseException] = []
    with running(*[raising_into(errors, lambda: wm.search("q", failing))] * 4):
        wait_for(lambda: wm.stats().lookups == 4, "the callers never all looked up")
        failing.release()
    assert [type(error) for error in errors] == [ValueError] * 4
    assert failing.calls == 1
    assert wm.search("q", lambda: "ok") == "ok"


@pytest.mark.parametrize("how", ["invalidate_query", "invalidate_key", "clear", "scope"])
async def test_a_fetch_started_before_invalidate_never_writes_after_it(how: str) -> None:
    """The ABA case: fetch 1 starts, invalidate, fetch 2 starts, fetch 1 ends, fetch 2 ends."""
    wm: WorkingMemory[str] = WorkingMemory()
    old, new = Upstream("old"), Upstream("new")
    first = asyncio.create_task(wm.asearch("q", old.fetch, limit=5))
    await until(lambda: old.started.is_set())
    if how == "invalidate_query":
        wm.invalidate("q")
    elif how == "invalidate_key":
        wm.invalidate("q", limit=5)
    elif how == "clear":
        wm.clear()
    else:
        wm.invalidate_scope("q")  # entries with params carry their query as a scope
    assert wm.stats().inflight == 0
    second = asyncio.create_task(wm.asearch("q", new.fetch, limit=5))
    await until(lambda: new.started.is_set())
    old.release.set()
    assert await first == "old"  # its own waiter still gets its answer
    assert not wm.has("q", limit=5)  # ...but it was not stored
    assert wm.stats().inflight == 1  # and it did not remove the newer flight
    new.release.set()
    assert await second == "new"
    assert wm.get("q", limit=5) == "new"


async def test_no_inflight_entries_leak_after_success_error_or_cancellation() -> None:
    wm: WorkingMemory[str] = WorkingMemory()

    async def ok() -> str:
        return "v"

    async def boom() -> str:
        raise RuntimeError("x")

    await wm.asearch("a", ok)
    with pytest.raises(RuntimeError):
        await wm.asearch("b", boom)
    slow = Upstream()
    task = asyncio.create_task(wm.asearch("c", slow.fetch))
    await until(lambda: slow.started.is_set())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: slow.cancelled == 1)
    assert wm.stats().inflight == 0
    assert wm.stats().inflight == 0


class Stopped(BaseException):
    """Not an ``Exception``, not a cancellation: what a fetch may raise (gevent's, trio's)."""


async def test_a_base_exception_of_an_async_fetch_reaches_every_caller_once() -> None:
    """Uncached, each caller's own fetch would raise it: it reaches each of them, from the one
    fetch they shared, and is not retried (it used to restart the flight for ever)."""
    wm: WorkingMemory[str] = WorkingMemory()
    calls: list[str] = []

    async def fetch() -> str:
        calls.append("fetch")
        await asyncio.sleep(0.01)
        if len(calls) > 1:
            return "fetched again"  # the old behaviour, which the assertion below refuses
        raise Stopped

    callers = [wm.asearch("q", fetch) for _ in range(3)]
    results = await asyncio.wait_for(asyncio.gather(*callers, return_exceptions=True), 30)
    assert [type(result) for result in results] == [Stopped] * 3
    assert calls == ["fetch"]
    assert await wm.asearch("q", fetch) == "fetched again"  # nothing was cached


def test_keyboard_interrupt_in_the_leader_makes_waiters_start_again() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    interrupted = Held(error=KeyboardInterrupt())
    leader_error: list[BaseException] = []
    follower_result: list[str] = []
    with running(raising_into(leader_error, lambda: wm.search("q", interrupted))):
        wait_for(lambda: wm.stats().inflight == 1, "the leader never started")
        with running(lambda: follower_result.append(wm.search("q", lambda: "retried"))):
            wait_for(lambda: wm.stats().coalesced == 1, "the follower never joined")
            interrupted.release()
    assert [type(error) for error in leader_error] == [KeyboardInterrupt]
    assert follower_result == ["retried"]
    stats = wm.stats()
    assert (stats.misses, stats.coalesced) == (1, 1)  # the retry is not counted twice
