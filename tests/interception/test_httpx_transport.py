"""Plain httpx callers: CachingTransport / AsyncCachingTransport and ``instrument(httpx=True)``.

Runs in both SDK environments: only httpx and the emulator are needed (the SDK nesting test uses
whichever supermemory generation is installed). Assertions are on the requests the emulator saw.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx
import pytest

import wm_middleware
from wm_middleware import AsyncCachingTransport, CachingTransport, WorkingMemory
from wm_middleware.emulator import EmulatorServer

KEY = "sk-a"
TAG = "user-1"
SEARCH = {"q": "what does the user drink", "containerTag": TAG}

Post = Callable[..., Awaitable[httpx.Response]]


@pytest.fixture
def server(emulator: EmulatorServer) -> EmulatorServer:
    emulator.seed(KEY, ["User drinks green tea", "User lives in Lyon"], container_tag=TAG)
    emulator.seed("sk-b", ["User drinks coffee"], container_tag=TAG)
    return emulator


@pytest.fixture(params=["sync", "async"])
async def client(
    request: pytest.FixtureRequest, server: EmulatorServer
) -> AsyncIterator[tuple[Post, WorkingMemory[Any]]]:
    """``post(path, **kw)`` through a Client or AsyncClient with a caching transport."""
    headers = {"Authorization": f"Bearer {KEY}"}
    if request.param == "sync":
        transport = CachingTransport()
        with httpx.Client(base_url=server.base_url, headers=headers, transport=transport) as sync:

            async def post(path: str, **kwargs: Any) -> httpx.Response:
                # A blocking call on purpose: one test body drives both client kinds.
                return sync.request(kwargs.pop("method", "POST"), path, **kwargs)  # noqa: ASYNC212

            yield post, transport.working_memory
    else:
        atransport = AsyncCachingTransport()
        async with httpx.AsyncClient(
            base_url=server.base_url, headers=headers, transport=atransport
        ) as aclient:

            async def apost(path: str, **kwargs: Any) -> httpx.Response:
                return await aclient.request(kwargs.pop("method", "POST"), path, **kwargs)

            yield apost, atransport.working_memory


# -- reads -----------------------------------------------------------------------------------------
async def test_identical_searches_reach_the_server_once(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer
) -> None:
    post, memory = client
    responses = [await post("/v4/search", json=SEARCH) for _ in range(10)]
    assert server.count("POST", "/v4/search") == 1
    assert {r.status_code for r in responses} == {200}
    assert all(r.json() == responses[0].json() for r in responses)
    assert responses[0].json()["results"]
    assert (memory.stats().misses, memory.stats().hits) == (1, 9)


@pytest.mark.parametrize(
    ("second_path", "second_kwargs"),
    [
        pytest.param("/v4/search", {"headers": {"Authorization": "Bearer sk-b"}}, id="credentials"),
        pytest.param(
            "/v4/search", {"headers": {"x-api-key": "sk-b", "Authorization": ""}}, id="x-api-key"
        ),
        pytest.param("/v4/search?trace=1", {}, id="query-string"),
        pytest.param("/v4/search/", {}, id="path"),
        pytest.param("/v4/search", {"json": {**SEARCH, "limit": 3}}, id="body"),
        pytest.param("/v4/search", {"json": {**SEARCH, "containerTag": "user-2"}}, id="tag"),
    ],
)
async def test_credentials_url_and_body_are_part_of_the_key(
    client: tuple[Post, WorkingMemory[Any]],
    server: EmulatorServer,
    second_path: str,
    second_kwargs: dict[str, Any],
) -> None:
    post, memory = client
    await post("/v4/search", json=SEARCH)
    kwargs = {"json": SEARCH, **second_kwargs}
    await post(second_path, **kwargs)
    await post(second_path, **kwargs)
    assert server.count("POST", "*") == 2
    assert memory.stats().misses == 2


async def test_equal_json_bodies_in_another_key_order_share_an_entry(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer
) -> None:
    post, _ = client
    await post("/v4/search", content=b'{"q": "tea", "containerTag": "user-1"}')
    await post("/v4/search", content=b'{"containerTag":"user-1","q":"tea"}')
    assert server.count("POST", "/v4/search") == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v4/profile", {"containerTag": TAG, "q": "tea"}),
        ("/v3/search", {"q": "tea", "containerTags": [TAG]}),
        ("/v3/documents/list", {"containerTags": [TAG]}),
        (f"/ns/{TAG}/search", {"query": "tea"}),
        (f"/v5/ns/{TAG}/search", {"query": "tea"}),
        (f"/v5/ns/{TAG}/profile", {}),
        (f"/v5/ns/{TAG}/list/memories", {}),
    ],
)
async def test_every_read_path_is_cached(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer, path: str, body: Any
) -> None:
    post, _ = client
    for _ in range(3):
        assert (await post(path, json=body)).status_code == 200
    assert server.count("POST", path) == 1


async def test_gets_and_other_paths_pass_through(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer
) -> None:
    post, memory = client
    for _ in range(2):
        await post("/v3/settings", method="GET")
        await post(f"/v5/ns/{TAG}/list/documents/memory-counts", json={"ids": []})
    assert server.count("GET", "/v3/settings") == 2
    assert server.count("POST", "*memory-counts") == 2
    assert memory.stats().lookups == 0


# -- writes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("read_path", "read_body", "write"),
    [
        ("/v4/search", SEARCH, ("POST", "/v3/documents", {"content": "x", "containerTags": [TAG]})),
        ("/v4/search", SEARCH, ("DELETE", "/v4/memories", {"containerTag": TAG, "id": "m"})),
        ("/v4/search", SEARCH, ("PATCH", "/v3/settings", {"chunkSize": 512})),
        (
            f"/v5/ns/{TAG}/search",
            {"query": "tea"},
            ("POST", f"/v5/ns/{TAG}/document", {"content": "x"}),
        ),
        (f"/ns/{TAG}/profile", {}, ("DELETE", f"/ns/{TAG}/memories", {"ids": ["m"]})),
    ],
    ids=["3x-add", "3x-forget", "3x-settings", "5x-add", "5x-forget"],
)
async def test_a_write_through_the_same_client_invalidates(
    client: tuple[Post, WorkingMemory[Any]],
    server: EmulatorServer,
    read_path: str,
    read_body: Any,
    write: tuple[str, str, Any],
) -> None:
    post, _ = client
    await post(read_path, json=read_body)
    method, path, body = write
    await post(path, method=method, json=body)  # the answer does not matter, only that it was sent
    await post(read_path, json=read_body)
    assert server.count("POST", read_path) == 2


async def test_a_write_to_another_tag_keeps_the_entry(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer
) -> None:
    post, _ = client
    await post("/v4/search", json=SEARCH)
    await post("/v3/documents", json={"content": "x", "containerTag": "user-2"})
    await post("/v4/search", json=SEARCH)
    assert server.count("POST", "/v4/search") == 1


# -- what is never stored --------------------------------------------------------------------------
async def test_error_responses_are_returned_and_not_cached(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer
) -> None:
    post, _ = client
    server.fail_next(1, 500, path="/v4/search")
    failed = await post("/v4/search", json=SEARCH)
    assert failed.status_code == 500
    assert "error" in failed.json()
    ok = await post("/v4/search", json=SEARCH)
    assert ok.status_code == 200
    assert server.count("POST", "/v4/search") == 2


async def test_unread_streaming_bodies_pass_through(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer
) -> None:
    post, _ = client
    body = json.dumps(SEARCH).encode()

    async def stream() -> AsyncIterator[bytes]:
        yield body

    def sync_stream() -> Iterator[bytes]:
        yield body

    for _ in range(2):
        try:
            await post("/v4/search", content=sync_stream())
        except RuntimeError:  # an AsyncClient refuses a sync iterator: send an async one
            await post("/v4/search", content=stream())
    assert server.count("POST", "/v4/search") == 2


# -- value isolation -------------------------------------------------------------------------------
async def test_each_hit_is_a_fresh_response_whose_json_can_be_mutated(
    client: tuple[Post, WorkingMemory[Any]], server: EmulatorServer
) -> None:
    post, _ = client
    first = await post("/v4/search", json=SEARCH)
    expected = first.json()
    first.json()["results"].clear()
    hits = [await post("/v4/search", json=SEARCH) for _ in range(3)]
    assert len({id(r) for r in [first, *hits]}) == 4
    for hit in hits:
        data = hit.json()
        assert data == expected
        data["results"].clear()
        assert hit.request.url.path == "/v4/search"
        assert int(hit.headers["content-length"]) == len(hit.content)
    assert server.count("POST", "/v4/search") == 1


def _gzip_handler(calls: list[httpx.Request]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        payload = gzip.compress(json.dumps({"results": [{"memory": "tea"}], "total": 1}).encode())
        return httpx.Response(
            200,
            headers={
                "content-type": "application/json",
                "content-encoding": "gzip",
                "content-length": str(len(payload)),
            },
            stream=httpx.ByteStream(payload),
        )

    return handler


def _check_replayed(response: httpx.Response) -> None:
    assert response.json() == {"results": [{"memory": "tea"}], "total": 1}
    assert "content-encoding" not in response.headers
    assert int(response.headers["content-length"]) == len(response.content)


def test_gzip_answers_are_stored_decoded_and_replay_sync() -> None:
    calls: list[httpx.Request] = []
    transport = CachingTransport(httpx.MockTransport(_gzip_handler(calls)))
    with httpx.Client(transport=transport, headers={"Authorization": "Bearer k"}) as client:
        for _ in range(3):
            _check_replayed(client.post("http://sm.test/v4/search", json=SEARCH))
    assert len(calls) == 1


async def test_gzip_answers_are_stored_decoded_and_replay_async() -> None:
    calls: list[httpx.Request] = []
    transport = AsyncCachingTransport(httpx.MockTransport(_gzip_handler(calls)))
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(3):
            _check_replayed(await client.post("http://sm.test/v4/search", json=SEARCH))
    assert len(calls) == 1


def test_transports_share_a_working_memory_when_given_one() -> None:
    memory: WorkingMemory[Any] = WorkingMemory()
    assert CachingTransport(working_memory=memory).working_memory is memory
    assert AsyncCachingTransport(working_memory=memory).working_memory is memory
    assert CachingTransport().working_memory is not CachingTransport().working_memory


# -- instrument(httpx=True) ------------------------------------------------------------------------
@pytest.fixture
def instrumented_httpx() -> Iterator[WorkingMemory[Any]]:
    memory = wm_middleware.instrument(httpx=True)
    try:
        yield memory
    finally:
        wm_middleware.uninstrument()


async def test_instrument_httpx_caches_a_plain_async_client(
    instrumented_httpx: WorkingMemory[Any], server: EmulatorServer
) -> None:
    async with httpx.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {KEY}"}
    ) as client:
        responses = [await client.post("/v4/search", json=SEARCH) for _ in range(10)]
        await client.post("/v3/documents", json={"content": "x", "containerTag": TAG})
        await client.post("/v4/search", json=SEARCH)
    assert server.count("POST", "/v4/search") == 2
    assert all(r.json() == responses[0].json() for r in responses)
    assert responses[5].elapsed.total_seconds() == 0


def test_instrument_httpx_caches_a_plain_sync_client_but_not_streamed_reads(
    instrumented_httpx: WorkingMemory[Any], server: EmulatorServer
) -> None:
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        for _ in range(5):
            assert c.post("/v4/search", json=SEARCH).status_code == 200
        for _ in range(2):
            with c.stream("POST", "/v4/search", json=SEARCH) as streamed:
                assert json.loads(streamed.read())["results"]
    assert server.count("POST", "/v4/search") == 3


def test_instrument_httpx_leaves_clients_with_an_auth_flow_alone(
    instrumented_httpx: WorkingMemory[Any], server: EmulatorServer
) -> None:
    def bearer(request: httpx.Request) -> httpx.Request:
        request.headers["Authorization"] = f"Bearer {KEY}"
        return request

    with httpx.Client(base_url=server.base_url, auth=bearer) as client:
        for _ in range(2):
            assert client.post("/v4/search", json=SEARCH).status_code == 200
    assert server.count("POST", "/v4/search") == 2  # credentials unknown at send(): not cached


def test_uninstrument_restores_httpx_send() -> None:
    originals = (httpx.Client.send, httpx.AsyncClient.send)
    wm_middleware.instrument(httpx=True)
    try:
        assert httpx.Client.send is not originals[0]
    finally:
        wm_middleware.uninstrument()
    assert (httpx.Client.send, httpx.AsyncClient.send) == originals


def test_instrument_without_httpx_does_not_patch_send(
    instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        for _ in range(2):
            c.post("/v4/search", json=SEARCH)
    assert server.count("POST", "/v4/search") == 2


try:
    _SDK_MAJOR = version("supermemory").split(".")[0]
except PackageNotFoundError:  # pragma: no cover
    _SDK_MAJOR = ""


@pytest.mark.skipif(_SDK_MAJOR not in ("3", "5"), reason="needs the supermemory SDK")
async def test_sdk_calls_under_instrument_httpx_are_handled_once(
    instrumented_httpx: WorkingMemory[Any], server: EmulatorServer
) -> None:
    import supermemory

    client = supermemory.AsyncSupermemory(api_key=KEY, base_url=server.base_url)
    for _ in range(10):
        if _SDK_MAJOR == "3":
            await client.search.memories(q="tea", container_tag=TAG)
        else:
            await client.search(TAG, query="tea")
    path = "/v4/search" if _SDK_MAJOR == "3" else f"/ns/{TAG}/search"
    assert server.count("POST", path) == 1
    stats = instrumented_httpx.stats()
    assert (stats.lookups, stats.misses, stats.hits) == (10, 1, 9)  # no second lookup per call
