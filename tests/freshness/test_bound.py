"""A cache never costs more upstream requests than no cache, status checks included.

Each loop shape runs twice against the emulator, which counts every request it answers: once
with the plain SDK, once wrapped. Writes keep documents pending across turns (the emulator
indexes each over ``DELAY`` seconds) and ``settle_interval`` is short, so entries of settling
scopes expire between turns and status checks are made. The bound holds whatever the timing:
counts are asserted, never times.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import wm_middleware
from wm_middleware.emulator import EmulatorServer

from .conftest import Sdk, done

DELAY = 0.4  # seconds a write's documents stay pending
TURN = 0.05  # seconds between turns
TURNS = 16

# shape -> (searches per turn, which turns add, whether it reads at all)
SHAPES: dict[str, tuple[int, int, bool]] = {
    "guide": (1, 1, True),  # profile + search, add every turn (Supermemory's guide)
    "writes only": (0, 1, False),  # add every turn, no reads
    "tools": (3, 1, True),  # profile + the same search 3x, add every turn
    "sparse": (1, 4, True),  # profile + search, add every 4th turn
    "read-only": (1, 0, True),
}


async def _loop(sdk: Sdk, client: Any, shape: str) -> None:
    searches, every, reads = SHAPES[shape]
    for turn in range(TURNS):
        if reads:
            await done(sdk.profile(client))
            for _ in range(searches):
                await done(sdk.search(client))
        if every and turn % every == 0:
            await done(sdk.add(client, f"The user likes fact number {turn}"))
        await asyncio.sleep(TURN)


async def _requests(sdk: Sdk, client: Any, shape: str, emulator: EmulatorServer) -> int:
    emulator.reset()
    emulator.set_indexing_delay(DELAY)
    emulator.reset_counts()
    await _loop(sdk, client, shape)
    return sum(emulator.counts.values())


@pytest.mark.parametrize("shape", list(SHAPES))
async def test_upstream_requests_never_exceed_those_without_the_cache(
    sdk: Sdk, mode: str, emulator: EmulatorServer, shape: str
) -> None:
    uncached = await _requests(sdk, sdk.client(mode, emulator.base_url), shape, emulator)
    cached_client = wm_middleware.wrap(
        sdk.client(mode, emulator.base_url), settle_interval=0.4, settle_max=5.0
    )
    cached = await _requests(sdk, cached_client, shape, emulator)
    checks = sdk.status_checks(emulator)
    assert cached <= uncached, (shape, cached, checks, uncached)
    if shape == "writes only":
        assert checks == 0  # no read was answered from memory: no credit
    if shape in ("sparse", "read-only"):
        assert cached < uncached  # reads between writes are saved


async def test_a_check_is_made_only_with_a_credit_earned_by_a_read_from_memory(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    emulator.set_indexing_delay(3600.0)
    cached = wm_middleware.wrap(
        sdk.client(mode, emulator.base_url), settle_interval=0.02, settle_max=30.0
    )
    await done(sdk.add(cached, "The user likes espresso"))
    for _ in range(5):  # each read finds its entry expired (30 ms apart, 15 ms life) ...
        await done(sdk.search(cached))
        await asyncio.sleep(0.03)
    assert sdk.status_checks(emulator) == 0  # ... and no read was answered from memory yet
    made = 5
    for _ in range(20):  # reads 5 ms apart: some answered from memory, which pay for checks
        await done(sdk.search(cached))
        made += 1
        await asyncio.sleep(0.005)
    answered_from_memory = made - sdk.reads(emulator)
    assert sdk.status_checks(emulator) <= answered_from_memory
