"""Stale-while-revalidate through the real SDK: the refresh really reaches the server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

from ..conftest import SDK_MAJOR, FakeClock
from .conftest import instrumentation

if SDK_MAJOR != "3":
    pytest.skip("supermemory 3.x only", allow_module_level=True)

from supermemory import AsyncSupermemory, Supermemory


@pytest.fixture
def memory(emulator: EmulatorServer, clock: FakeClock) -> Iterator[WorkingMemory[object]]:
    """The emulator seeded with one memory; ``instrument()`` with a memory on ``clock`` whose
    entries refresh after 10 s."""
    emulator.seed("test-key", ["The user prefers dark mode"], container_tag="user-1")
    memory: WorkingMemory[object] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)
    with instrumentation(working_memory=memory):
        yield memory


def settle(memory: WorkingMemory[object]) -> None:
    for _ in range(10_000):
        if memory.stats().inflight == 0 and not memory.refreshing:
            return
        threading.Event().wait(0.001)
    raise AssertionError("the refresh never ended")


def test_an_old_hit_refreshes_once_through_the_sdk(
    emulator: EmulatorServer, clock: FakeClock, memory: WorkingMemory[object]
) -> None:
    client = Supermemory(api_key="test-key", base_url=emulator.base_url)
    first = client.search.memories(q="dark mode", container_tag="user-1")
    emulator.seed(
        "test-key", ["Dark mode everywhere, also in the terminal"], container_tag="user-1"
    )
    clock.advance(11.0)
    stale = client.search.memories(q="dark mode", container_tag="user-1")
    assert stale.model_dump() == first.model_dump()  # served at once, from memory
    settle(memory)
    assert emulator.count("POST", "/v4/search") == 2  # one refresh reached the server
    fresh = client.search.memories(q="dark mode", container_tag="user-1")
    assert len(fresh.results) == len(first.results) + 1
    assert emulator.count("POST", "/v4/search") == 2


async def test_an_old_async_hit_refreshes_once_through_the_sdk(
    emulator: EmulatorServer, clock: FakeClock, memory: WorkingMemory[object]
) -> None:
    client = AsyncSupermemory(api_key="test-key", base_url=emulator.base_url)
    await client.search.memories(q="dark mode", container_tag="user-1")
    clock.advance(11.0)
    await asyncio.gather(
        *(client.search.memories(q="dark mode", container_tag="user-1") for _ in range(5))
    )
    for _ in range(10_000):
        if memory.stats().inflight == 0 and not memory.refreshing:
            break
        await asyncio.sleep(0.001)
    assert emulator.count("POST", "/v4/search") == 2
