"""A forked child starts with no flight, lock or background work of its parent's.

Only the forking thread runs in a child: a fetch led by another thread (or by a task of another
thread's loop) never ends there. The child's callers of that key fetch for themselves; the
parent is unharmed. The same through the real SDKs against the emulator is in
``tests/interception/test_fork.py``; freshness state in ``tests/freshness/test_fork.py``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest

from wm_middleware import WorkingMemory

from ..conftest import FORKS, in_forked_child, until
from .conftest import Held, running, wait_for

CHILD = "fetched by the child"


async def _child_fetch() -> str:
    return CHILD


def _child_search(wm: WorkingMemory[str], caller: str) -> int:
    """The child's search of ``q``: 0 when it fetched for itself and left no flight behind."""
    if caller == "thread":
        value = wm.search("q", lambda: CHILD)
    else:
        value = asyncio.run(wm.asearch("q", _child_fetch))
    return 0 if (value, wm.stats().inflight, wm.get("q")) == (CHILD, 0, CHILD) else 2


@pytest.mark.parametrize("how", FORKS)
@pytest.mark.parametrize("caller", ["thread", "task"])
def test_a_child_forked_during_a_threads_fetch_fetches_for_itself(how: str, caller: str) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held("fetched by the parent")
    results: list[str] = []
    with running(lambda: results.append(wm.search("q", fetch))):
        wait_for(lambda: fetch.calls == 1, "the parent's fetch never started")
        assert in_forked_child(lambda: _child_search(wm, caller), how) == 0
        fetch.release()
    assert results == ["fetched by the parent"]
    assert wm.search("q", lambda: "again") == "fetched by the parent"  # the parent's stored it


@pytest.mark.parametrize("how", FORKS)
@pytest.mark.parametrize("caller", ["thread", "task"])
def test_a_child_forked_during_another_loops_fetch_fetches_for_itself(
    how: str, caller: str
) -> None:
    """The fetch runs in a task of a loop in another thread: that loop never runs in the child,
    and is not closed there either (a waiter's check for a dead loop would not find it)."""
    wm: WorkingMemory[str] = WorkingMemory()
    started, release = threading.Event(), threading.Event()

    async def fetch() -> str:
        started.set()
        while not release.is_set():  # noqa: ASYNC110 - set from another thread
            await asyncio.sleep(0.001)
        return "fetched by the parent"

    results: list[str] = []
    with running(lambda: results.append(asyncio.run(wm.asearch("q", fetch)))):
        assert started.wait(30), "the parent's fetch never started"
        assert in_forked_child(lambda: _child_search(wm, caller), how) == 0
        release.set()
    assert results == ["fetched by the parent"]


def test_a_settle_forked_into_a_child_still_ends_there() -> None:
    """The settle thread is the parent's: the child runs its own, so a settle it inherited ends
    at its deadline there too (its scopes are dropped, and reads fetch the settled state)."""
    wm: WorkingMemory[str] = WorkingMemory()
    wm.search("q", lambda: "before the write")
    settle = wm.settle("q", within=0.3)

    def child() -> int:
        if not settle.wait(timeout=20):
            return 2
        return 0 if wm.search("q", lambda: CHILD) == CHILD else 3

    assert in_forked_child(child) == 0
    assert settle.wait(timeout=20)


def test_a_task_waiting_on_a_loop_the_child_runs_again_starts_again_there() -> None:
    """The fork is made between two runs of a loop (asyncio lets no loop run on through a
    fork) while a task of that loop waits for another thread's fetch: when the child runs the
    loop again, that task leads a fetch of its own."""
    wm: WorkingMemory[str] = WorkingMemory()
    fetch = Held("fetched by the parent")
    loop = asyncio.new_event_loop()
    try:
        with running(lambda: wm.search("q", fetch)):
            wait_for(lambda: fetch.calls == 1, "the parent's fetch never started")
            waiter = loop.create_task(wm.asearch("q", _child_fetch))

            async def joined() -> None:
                await until(lambda: wm.stats().coalesced == 1, "the task never joined")

            loop.run_until_complete(joined())

            def child() -> int:
                return 0 if loop.run_until_complete(waiter) == CHILD else 2

            assert in_forked_child(child) == 0
            fetch.release()
            assert loop.run_until_complete(waiter) == "fetched by the parent"
    finally:
        loop.close()


def test_a_memory_is_not_kept_alive_for_the_sake_of_a_fork() -> None:
    """Everything that resets itself in a forked child is registered weakly."""
    wm: WorkingMemory[str] = WorkingMemory()
    wm.search("q", lambda: "v")
    gone = weakref.ref(wm)
    del wm
    gc.collect()
    assert gone() is None
