"""Shadow mode on plain httpx clients (``instrument(httpx=True)``) against the emulator: the
replayed responses' ids are compared, and another API key is never a candidate."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse

from .tenants import KEYS, TAG, same_vector, seed_tenants


@pytest.fixture
def server(emulator: EmulatorServer) -> Iterator[EmulatorServer]:
    yield seed_tenants(emulator)
    wm_middleware.uninstrument()


def search_sync(server: EmulatorServer, body: dict[str, str], headers: dict[str, str]) -> Any:
    with httpx.Client(base_url=server.base_url, headers=headers) as client:
        return client.post("/v4/search", json=body).json()


async def search(server: EmulatorServer, mode: str, query: str, key: str = KEYS[0]) -> Any:
    body = {"q": query, "containerTag": TAG}
    headers = {"Authorization": f"Bearer {key}"}
    if mode == "sync":
        return search_sync(server, body, headers)
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers) as client:
        return (await client.post("/v4/search", json=body)).json()


async def test_a_rewording_agrees_and_another_key_is_never_a_candidate(
    server: EmulatorServer, mode: str
) -> None:
    memory: WorkingMemory[Any] = wm_middleware.instrument(httpx=True, semantic="shadow")
    first = await search(server, mode, "what does the user drink")
    second = await search(server, mode, "What does the user drink?")
    assert first["results"]
    assert second["results"] == first["results"]
    await search(server, mode, "What does the user drink?", key=KEYS[1])
    stats = memory.stats()
    assert (stats.misses, stats.near_candidates, stats.near_agreed) == (3, 1, 1)


async def test_a_near_query_with_other_results_disagrees(server: EmulatorServer, mode: str) -> None:
    memory: WorkingMemory[Any] = wm_middleware.instrument(
        httpx=True, semantic=SemanticReuse(embed=same_vector, vetoes=())
    )
    await search(server, mode, "green tea")
    lyon = await search(server, mode, "Lyon")
    assert lyon["results"][0]["memory"] == "User lives in Lyon"
    stats = memory.stats()
    assert (stats.near_candidates, stats.near_disagreed) == (1, 1)
