"""A fetch that asks for its own key: a clear error instead of a key stuck forever (Go's
singleflight documents the same deadlock; here it is detected)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from wm_middleware import WorkingMemory


def test_a_sync_fetch_searching_its_own_key_raises_and_the_key_stays_usable() -> None:
    wm: WorkingMemory[int] = WorkingMemory()
    with pytest.raises(RuntimeError, match="same key"):
        wm.search("k", lambda: wm.search("k", lambda: 1))
    assert wm.stats().inflight == 0
    # Usable afterwards, from this thread and from another one.
    assert wm.search("k", lambda: 2) == 2
    results: list[int] = []
    other = threading.Thread(target=lambda: results.append(wm.search("k", lambda: 3)))
    other.start()
    other.join(timeout=30)
    assert results == [2]


@pytest.mark.parametrize("via", ["directly", "from a child task"])
async def test_an_async_fetch_searching_its_own_key_raises_and_the_key_stays_usable(
    via: str,
) -> None:
    wm: WorkingMemory[int] = WorkingMemory()

    async def inner() -> int:
        return 1

    async def reentrant() -> int:
        if via == "directly":
            return await wm.asearch("k", inner)
        return await asyncio.create_task(wm.asearch("k", inner))

    with pytest.raises(RuntimeError, match="same key"):
        await asyncio.wait_for(wm.asearch("k", reentrant), timeout=30)
    assert wm.stats().inflight == 0

    async def fresh() -> int:
        return 2

    assert await wm.asearch("k", fresh) == 2


async def test_a_sync_search_of_its_own_key_inside_an_async_fetch_raises() -> None:
    wm: WorkingMemory[int] = WorkingMemory()

    async def reentrant() -> int:
        return wm.search("k", lambda: 1)

    with pytest.raises(RuntimeError, match="same key"):
        await asyncio.wait_for(wm.asearch("k", reentrant), timeout=30)
    assert wm.search("k", lambda: 2) == 2


def test_a_fetch_may_search_other_keys() -> None:
    wm: WorkingMemory[int] = WorkingMemory()
    assert wm.search("outer", lambda: wm.search("inner", lambda: 1) + 1) == 2
    assert (wm.get("outer"), wm.get("inner")) == (2, 1)
