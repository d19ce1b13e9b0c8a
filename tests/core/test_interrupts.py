"""Interrupts and exits out of a fetch belong to the thread they were raised in.

A ``KeyboardInterrupt`` or ``SystemExit`` out of a leader's fetch leaves the fetch in the
leader's thread (out of an async flight's task, asyncio raises it out of that loop); every caller
waiting for the same flight elsewhere (a thread, a task on another loop, another task on the
leader's own loop) starts again, and one of them leads a new fetch. Other ``BaseException``s are
a flight's outcome as before (``test_singleflight.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from wm_middleware import WorkingMemory

from ..conftest import until
from .conftest import raising_into, running, wait_for

INTERRUPTS = [KeyboardInterrupt, SystemExit]


class Interrupting:
    """An async fetch: the first call waits for :attr:`go` (a threading.Event, set from any
    thread) and raises ``interrupt``; every later call returns ``"fetched again"``."""

    def __init__(self, interrupt: type[BaseException]) -> None:
        self.interrupt = interrupt
        self.calls = 0
        self.started = threading.Event()
        self.go = threading.Event()

    async def fetch(self) -> str:
        self.calls += 1
        if self.calls > 1:
            return "fetched again"
        self.started.set()
        while not self.go.is_set():  # noqa: ASYNC110 - set from another thread
            await asyncio.sleep(0.001)
        raise self.interrupt

    def sync_fetch(self) -> str:
        """What a sync caller that starts again fetches with (it leads the new flight)."""
        self.calls += 1
        return "fetched again"


def _waiter(wm: WorkingMemory[str], upstream: Interrupting, kind: str) -> Callable[[], str]:
    """A caller of ``q`` in a thread of its own: a plain thread, or a task on its own loop."""
    if kind == "thread":
        return lambda: wm.search("q", upstream.sync_fetch)
    return lambda: asyncio.run(wm.asearch("q", upstream.fetch))


@pytest.mark.parametrize("interrupt", INTERRUPTS)
@pytest.mark.parametrize("waiter", ["thread", "another loop"])
def test_an_interrupt_of_an_async_fetch_stays_in_its_thread_and_waiters_start_again(
    interrupt: type[BaseException], waiter: str
) -> None:
    """Loop A's leader is interrupted: the interrupt comes out of loop A's thread only; the
    waiter (in another thread) leads a new fetch, instead of having it raised in its thread."""
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Interrupting(interrupt)
    leader_errors: list[BaseException] = []
    waiter_errors: list[BaseException] = []
    waiter_results: list[str] = []
    call = _waiter(wm, upstream, waiter)

    def wait() -> None:
        waiter_results.append(call())

    leader = raising_into(leader_errors, lambda: asyncio.run(wm.asearch("q", upstream.fetch)))
    with running(leader):
        assert upstream.started.wait(30), "the leader's fetch never started"
        with running(raising_into(waiter_errors, wait)):
            wait_for(lambda: wm.stats().coalesced == 1, "the waiter never joined")
            upstream.go.set()
    assert [type(error) for error in leader_errors] == [interrupt]
    assert waiter_errors == []
    assert waiter_results == ["fetched again"]
    assert upstream.calls == 2  # the interrupted fetch, and the waiter's own
    assert wm.stats().inflight == 0
    assert wm.search("q", upstream.sync_fetch) == "fetched again"  # stored by the new leader
    assert upstream.calls == 2


@pytest.mark.parametrize("interrupt", INTERRUPTS)
def test_another_task_on_the_interrupted_loop_starts_again(
    interrupt: type[BaseException],
) -> None:
    """The interrupt leaves the loop once; a task of that loop waiting for the same flight is
    not interrupted a second time: when the loop runs on, it leads a new fetch."""
    wm: WorkingMemory[str] = WorkingMemory()
    upstream = Interrupting(interrupt)
    loop = asyncio.new_event_loop()
    try:
        leader = loop.create_task(wm.asearch("q", upstream.fetch))
        waiter = loop.create_task(wm.asearch("q", upstream.fetch))

        async def joined() -> None:
            await until(lambda: wm.stats().coalesced == 1, "the waiter never joined")
            upstream.go.set()
            await asyncio.gather(leader, waiter)  # the interrupt comes out of the loop first

        with pytest.raises(interrupt):
            loop.run_until_complete(joined())
        try:
            again = loop.run_until_complete(waiter)
        except interrupt:  # caught here: out of the test it would stop the whole run
            pytest.fail("the interrupt was raised again, in a task waiting for the flight")
        assert again == "fetched again"
        assert upstream.calls == 2
        # The leader's caller was not interrupted itself: it started again too, and shared
        # the new fetch (or was a hit of it).
        assert loop.run_until_complete(leader) == "fetched again"
        assert upstream.calls == 2
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


@pytest.mark.parametrize("interrupt", INTERRUPTS)
def test_an_interrupt_of_a_sync_fetch_stays_in_its_thread_and_tasks_start_again(
    interrupt: type[BaseException],
) -> None:
    """The sync side of the same rule: a thread's fetch is interrupted; a task on a loop of
    another thread, waiting for that flight, leads a new fetch."""
    wm: WorkingMemory[str] = WorkingMemory()
    started, go = threading.Event(), threading.Event()

    def interrupted() -> str:
        started.set()
        go.wait(30)
        raise interrupt

    async def again() -> str:
        return "fetched again"

    leader_errors: list[BaseException] = []
    results: list[str] = []
    with running(raising_into(leader_errors, lambda: wm.search("q", interrupted))):
        assert started.wait(30), "the leader's fetch never started"
        with running(lambda: results.append(asyncio.run(wm.asearch("q", again)))):
            wait_for(lambda: wm.stats().coalesced == 1, "the task never joined")
            go.set()
    assert [type(error) for error in leader_errors] == [interrupt]
    assert results == ["fetched again"]
