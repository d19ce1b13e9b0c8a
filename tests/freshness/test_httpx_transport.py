"""Writes sent with plain httpx through the caching transport are followed too."""

from __future__ import annotations

import asyncio

import httpx

from wm_middleware import AsyncCachingTransport, CachingTransport
from wm_middleware.emulator import EmulatorServer

from .conftest import KEY, QUERY, TAG, wait_until


def _search(client: httpx.Client) -> str:
    return client.post("/v4/search", json={"q": QUERY, "containerTag": TAG}).text


def test_a_write_through_the_transport_settles_until_indexed(emulator: EmulatorServer) -> None:
    emulator.set_indexing_delay(0.5)
    transport = CachingTransport()
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=emulator.base_url, headers=headers, transport=transport) as client:
        assert "espresso" not in _search(client)
        added = client.post(
            "/v3/documents", json={"content": "The user likes espresso", "containerTag": TAG}
        )
        assert added.json()["status"] != "done"  # the answer still reads as usual
        # Reads go on until the fact shows and a status check (beside the reads) was made.
        processing = "/v3/documents/processing"
        wait_until(lambda: "espresso" in _search(client) and emulator.count("GET", processing))
    assert transport.working_memory.stats().hits >= 1


async def test_the_async_transport_follows_5x_writes(emulator: EmulatorServer) -> None:
    emulator.set_indexing_delay(0.3)
    transport = AsyncCachingTransport()
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        base_url=emulator.base_url, headers=headers, transport=transport
    ) as client:
        await client.post(f"/ns/{TAG}/search", json={"query": QUERY})
        await client.post(f"/ns/{TAG}/document", json={"content": "The user likes espresso"})
        for _ in range(400):
            answer = await client.post(f"/ns/{TAG}/search", json={"query": QUERY})
            if "espresso" in answer.text and emulator.count("GET", f"/ns/{TAG}/document/*"):
                break  # the fact shows, and a status check (beside the reads) was made
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the fact never showed")
    assert emulator.count("GET", f"/ns/{TAG}/document/*") >= 1
