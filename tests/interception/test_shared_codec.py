"""What crosses the shared tier: the API's JSON, never a pickle, rebuilt into the client's own type.

Each adapter hands the tier a codec with its reads. Here two working memories share one tier held
in this process (``LocalTier``, which honours the codec as a tier shared by processes does) and
every stored value goes through JSON text on its way from the first to the second, as it would
through Redis. The reads are made by the real SDK (3.x or 5.x, whichever is installed), the
supermemory-openai-sdk middleware and plain httpx, against the emulator.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

import wm_middleware
from tests.core.test_shared_tier_hook import LocalTier
from wm_middleware import AsyncCachingTransport, CachingTransport, WorkingMemory
from wm_middleware.emulator import EmulatorServer

from ..conftest import answer_of
from .conftest import KEY, QUERY, TAG, Generation, done, instrumentation

# Every cached read of each generation: (name, the call on a client).
READS: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {
    "3": [
        ("search.memories", lambda c: c.search.memories(q=QUERY, container_tag=TAG)),
        ("search.execute", lambda c: c.search.execute(q=QUERY, container_tags=[TAG])),
        ("search.documents", lambda c: c.search.documents(q=QUERY, container_tags=[TAG])),
        ("profile", lambda c: c.profile(container_tag=TAG, q=QUERY)),
        ("documents.list", lambda c: c.documents.list(container_tags=[TAG])),
    ],
    "5": [
        ("search", lambda c: c.search(TAG, query=QUERY)),
        ("profile", lambda c: c.profile(TAG)),
        ("list", lambda c: c.list(TAG, "memories")),
    ],
}


def through_json(tier: LocalTier) -> str:
    """Replace what ``tier`` holds by what another process would read back; return the text."""
    (key, data), *others = tier.stored.items()
    assert not others
    text = json.dumps(data, allow_nan=False)  # raises on anything that is not plain JSON data
    tier.stored[key] = json.loads(text)
    return text


async def again_from_the_tier(
    emulator: EmulatorServer, tier: LocalTier, call: Callable[[], Awaitable[Any]]
) -> tuple[Any, Any]:
    """``call()`` answered upstream, then ``call()`` again once ``tier`` holds the answer as
    another process reads it back (without the API key), answered by the tier alone."""
    original = await call()
    assert KEY not in through_json(tier)
    requests = emulator.count()
    shared = await call()
    assert emulator.count() == requests  # served by the tier, not upstream
    return original, shared


def test_every_cached_read_of_the_installed_sdk_has_a_codec(generation: Generation) -> None:
    assert READS[generation.major]


@pytest.mark.parametrize("read", range(5))
async def test_a_read_shared_as_json_comes_back_equal_and_of_the_clients_own_type(
    emulator: EmulatorServer, generation: Generation, mode: str, read: int
) -> None:
    if read >= len(READS[generation.major]):
        pytest.skip("this generation has fewer cached reads")
    _, call = READS[generation.major][read]
    generation.seed(emulator)
    expected = await done(call(generation.client(mode, emulator.base_url)))
    tier = LocalTier()
    first = wm_middleware.wrap(
        generation.client(mode, emulator.base_url), working_memory=WorkingMemory(shared=tier)
    )
    fetched = await done(call(first))
    assert type(fetched) is type(expected)
    assert answer_of(fetched) == answer_of(expected)
    text = through_json(tier)
    assert KEY not in text

    requests = emulator.count()
    second = wm_middleware.wrap(
        generation.client(mode, emulator.base_url), working_memory=WorkingMemory(shared=tier)
    )
    shared = await done(call(second))
    assert emulator.count() == requests  # served by the tier, not upstream
    assert type(shared) is type(expected)
    assert shared == fetched  # what the first process's client returned, timing included
    assert second.working_memory.stats().shared_hits == 1
    # Kept in the second memory's L1 like any entry: the next call is a local hit, and a
    # caller mutating its result does not change the next one's.
    again = await done(call(second))
    assert again == fetched
    assert again is not shared
    assert tier.loads() == 2


async def test_the_codec_runs_only_when_the_tier_is_used(
    emulator: EmulatorServer, generation: Generation
) -> None:
    generation.seed(emulator)
    tier = LocalTier()
    memory: WorkingMemory[Any] = WorkingMemory(shared=tier)
    client = wm_middleware.wrap(generation.client("sync", emulator.base_url), working_memory=memory)
    _, call = READS[generation.major][0]
    for _ in range(3):
        call(client)
    stats = memory.stats()
    assert (stats.misses, stats.hits, tier.loads()) == (1, 2, 1)


@pytest.mark.parametrize("transport_mode", ["sync", "async"])
async def test_an_httpx_answer_is_shared_as_status_content_type_and_body_text(
    emulator: EmulatorServer, transport_mode: str
) -> None:
    emulator.seed(KEY, ["User drinks green tea", "User lives in Lyon"], container_tag=TAG)
    tier = LocalTier()
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"q": QUERY, "containerTag": TAG}

    async def post() -> httpx.Response:
        memory: WorkingMemory[Any] = WorkingMemory(shared=tier)
        if transport_mode == "sync":
            with httpx.Client(
                base_url=emulator.base_url,
                headers=headers,
                transport=CachingTransport(working_memory=memory),
            ) as client:
                return client.post("/v4/search", json=body)  # noqa: ASYNC212 - the sync case
        async with httpx.AsyncClient(
            base_url=emulator.base_url,
            headers=headers,
            transport=AsyncCachingTransport(working_memory=memory),
        ) as aclient:
            return await aclient.post("/v4/search", json=body)

    original, shared = await again_from_the_tier(emulator, tier, post)
    assert shared.status_code == original.status_code == 200
    assert shared.content == original.content
    assert shared.json() == original.json()
    assert shared.headers["content-type"] == original.headers["content-type"]
    # Nothing of the exchange it came from (date, server, cookies) is replayed.
    assert set(shared.headers) <= {"content-type", "content-length"}


async def test_the_openai_middleware_profile_search_is_shared_as_its_two_dicts(
    emulator: EmulatorServer,
) -> None:
    middleware = pytest.importorskip("supermemory_openai.middleware")
    emulator.seed(
        KEY, ["User drinks green tea", {"content": "Ada", "static": True}], container_tag=TAG
    )
    tier = LocalTier()

    async def profile_search() -> Any:
        with instrumentation(working_memory=WorkingMemory(shared=tier)):
            return await middleware.supermemory_profile_search(TAG, QUERY, KEY, emulator.base_url)

    original, shared = await again_from_the_tier(emulator, tier, profile_search)
    assert type(shared) is type(original)
    assert (shared.profile, shared.search_results) == (original.profile, original.search_results)
