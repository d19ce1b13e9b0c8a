"""Shadow mode on the supermemory-openai-sdk middleware's profile search (SDK 3.x underneath):
its answers' ids are read from ``search_results``, and its partition keeps tenants apart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("supermemory_openai", reason="needs supermemory-openai-sdk (supermemory 3.x)")

from supermemory_openai import middleware

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse

from .tenants import KEYS, TAG, same_vector, seed_tenants


@pytest.fixture
def server(emulator: EmulatorServer) -> Iterator[EmulatorServer]:
    yield seed_tenants(emulator)
    wm_middleware.uninstrument()


async def profile(server: EmulatorServer, query: str, key: str = KEYS[0]) -> list[str]:
    found = await middleware.supermemory_profile_search(TAG, query, key, server.base_url)
    return [item["id"] for item in found.search_results["results"]]


async def test_a_rewording_of_a_profile_search_agrees_from_its_real_results(
    server: EmulatorServer,
) -> None:
    memory: WorkingMemory[object] = wm_middleware.instrument(semantic="shadow")
    first = await profile(server, "what does the user drink")
    second = await profile(server, "What does the user drink?")
    assert first
    assert second == first
    stats = memory.stats()
    assert (stats.misses, stats.near_candidates, stats.near_agreed) == (2, 1, 1)


async def test_a_profile_search_of_another_tenant_is_never_a_candidate(
    server: EmulatorServer,
) -> None:
    memory: WorkingMemory[object] = wm_middleware.instrument(
        semantic=SemanticReuse(embed=same_vector, vetoes=())
    )
    await profile(server, "what does the user drink", key=KEYS[0])
    await profile(server, "where does the user live", key=KEYS[1])
    assert memory.stats().near_candidates == 0
    await profile(server, "where does the user live", key=KEYS[0])
    assert memory.stats().near_candidates == 1
