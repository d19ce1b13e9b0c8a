"""A write reaches the reads of its scope however the scope is spelled.

A container tag (3.x) or namespace (5.x) may hold ``%``, ``%XX`` sequences, spaces, unicode and
other characters a path segment can carry. A 5.x namespace travels in the path, which the API
percent-decodes: ``team%20a`` and ``team a`` are one namespace there, and the read and the write
must name it the same way here. Runs against the installed SDK generation, sync and async, and
through the plain httpx transport; assertions count the requests the emulator answered.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from wm_middleware import AsyncCachingTransport, CachingTransport, WorkingMemory
from wm_middleware.emulator import EmulatorServer

from ..conftest import v5_only
from .conftest import KEY, Generation, done

NAMES = [
    "team%20a",
    "%E6%9D%B1",
    "a%2Bb",
    "100%",
    "50%off",
    "%zz",
    "team a",
    "ünï cødé 東京",
    "a+b=c;d,e~!*'()&$@:",
]
QUERY = "what does the user drink?"
FACT = "The user drinks oolong tea"


@pytest.mark.parametrize("name", NAMES)
async def test_a_write_drops_the_reads_of_its_scope(
    emulator: EmulatorServer,
    generation: Generation,
    instrumented: WorkingMemory[Any],
    mode: str,
    name: str,
) -> None:
    client = generation.client(mode, emulator.base_url)
    await done(generation.search(client, name, query=QUERY))
    await done(generation.add(client, name, content=FACT))
    answer = await done(generation.search(client, name, query=QUERY))
    assert generation.searches(emulator) == 2  # the read after the write asked the API again
    assert "oolong" in answer.model_dump_json()


@v5_only
@pytest.mark.parametrize(
    ("written", "read"),
    [("team%20a", "team a"), ("team a", "team%20a"), ("%E6%9D%B1", "東"), ("100%25", "100%")],
)
async def test_a_write_drops_the_reads_of_every_spelling_of_its_namespace(
    emulator: EmulatorServer,
    generation: Generation,
    instrumented: WorkingMemory[Any],
    mode: str,
    written: str,
    read: str,
) -> None:
    client = generation.client(mode, emulator.base_url)
    await done(generation.search(client, read, query=QUERY))
    await done(generation.add(client, written, content=FACT))
    answer = await done(generation.search(client, read, query=QUERY))
    assert generation.searches(emulator) == 2
    assert "oolong" in answer.model_dump_json()


# -- plain httpx: the path as sent, whichever way the caller encoded it ---------------------------
def _client(server: EmulatorServer, is_async: bool) -> Any:
    headers = {"Authorization": f"Bearer {KEY}"}
    if is_async:
        return httpx.AsyncClient(
            base_url=server.base_url, headers=headers, transport=AsyncCachingTransport()
        )
    return httpx.Client(base_url=server.base_url, headers=headers, transport=CachingTransport())


@pytest.mark.parametrize(
    ("written", "read"),
    [("team%20a", "team a"), ("team a", "team%20a"), ("%E6%9D%B1", "東"), ("100%25", "100%25")],
)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_write_through_the_transport_drops_every_spelling_of_its_namespace(
    emulator: EmulatorServer, is_async: bool, written: str, read: str
) -> None:
    client = _client(emulator, is_async)
    try:
        for path, body in (
            (f"/ns/{read}/search", {"query": QUERY}),
            (f"/ns/{written}/document", {"content": FACT}),
            (f"/ns/{read}/search", {"query": QUERY}),
        ):
            answer = await done(client.post(path, json=body))
            assert answer.status_code == 200
    finally:
        await done(client.aclose() if is_async else client.close())
    assert emulator.count("POST", "/ns/*/search") == 2
    assert "oolong" in answer.text


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_the_transport_asks_about_a_write_in_its_own_namespace(
    emulator: EmulatorServer, is_async: bool
) -> None:
    # ``100%2541`` on the wire is the namespace ``100%41``: decoded twice it would be ``100A``.
    emulator.set_indexing_delay(0.3)
    client = _client(emulator, is_async)
    try:
        search = {"query": QUERY}
        await done(client.post("/ns/100%2541/search", json=search))
        await done(client.post("/ns/100%2541/document", json={"content": FACT}))
        deadline = time.monotonic() + 20  # a bound against a hang, not a measurement
        while "oolong" not in (await done(client.post("/ns/100%2541/search", json=search))).text:
            assert time.monotonic() < deadline, "the fact never showed"
            await asyncio.sleep(0.01)
    finally:
        await done(client.aclose() if is_async else client.close())
    assert emulator.count("GET", "/ns/100%41/document/*") >= 1
    assert emulator.count("GET", "/ns/100A/document/*") == 0
