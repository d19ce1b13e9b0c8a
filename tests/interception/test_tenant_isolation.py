"""Entries never cross tenants: a tenant is the pair (base URL, API key), under either SDK.

Runs against the installed supermemory generation (3.x or 5.x), sync and async clients.
"""

from __future__ import annotations

from typing import Any

import pytest

from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

from .conftest import KEY, OTHER_KEY, OTHER_TAG, TAG, Generation, done


@pytest.fixture
def seeded(emulator: EmulatorServer, generation: Generation) -> EmulatorServer:
    generation.seed(emulator)
    return emulator


@pytest.fixture
def second_emulator(second_emulator: EmulatorServer, generation: Generation) -> EmulatorServer:
    """tests/conftest.py's clean second emulator, seeded."""
    generation.seed(second_emulator)
    return second_emulator


async def test_another_api_key_is_another_tenant(
    seeded: EmulatorServer, generation: Generation, instrumented: WorkingMemory[Any], mode: str
) -> None:
    first = generation.client(mode, seeded.base_url, api_key=KEY)
    second = generation.client(mode, seeded.base_url, api_key=OTHER_KEY)
    for client in (first, second, first, second):
        await done(generation.search(client))
    assert generation.searches(seeded) == 2


async def test_another_base_url_is_another_tenant(
    seeded: EmulatorServer,
    second_emulator: EmulatorServer,
    generation: Generation,
    instrumented: WorkingMemory[Any],
    mode: str,
) -> None:
    first = generation.client(mode, seeded.base_url)
    second = generation.client(mode, second_emulator.base_url)
    for client in (first, second, first, second):
        await done(generation.search(client))
    assert generation.searches(seeded) == 1
    assert generation.searches(second_emulator) == 1


async def test_a_write_of_one_tenant_keeps_the_other_tenants_entries(
    seeded: EmulatorServer, generation: Generation, instrumented: WorkingMemory[Any], mode: str
) -> None:
    mine = generation.client(mode, seeded.base_url, api_key=KEY)
    theirs = generation.client(mode, seeded.base_url, api_key=OTHER_KEY)
    for client in (mine, theirs):
        await done(generation.search(client))
    await done(generation.add(mine))
    for client in (mine, theirs):
        await done(generation.search(client))
    assert generation.searches(seeded) == 3  # only the writer's tenant went upstream again


async def test_a_write_naming_one_tag_keeps_the_other_tags_entries(
    seeded: EmulatorServer, generation: Generation, instrumented: WorkingMemory[Any], mode: str
) -> None:
    client = generation.client(mode, seeded.base_url)
    for tag in (TAG, OTHER_TAG):
        await done(generation.search(client, tag))
    await done(generation.add(client, TAG))
    for tag in (TAG, OTHER_TAG):
        await done(generation.search(client, tag))
    assert generation.searches(seeded) == 3  # only the written tag went upstream again
