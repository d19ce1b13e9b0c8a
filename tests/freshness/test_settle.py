"""WorkingMemory.settle: the standalone mechanism, with a fetch function of the user's own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from wm_middleware import WorkingMemory

from ..conftest import FakeClock
from .conftest import wait_until


class Backend:
    """An eventually-consistent store of the user's own: writes become readable on ``index()``."""

    def __init__(self) -> None:
        self.visible: list[str] = []
        self.pending: list[str] = []
        self.reads = 0

    def write(self, fact: str) -> None:
        self.pending.append(fact)

    def index(self) -> None:
        self.visible.extend(self.pending)
        self.pending.clear()

    def indexed(self) -> bool:
        return not self.pending

    def read(self) -> list[str]:
        self.reads += 1
        return list(self.visible)


def test_the_settled_state_shows_once_until_holds_and_not_before() -> None:
    memory: WorkingMemory[list[str]] = WorkingMemory(ttl=3600)
    backend = Backend()
    assert memory.search("facts", backend.read) == []
    backend.write("likes tea")
    memory.invalidate("facts")
    settle = memory.settle("facts", until=backend.indexed, within=30, every=0.01)
    assert memory.search("facts", backend.read) == []  # not indexed yet: the old state
    assert memory.search("facts", backend.read) == []  # ... and cached meanwhile
    reads = backend.reads
    backend.index()
    assert settle.wait(10)
    assert settle.reason == "until"
    assert memory.search("facts", backend.read) == ["likes tea"]
    assert backend.reads == reads + 1
    assert not memory.settling("facts")


def test_an_entry_stored_while_settling_dies_at_the_deadline(clock: FakeClock) -> None:
    memory: WorkingMemory[list[str]] = WorkingMemory(ttl=3600, clock=clock)
    backend = Backend()
    settle = memory.settle("facts", within=5)
    memory.search("facts", backend.read, limit=3)
    clock.advance(4)
    memory.search("facts", backend.read, limit=3)
    assert backend.reads == 1  # a hit within the window
    backend.write("likes tea")
    backend.index()
    clock.advance(2)  # past the deadline: the entry expired with it, whatever the thread did
    assert memory.search("facts", backend.read, limit=3) == ["likes tea"]
    wait_until(lambda: not settle.active)
    assert settle.reason == "deadline"


def test_after_the_window_normal_caching_resumes(clock: FakeClock) -> None:
    memory: WorkingMemory[list[str]] = WorkingMemory(ttl=3600, clock=clock)
    backend = Backend()
    settle = memory.settle("facts", within=1, until=lambda: False)
    clock.advance(2)
    wait_until(lambda: not settle.active)
    memory.search("facts", backend.read)
    clock.advance(1000)
    memory.search("facts", backend.read)
    assert backend.reads == 1  # stored with the full ttl again


def test_ending_by_hand_drops_the_scope_and_other_scopes_keep_their_entries() -> None:
    memory: WorkingMemory[list[str]] = WorkingMemory(ttl=3600)
    backend = Backend()
    settle = memory.settle("facts", within=30)
    memory.search("facts", backend.read)
    memory.search("other", backend.read)
    assert settle.end()
    assert not settle.end()  # once
    assert settle.reason == "ended"
    assert not memory.has("facts")
    assert memory.has("other")


def test_a_fetch_in_flight_when_the_settle_begins_is_capped_too(clock: FakeClock) -> None:
    memory: WorkingMemory[str] = WorkingMemory(ttl=3600, clock=clock)
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "old"

    thread = threading.Thread(target=lambda: memory.search("facts", slow))
    thread.start()
    assert started.wait(10)
    memory.settle("facts", within=5)
    release.set()
    thread.join(10)
    clock.advance(6)
    assert memory.search("facts", lambda: "new") == "new"


def test_a_failing_condition_means_not_yet() -> None:
    memory: WorkingMemory[str] = WorkingMemory()
    calls: list[int] = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("status backend down")
        return True

    settle = memory.settle("facts", until=flaky, within=30, every=0.01)
    assert settle.wait(10)
    assert settle.reason == "until"
    assert len(calls) == 3


async def test_an_async_fetch_settles_the_same_way() -> None:
    memory: WorkingMemory[list[str]] = WorkingMemory(ttl=3600)
    backend = Backend()

    async def fetch() -> list[str]:
        return backend.read()

    backend.write("likes tea")
    settle = memory.settle("facts", until=backend.indexed, within=30, every=0.01)
    assert await memory.asearch("facts", fetch) == []
    backend.index()
    await asyncio.to_thread(settle.wait, 10)
    assert await memory.asearch("facts", fetch) == ["likes tea"]


def test_adapter_scopes_settle_like_invalidate_scope() -> None:
    memory: WorkingMemory[Any] = WorkingMemory(ttl=3600)
    scope = ("tag", ("https://api", "fp"), "user-1")
    key = ("sm3", "profile")
    memory.load(key, lambda: "old", scopes=(scope,))
    settle = memory.settle(scope, within=30)
    assert memory.settling(scope)
    settle.end()
    assert memory.load(key, lambda: "new", scopes=(scope,)).value == "new"


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"within": 0}, ValueError, "within"),
        ({"within": float("inf")}, ValueError, "within"),
        ({"within": "5"}, TypeError, "within"),
        ({"within": 5, "every": -1}, ValueError, "every"),
        ({"within": 5, "until": 3}, TypeError, "until"),
    ],
)
def test_bad_arguments_name_themselves(kwargs: dict[str, Any], error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        WorkingMemory().settle("facts", **kwargs)


def test_an_async_condition_is_refused() -> None:
    async def until() -> bool:
        return True

    with pytest.raises(TypeError, match="until"):
        WorkingMemory().settle("facts", until=until, within=5)


def test_settle_needs_a_scope_and_a_hashable_one() -> None:
    with pytest.raises(ValueError, match="scope"):
        WorkingMemory().settle(within=5)
    with pytest.raises(TypeError):
        WorkingMemory().settle(["unhashable"], within=5)
