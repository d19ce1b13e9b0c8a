"""A leader whose event loop was closed under its fetch: the key must not stay stuck."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import inspect
import threading

import pytest

from wm_middleware import WorkingMemory
from wm_middleware._core.flight import Group

from ..conftest import FakeClock
from .conftest import wait_for


def stranded(wm: WorkingMemory[str]) -> asyncio.AbstractEventLoop:
    """Start a fetch of "z" on a loop, run it briefly, then close the loop without cancelling."""
    loop = asyncio.new_event_loop()

    async def slow() -> str:
        await asyncio.sleep(3600)
        return "never"

    task = loop.create_task(wm.asearch("z", slow))
    loop.run_until_complete(asyncio.sleep(0.01))
    assert not task.done()
    assert wm.stats().inflight == 1
    return loop


def run_in_thread(call: object) -> list[object]:
    results: list[object] = []
    thread = threading.Thread(target=lambda: results.append(call()))  # type: ignore[operator]
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the caller is stuck behind a dead leader"
    return results


async def fetch_async() -> str:
    return "fresh"


@pytest.mark.parametrize("caller", ["thread", "other loop"])
def test_a_later_caller_replaces_a_leader_whose_loop_was_closed(caller: str) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    loop = stranded(wm)
    loop.close()
    if caller == "thread":
        results = run_in_thread(lambda: wm.search("z", lambda: "fresh"))
    else:
        results = run_in_thread(lambda: asyncio.run(wm.asearch("z", fetch_async)))
    assert results == ["fresh"]
    stats = wm.stats()
    assert (stats.inflight, stats.misses) == (0, 2)
    assert wm.get("z") == "fresh"


def test_stats_do_not_count_a_dead_leader_in_flight() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    stranded(wm).close()
    assert wm.stats().inflight == 0


@pytest.mark.parametrize("waiter", ["thread", "other loop"])
def test_a_waiter_already_blocked_notices_the_leader_died(waiter: str) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    loop = stranded(wm)
    results: list[str] = []

    def wait() -> None:
        if waiter == "thread":
            results.append(wm.search("z", lambda: "fresh"))
        else:
            results.append(asyncio.run(wm.asearch("z", fetch_async)))

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: wm.stats().coalesced == 1, "the second caller never joined")
    assert wm.stats().coalesced == 1  # it joined the flight that is about to die
    loop.close()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the waiter is stuck behind a dead leader"
    assert results == ["fresh"]
    assert wm.stats().inflight == 0


def test_a_refresh_whose_loop_was_closed_leaves_the_key_usable(clock: FakeClock) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)
    wm.set("z", "v1")
    clock.advance(11.0)
    loop = asyncio.new_event_loop()

    async def slow() -> str:
        await asyncio.sleep(3600)
        return "never"

    assert loop.run_until_complete(wm.asearch("z", slow)) == "v1"  # starts the refresh task
    loop.run_until_complete(asyncio.sleep(0.01))
    assert wm.refreshing == 1
    loop.close()
    assert wm.search("z", lambda: "v2") == "v1"  # the old value is served until its ttl
    assert (wm.stats().inflight, wm.refreshing) == (0, 0)  # the dead refresh is let go
    clock.advance(50.0)
    assert run_in_thread(lambda: wm.search("z", lambda: "v2")) == ["v2"]
    assert wm.stats().inflight == 0
    clock.advance(11.0)
    assert wm.search("z", lambda: "v3") == "v2"  # and it refreshes again
    wait_for(lambda: wm.get("z") == "v3", "no refresh after the dead one")


def test_a_stranded_leader_closed_while_its_thread_holds_the_lock_does_not_deadlock() -> None:
    # The garbage collector closes a stranded leader's coroutine at whatever allocation comes
    # next: in any thread, even one inside the flight table's lock (storing an entry, say).
    wm: WorkingMemory[str] = WorkingMemory()
    loop = stranded(wm)
    leaders = [task.get_coro() for task in asyncio.all_tasks(loop)]
    loop.close()
    group = wm._flights  # white box: the lock a finaliser could meet held

    def close_under_the_lock() -> None:
        with group._lock:
            for coroutine in leaders:
                coroutine.close()  # type: ignore[union-attr]

    closer = threading.Thread(target=close_under_the_lock, daemon=True)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive(), "closing the leader waited for a lock its own thread holds"
    assert run_in_thread(lambda: wm.search("z", lambda: "fresh")) == ["fresh"]
    assert wm.stats().inflight == 0


def test_a_stranded_leaders_mark_finalised_from_another_context_ends_cleanly() -> None:
    # The collector finalises what a garbage cycle holds in any order, from whatever context
    # runs then: the generator that marks a stranded leader may be closed before its coroutine.
    # Its mark cannot be reset there; that must not raise (an "exception ignored" at best).
    wm: WorkingMemory[str] = WorkingMemory()
    loop = stranded(wm)
    loop.close()
    leading = Group._leading.__wrapped__.__code__  # type: ignore[attr-defined]
    marks = [
        found
        for found in gc.get_objects()
        if inspect.isgenerator(found) and found.gi_code is leading and found.gi_frame is not None
    ]
    assert marks  # the leader's, and its caller's
    for mark in marks:
        contextvars.Context().run(mark.close)
    assert run_in_thread(lambda: wm.search("z", lambda: "fresh")) == ["fresh"]
    assert wm.stats().inflight == 0
