"""supermemory 5.x: reads cached, writes invalidate, errors and raw calls pass, patches reversible.

Every test talks to the real SDK and the emulator over HTTP, and asserts on the requests the
emulator received. Each runs with the sync and the async client.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from ..conftest import SDK_MAJOR, answer_of, wait_until

if SDK_MAJOR != "5":
    pytest.skip("needs supermemory 5.x", allow_module_level=True)

import supermemory
import supermemory.client
from supermemory.core.http_response import AsyncHttpResponse, HttpResponse
from supermemory.types import ListResponse, ProfileResponse, SearchResponse

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

from .conftest import done, instrumentation, make_client

KEY = "sk-a"
NS = "user-1"
OTHER_NS = "user-2"
SEARCH = f"/ns/{NS}/search"


# -- fixtures (``emulator`` and ``instrumented`` come from conftest.py) --------------------------
def _seed(server: EmulatorServer) -> None:
    for key in (KEY, "sk-b"):
        for ns in (NS, OTHER_NS):
            server.seed(
                key,
                [
                    "User likes green tea",
                    {"content": "User has a peanut allergy", "static": True},
                    {"content": "User works on compilers", "metadata": {"team": "lang"}},
                ],
                container_tag=ns,
            )


@pytest.fixture
def emulator(emulator: EmulatorServer) -> EmulatorServer:
    """The shared emulator (tests/interception/conftest.py), seeded with two tenants."""
    _seed(emulator)
    return emulator


pytestmark = pytest.mark.usefixtures("fast_retries")


def posts(server: EmulatorServer) -> int:
    return server.count("POST", "/ns/*")


READS: dict[str, Callable[[Any], Any]] = {
    "search": lambda c: c.search(NS, query="what does the user drink?"),
    "search-namespace-keyword": lambda c: c.search(namespace=NS, query="what does the user drink?"),
    "profile": lambda c: c.profile(NS),
    "list": lambda c: c.list(NS, "memories", limit=10),
}


# -- reads ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("read", list(READS))
async def test_repeated_read_reaches_server_once(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str, read: str
) -> None:
    client = make_client(mode, emulator.base_url)
    for _ in range(10):
        await done(READS[read](client))
    assert posts(emulator) == 1


VARIANTS: dict[str, Callable[[Any], Any]] = {
    "namespace": lambda c: c.search(OTHER_NS, query="what does the user drink?"),
    "query": lambda c: c.search(NS, query="what is the user allergic to?"),
    "limit": lambda c: c.search(NS, query="what does the user drink?", limit=1),
    "threshold": lambda c: c.search(NS, query="what does the user drink?", threshold=0.5),
    "search_mode": lambda c: c.search(NS, query="what does the user drink?", search_mode="chunks"),
    "filter": lambda c: c.search(
        NS, query="what does the user drink?", filter={"key": "team", "value": "lang"}
    ),
    "extra_body": lambda c: c.search(
        NS, query="what does the user drink?", extra_body={"rewriteQuery": True}
    ),
    "extra_query": lambda c: c.search(NS, query="what does the user drink?", extra_query={"x": 1}),
    "profile buckets": lambda c: c.profile(NS, buckets=["health"]),
    "list type": lambda c: c.list(NS, "documents", limit=10),
    "list page": lambda c: c.list(NS, "memories", limit=10, page=2),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_a_different_request_is_a_different_entry(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str, variant: str
) -> None:
    client = make_client(mode, emulator.base_url)
    base = READS["list"] if variant.startswith("list") else READS["search"]
    if variant.startswith("profile"):
        base = READS["profile"]
    await done(base(client))
    await done(VARIANTS[variant](client))
    await done(VARIANTS[variant](client))
    assert posts(emulator) == 2


async def test_a_client_whose_key_url_or_headers_change_never_reuses_a_stale_read(
    emulator: EmulatorServer,
    second_emulator: EmulatorServer,
    instrumented: WorkingMemory[Any],
    mode: str,
) -> None:
    # What a client contributes to its reads is kept per client state: every change must show.
    key = [KEY]
    client = make_client(mode, emulator.base_url, api_key=lambda: key[0])  # asked per call
    search = READS["search"]
    assert [r.memory for r in (await done(search(client))).results]  # KEY's memories
    await done(search(client))
    assert posts(emulator) == 1
    key[0] = "sk-b"  # a rotating key: another tenant
    await done(search(client))
    assert posts(emulator) == 2
    await done(search(client))
    assert posts(emulator) == 2
    client._client_wrapper._base_url = second_emulator.base_url  # moved in place
    await done(search(client))
    assert (posts(emulator), posts(second_emulator)) == (2, 1)
    client._client_wrapper._headers["x-sm-project"] = "p2"  # a custom header changes answers
    await done(search(client))
    await done(search(client))
    assert posts(second_emulator) == 2
    assert instrumented.stats().hits == 3


async def test_values_equal_in_python_but_not_on_the_wire_are_two_entries(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str
) -> None:
    client = make_client(mode, emulator.base_url)
    for limit in (1, 1, True, True, 1.0):  # 1 == True == 1.0, but the JSON says 1, true, 1.0
        await done(client.search(NS, query="what does the user drink?", limit=limit))
    assert posts(emulator) == 3
    assert instrumented.stats().hits == 2
    for namespace in (1, True):  # positional too: the paths /ns/1 and /ns/true
        await done(client.search(namespace, query="what does the user drink?"))  # type: ignore[arg-type]
    assert posts(emulator) == 5


MUTATIONS: dict[str, Callable[[Any], None]] = {
    "search": lambda r: (r.results[0].metadata.update(x=1), r.results.clear()),
    "search-namespace-keyword": lambda r: r.results.append(r.results[0]),
    "profile": lambda r: (r.profile.dynamic.clear(), r.profile.buckets.update(x=[])),
    "list": lambda r: (r.memories[0].metadata.update(x=1), r.memories.reverse()),
}
TYPES = {
    "search": SearchResponse,
    "search-namespace-keyword": SearchResponse,
    "profile": ProfileResponse,
    "list": ListResponse,
}


@pytest.mark.parametrize("read", list(READS))
async def test_result_equals_uncached_and_mutating_it_never_changes_the_next_hit(
    emulator: EmulatorServer, mode: str, read: str
) -> None:
    client = make_client(mode, emulator.base_url)
    expected = await done(READS[read](client))
    with instrumentation():
        first = await done(READS[read](client))
        assert type(first) is type(expected) is TYPES[read]
        assert answer_of(first) == answer_of(expected)  # but for what each request measured
        stored = first.model_dump()
        MUTATIONS[read](first)
        second = await done(READS[read](client))
        assert second.model_dump() == stored
        MUTATIONS[read](second)
        assert (await done(READS[read](client))).model_dump() == stored
    assert posts(emulator) == 2  # the uncached call and the one miss


# -- writes ---------------------------------------------------------------------------------------
async def _forget_first_memory(client: Any) -> Any:
    listed = await done(client.list(NS, "memories", limit=1))
    return await done(client.memories.forget(NS, ids=[listed.memories[0].id]))


async def _document_id(client: Any) -> str:
    ref = await done(client.add(NS, content="User visited Lisbon in May"))
    return str(ref.id)


WRITES: dict[str, Callable[[Any, str], Any]] = {
    "add": lambda c, _: c.add(NS, content="User now prefers coffee"),
    "documents.update": lambda c, doc: c.documents.update(NS, doc, content="User visited Porto"),
    "documents.delete": lambda c, doc: c.documents.delete(NS, ids=[doc]),
    "memories.forget": lambda c, _: _forget_first_memory(c),
    "memories.forget_matching": lambda c, _: c.memories.forget_matching(
        NS, query="green tea", dry_run=False
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
async def test_write_sends_the_next_search_to_the_server(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str, write: str
) -> None:
    client = make_client(mode, emulator.base_url)
    doc = await _document_id(client)
    await done(READS["search"](client))
    await done(READS["search"](client))
    assert emulator.count("POST", SEARCH) == 1
    await done(WRITES[write](client, doc))
    await done(READS["search"](client))
    assert emulator.count("POST", SEARCH) == 2


async def test_write_to_one_namespace_keeps_the_other_namespaces_entries(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str
) -> None:
    client = make_client(mode, emulator.base_url)
    other = f"/ns/{OTHER_NS}/search"
    await done(READS["search"](client))
    await done(VARIANTS["namespace"](client))
    await done(client.add(NS, content="User now prefers coffee"))
    await done(VARIANTS["namespace"](client))
    await done(READS["search"](client))
    assert emulator.count("POST", other) == 1
    assert emulator.count("POST", SEARCH) == 2


async def test_organization_update_invalidates_every_namespace_of_the_tenant(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str
) -> None:
    client = make_client(mode, emulator.base_url)
    await done(READS["search"](client))
    await done(VARIANTS["namespace"](client))
    await done(client.organization.update(organizational_context="A tea shop"))
    await done(READS["search"](client))
    await done(VARIANTS["namespace"](client))
    assert posts(emulator) == 4 + emulator.count("POST", "/organization")


async def test_forget_matching_dry_run_is_never_cached_and_invalidates_nothing(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str
) -> None:
    client = make_client(mode, emulator.base_url)
    await done(READS["search"](client))
    for _ in range(3):
        preview = await done(client.memories.forget_matching(NS, query="green tea", dry_run=True))
    await done(READS["search"](client))
    assert emulator.count("DELETE", f"/ns/{NS}/memories/semantic") == 3
    assert emulator.count("POST", SEARCH) == 1
    assert preview.count >= 1


# -- errors ---------------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ATTEMPTS = 3  # of a call by a client with the SDK's default max_retries (2)
FAULTS: dict[str, Callable[[EmulatorServer], str]] = {
    # Each arms the fault for the uncached call and again for the instrumented one.
    "500 after the SDK's retries": lambda s: (s.fail_next(3, 500, path=SEARCH), s.base_url)[1],
    "429 after the SDK's retries": lambda s: (s.fail_next(3, 429, path=SEARCH), s.base_url)[1],
    "404": lambda s: (s.fail_next(1, 404, path=SEARCH), s.base_url)[1],
    "timeout": lambda s: (s.hang_next(ATTEMPTS, 5.0, path=SEARCH), s.base_url)[1],
    "connection refused": lambda s: f"http://127.0.0.1:{_closed_port()}",
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_upstream_error_raises_as_without_middleware_and_is_not_cached(
    emulator: EmulatorServer, mode: str, fault: str
) -> None:
    async def attempt() -> tuple[type[BaseException], int]:
        emulator.reset_counts()
        client = make_client(mode, FAULTS[fault](emulator), timeout=0.3)
        with pytest.raises(supermemory.APIError) as raised:
            await done(READS["search"](client))
        if fault == "timeout":  # requests given up on may reach the server after the caller
            wait_until(lambda: emulator.count("POST", SEARCH) >= ATTEMPTS)
        return raised.type, emulator.count("POST", SEARCH)

    expected = await attempt()
    with instrumentation():
        assert await attempt() == expected
        if fault != "connection refused":
            client = make_client(mode, emulator.base_url, timeout=30.0)
            emulator.reset_counts()
            result = await done(READS["search"](client))
            assert isinstance(result, SearchResponse)
            assert emulator.count("POST", SEARCH) == 1  # the error was not cached


async def test_status_error_keeps_its_response(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str
) -> None:
    emulator.fail_next(1, 404, path=SEARCH)
    client = make_client(mode, emulator.base_url)
    with pytest.raises(supermemory.NotFoundError) as raised:
        await done(READS["search"](client))
    assert raised.value.status_code == 404
    assert raised.value.response is not None


# -- raw responses --------------------------------------------------------------------------------
async def test_raw_response_search_bypasses_the_cache(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], mode: str
) -> None:
    client = make_client(mode, emulator.base_url)
    for _ in range(3):
        raw = await done(client.with_raw_response.search(NS, query="what does the user drink?"))
        assert isinstance(raw, AsyncHttpResponse if mode == "async" else HttpResponse)
        assert isinstance(raw.data, SearchResponse)
    assert emulator.count("POST", SEARCH) == 3
    await done(READS["search"](client))  # the raw calls did not fill the cache
    assert emulator.count("POST", SEARCH) == 4
    assert len(instrumented) == 1


# -- instrument, uninstrument, wrap ---------------------------------------------------------------
async def test_wrap_caches_while_the_original_stays_uncached(
    emulator: EmulatorServer, mode: str
) -> None:
    client = make_client(mode, emulator.base_url)
    original_attributes = dict(vars(client))
    cached = wm_middleware.wrap(client)
    assert isinstance(cached.working_memory, WorkingMemory)
    assert isinstance(cached, type(client))
    for _ in range(3):
        assert isinstance(await done(READS["search"](cached)), SearchResponse)
    assert emulator.count("POST", SEARCH) == 1
    for _ in range(3):
        await done(READS["search"](client))
    assert emulator.count("POST", SEARCH) == 4
    assert vars(client) == original_attributes
    assert "request" not in vars(client._client_wrapper.httpx_client)
    # Writes through the copy invalidate its entries; raw reads through it bypass.
    await done(cached.add(NS, content="User now prefers coffee"))
    await done(READS["search"](cached))
    await done(cached.with_raw_response.search(NS, query="what does the user drink?"))
    assert emulator.count("POST", SEARCH) == 6
    assert len(cached.working_memory) == 1


async def test_wrap_under_instrument_caches_once(emulator: EmulatorServer, mode: str) -> None:
    client = make_client(mode, emulator.base_url)
    with instrumentation() as global_memory:
        cached = wm_middleware.wrap(client)
        for _ in range(3):
            await done(READS["search"](cached))
        assert emulator.count("POST", SEARCH) == 1
        assert len(cached.working_memory) == 1
        assert len(global_memory) == 0
        # A write through the copy also drops what the instrumented original had cached.
        await done(READS["search"](client))
        await done(cached.add(NS, content="User now prefers coffee"))
        await done(READS["search"](client))
        await done(READS["search"](cached))
        assert emulator.count("POST", SEARCH) == 4


def test_wrap_declines_what_is_not_a_5x_client() -> None:
    with pytest.raises(TypeError):
        wm_middleware.wrap(object())
