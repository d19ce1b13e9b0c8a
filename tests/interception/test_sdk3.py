"""supermemory 3.x: reads cached, writes invalidate, errors and raw calls pass, patches reversible.

Every test drives the real Stainless SDK against the emulator over HTTP and asserts on the
requests the emulator received. Tests that apply to both run with the sync (``Supermemory``) and
the async (``AsyncSupermemory``) client.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from ..conftest import SDK_MAJOR, answer_of, wait_until

if SDK_MAJOR != "3":
    pytest.skip("needs supermemory 3.x", allow_module_level=True)

import supermemory
import supermemory._base_client as base_client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from supermemory._response import APIResponse, AsyncAPIResponse
from supermemory.types import (
    DocumentListResponse,
    ProfileResponse,
    SearchDocumentsResponse,
    SearchExecuteResponse,
    SearchMemoriesResponse,
)

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer, MemoryEntry

from .conftest import done, instrumentation, make_client

KEY = "sk-a"
OTHER_KEY = "sk-b"
TAG = "user-1"
OTHER_TAG = "user-2"
QUERY = "what does the user drink?"

ORIGINAL_SYNC_REQUEST = vars(base_client.SyncAPIClient)["request"]
ORIGINAL_ASYNC_REQUEST = vars(base_client.AsyncAPIClient)["request"]


# -- fixtures and helpers -------------------------------------------------------------------------
Seeded = dict[str, list[MemoryEntry]]  # "key/tag" -> the entries seeded for that tenant and tag
Write = Callable[[], Any]  # a write by the test's client (sync result or awaitable)


def _seed(server: EmulatorServer) -> Seeded:
    seeded: Seeded = {}
    for key in (KEY, OTHER_KEY):
        for tag in (TAG, OTHER_TAG):
            seeded[f"{key}/{tag}"] = server.seed(
                key,
                [
                    {"content": "User likes green tea", "metadata": {"kind": "drink"}},
                    {"content": "User has a peanut allergy", "static": True},
                    {"content": "User drinks coffee at work", "metadata": {"kind": "drink"}},
                ],
                container_tag=tag,
            )
    return seeded


@pytest.fixture
def seeded(emulator: EmulatorServer) -> Seeded:
    return _seed(emulator)


@pytest.fixture
def client(emulator: EmulatorServer, seeded: Any, mode: str) -> Any:
    """A client of the installed SDK on the seeded emulator: sync, then async (``mode``)."""
    return make_client(mode, emulator.base_url)


@pytest.fixture
def second_emulator(second_emulator: EmulatorServer) -> EmulatorServer:
    """tests/conftest.py's clean second emulator, seeded."""
    _seed(second_emulator)
    return second_emulator


pytestmark = pytest.mark.usefixtures("fast_retries")


async def outcome(call: Callable[[], Any]) -> Any:
    """What a call returns, or the exception it raises."""
    try:
        return await done(call())
    except Exception as error:
        return error


READS: dict[str, tuple[str, Callable[[Any], Any], type]] = {
    "search.memories": (
        "/v4/search",
        lambda c: c.search.memories(q=QUERY, container_tag=TAG),
        SearchMemoriesResponse,
    ),
    "search.execute": (
        "/v3/search",
        lambda c: c.search.execute(q=QUERY, container_tag=TAG),
        SearchExecuteResponse,
    ),
    "search.documents": (
        "/v3/search",
        lambda c: c.search.documents(q=QUERY, container_tag=TAG),
        SearchDocumentsResponse,
    ),
    "profile": ("/v4/profile", lambda c: c.profile(container_tag=TAG, q=QUERY), ProfileResponse),
    "documents.list": (
        "/v3/documents/list",
        lambda c: c.documents.list(container_tags=[TAG]),
        DocumentListResponse,
    ),
}


def search(client: Any, tag: str = TAG, **options: Any) -> Any:
    return client.search.memories(q=QUERY, container_tag=tag, **options)


def searches(server: EmulatorServer) -> int:
    return server.count("POST", "/v4/search")


def records_of(result: Any) -> list[Any]:
    for found in (
        getattr(result, "results", None),
        getattr(result, "memories", None),
        getattr(getattr(result, "search_results", None), "results", None),
    ):
        if isinstance(found, list):
            return found
    raise AssertionError(f"no records in {type(result).__name__}")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- cached reads ---------------------------------------------------------------------------------
@pytest.mark.parametrize("read", list(READS))
async def test_repeated_read_reaches_server_once(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], read: str
) -> None:
    path, call, _ = READS[read]
    for _ in range(10):
        await done(call(client))
    assert emulator.count("POST", path) == 1
    assert instrumented.stats().hits == 9


DIFFERENT: dict[str, Callable[[Any], Any]] = {
    "container_tag": lambda c: search(c, tag=OTHER_TAG),
    "limit": lambda c: search(c, limit=1),
    "threshold": lambda c: search(c, threshold=0.9),
    "filters": lambda c: search(c, filters={"AND": [{"key": "kind", "value": "drink"}]}),
    "extra_body": lambda c: search(c, extra_body={"rerank": True}),
    "extra_query": lambda c: search(c, extra_query={"debug": "1"}),
}


@pytest.mark.parametrize("variant", list(DIFFERENT))
async def test_a_different_request_is_a_different_entry(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], variant: str
) -> None:
    await done(search(client))
    await done(DIFFERENT[variant](client))
    await done(DIFFERENT[variant](client))
    assert searches(emulator) == 2


async def test_repeated_requests_are_told_apart_by_the_types_and_size_of_their_body(
    emulator: EmulatorServer, seeded: Any, instrumented: WorkingMemory[Any], mode: str
) -> None:
    # A repeat of a plain request skips route matching by an exact key of its method, URL and
    # body: 1, 1.0 and True are one Python value but three bodies on the wire.
    client = make_client(mode, emulator.base_url)
    for _ in range(2):
        await done(search(client, threshold=1))
        await done(search(client, threshold=1.0))
        await done(search(client, threshold=True))
    assert searches(emulator) == 3
    long_query = "what does the user prefer " + "x" * 3_000  # too large to memoise: still cached
    for _ in range(2):
        await done(client.search.memories(q=long_query, container_tag=TAG))
    assert searches(emulator) == 4
    tags = ["user-1", "user-2"]  # a list in the body: the slower exact key, same answers
    for _ in range(2):
        await done(client.search.execute(q=QUERY, container_tags=tags))
    assert emulator.count("POST", "/v3/search") == 1
    await done(client.add(content="User now prefers tea", container_tag=TAG))  # a write, then
    await done(search(client, threshold=1))  # the memoised read misses: it was invalidated
    assert searches(emulator) == 5


async def test_timeout_and_retries_options_share_the_entry(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any]
) -> None:
    await done(search(client))
    await done(search(client, timeout=12.0))
    await done(search(client.with_options(max_retries=5)))
    assert searches(emulator) == 1


async def test_a_client_changed_in_place_is_another_tenant_and_keeps_its_parameters(
    emulator: EmulatorServer,
    second_emulator: EmulatorServer,
    seeded: Any,
    instrumented: WorkingMemory[Any],
    mode: str,
) -> None:
    # The key of a repeated request is memoised per client state: every change must show.
    client = make_client(mode, emulator.base_url)
    await done(search(client))
    await done(search(client))
    client.base_url = second_emulator.base_url
    await done(search(client))
    client.api_key = OTHER_KEY
    await done(search(client))
    await done(search(client, limit=1))
    await done(search(client, limit=True))  # 1 and True differ on the wire
    assert searches(emulator) == 1
    assert searches(second_emulator) == 4
    derived = client.with_options(default_headers={"x-sm-project": "p2"})
    await done(search(derived))
    assert searches(second_emulator) == 5
    await done(search(client))
    assert searches(second_emulator) == 5


async def test_execute_and_documents_are_separate_entries_of_their_own_type(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any]
) -> None:
    for _ in range(2):
        executed = await done(client.search.execute(q=QUERY, container_tag=TAG))
        documents = await done(client.search.documents(q=QUERY, container_tag=TAG))
        assert type(executed) is SearchExecuteResponse
        assert type(documents) is SearchDocumentsResponse
    assert emulator.count("POST", "/v3/search") == 2


async def test_a_strictly_validating_client_is_cached_and_stays_strict(
    emulator: EmulatorServer, seeded: Any, instrumented: WorkingMemory[Any], mode: str
) -> None:
    client = make_client(mode, emulator.base_url, _strict_response_validation=True)
    wrapped = wm_middleware.wrap(client)
    assert wrapped._strict_response_validation is True
    for each in (client, client, wrapped, wrapped):
        result = await done(search(each))
        assert type(result) is SearchMemoriesResponse
        assert type(records_of(result)[0]) is type(records_of(result)[-1])
    assert searches(emulator) == 2  # one per working memory


# -- values: same type and shape, isolated per caller ---------------------------------------------
@pytest.mark.parametrize("read", list(READS))
async def test_cached_result_has_the_type_and_shape_of_an_uncached_one(
    emulator: EmulatorServer, seeded: Any, mode: str, read: str
) -> None:
    _, call, cls = READS[read]
    client = make_client(mode, emulator.base_url)
    uncached = await done(call(client))
    with instrumentation():
        missed = await done(call(client))
        hit = await done(call(client))
    for result in (missed, hit):
        assert type(result) is cls
        assert type(records_of(result)[0]) is type(records_of(uncached)[0])
        assert answer_of(result) == answer_of(uncached)
        assert result.model_dump_json(by_alias=True).count('"updatedAt"') == (
            uncached.model_dump_json(by_alias=True).count('"updatedAt"')
        )
    assert hit.model_dump() == missed.model_dump()
    assert hit == missed


@pytest.mark.parametrize("read", list(READS))
async def test_mutating_a_result_never_changes_the_next_hit(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], read: str
) -> None:
    _, call, _ = READS[read]
    first = await done(call(client))
    expected = first.model_dump()
    for result in (first, await done(call(client))):  # the miss's result and a hit's
        records = records_of(result)
        records[0].id = "mutated"
        if isinstance(records[0].metadata, dict):
            records[0].metadata["kind"] = "mutated"
            records[0].metadata["new"] = [1]
        else:
            records[0].metadata = {"new": [1]}
        records.append(records[0])
        records[1].__dict__.clear()
        result.injected = "attribute"
        if read == "profile":
            result.profile.static.append("mutated")
    again = await done(call(client))
    assert again.model_dump() == expected
    assert not hasattr(again, "injected")
    assert emulator.count("POST", READS[read][0]) == 1


# -- writes invalidate ----------------------------------------------------------------------------
def _document_id(seeded: Seeded) -> str:
    document_id = seeded[f"{KEY}/{TAG}"][0].document_id
    assert document_id is not None
    return document_id


WRITES: dict[str, Callable[[Any, Seeded], Any]] = {
    "add": lambda c, s: c.add(content="User now prefers black tea", container_tag=TAG),
    "add-plural-tags": lambda c, s: c.add(content="User likes mint", container_tags=[TAG]),
    "documents.add": lambda c, s: c.documents.add(content="User likes oolong", container_tag=TAG),
    "documents.batch_add": lambda c, s: c.documents.batch_add(
        documents=[{"content": "User likes chai", "containerTag": TAG}]
    ),
    "documents.update": lambda c, s: c.documents.update(_document_id(s), content="User likes mate"),
    "documents.delete": lambda c, s: c.documents.delete(_document_id(s)),
    "documents.delete_bulk": lambda c, s: c.documents.delete_bulk(container_tags=[TAG]),
    "memories.forget": lambda c, s: c.memories.forget(
        container_tag=TAG, id=s[f"{KEY}/{TAG}"][0].id
    ),
    "memories.update_memory": lambda c, s: c.memories.update_memory(
        container_tag=TAG, id=s[f"{KEY}/{TAG}"][0].id, new_content="User likes white tea"
    ),
    "settings.update": lambda c, s: c.settings.update(chunk_size=512),
    "raw add": lambda c, s: c.with_raw_response.add(
        content="User likes rooibos", container_tag=TAG
    ),
}


@pytest.fixture
def write(request: pytest.FixtureRequest, client: Any, seeded: Seeded) -> Callable[[], Any]:
    """The write of :data:`WRITES` the test is parametrised with (indirectly), by ``client``."""
    return lambda: WRITES[request.param](client, seeded)


@pytest.mark.parametrize("write", list(WRITES), indirect=True)
async def test_a_write_sends_the_next_search_to_the_network(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], write: Write
) -> None:
    await done(search(client))
    await done(search(client))
    await done(write())
    await done(search(client))
    assert searches(emulator) == 2


TAGGED_WRITES = ("add", "add-plural-tags", "documents.add", "memories.forget")


@pytest.mark.parametrize("write", TAGGED_WRITES, indirect=True)
async def test_a_write_naming_tag_a_keeps_tag_b_entries(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], write: Write
) -> None:
    await done(search(client, tag=TAG))
    await done(search(client, tag=OTHER_TAG))
    await done(write())
    await done(search(client, tag=TAG))
    await done(search(client, tag=OTHER_TAG))
    assert searches(emulator) == 3  # only tag A went upstream again


@pytest.mark.parametrize(
    "write", ["documents.delete", "documents.update", "settings.update"], indirect=True
)
async def test_a_write_naming_no_tag_drops_the_whole_tenant(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], mode: str, write: Write
) -> None:
    other_tenant = make_client(mode, emulator.base_url, api_key=OTHER_KEY)
    for each in (client, other_tenant):
        await done(search(each, tag=TAG))
        await done(search(each, tag=OTHER_TAG))
    await done(write())
    for each in (client, other_tenant):
        await done(search(each, tag=TAG))
        await done(search(each, tag=OTHER_TAG))
    assert searches(emulator) == 6  # both tags of this tenant again; the other tenant kept its


async def test_a_batch_invalidates_every_tag_its_items_name(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any]
) -> None:
    await done(search(client, tag=TAG))
    await done(search(client, tag=OTHER_TAG))
    await done(search(client, tag="user-3"))
    await done(
        client.documents.batch_add(
            documents=[{"content": "a", "containerTag": TAG}, {"content": "b"}],
            container_tag=OTHER_TAG,
        )
    )
    for tag in (TAG, OTHER_TAG, "user-3"):
        await done(search(client, tag=tag))
    assert searches(emulator) == 5  # user-3 was kept


# -- errors ---------------------------------------------------------------------------------------
FAULTS: dict[str, tuple[int, int]] = {"500": (500, 2), "429": (429, 2), "404": (404, 0)}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_an_api_error_reaches_the_caller_uncached_after_the_sdk_retries(
    emulator: EmulatorServer, seeded: Any, mode: str, fault: str
) -> None:
    status, retries = FAULTS[fault]
    client = make_client(mode, emulator.base_url, max_retries=2)
    emulator.fail_next(None, status, path="/v4/search")
    without = await outcome(lambda: search(client))
    assert searches(emulator) == 1 + retries
    emulator.reset(data=False)
    with instrumentation() as memory:
        emulator.fail_next(None, status, path="/v4/search")
        first = await outcome(lambda: search(client))
        assert searches(emulator) == 1 + retries  # the SDK's retries still happen on a miss
        emulator.clear_faults()
        second = await outcome(lambda: search(client))
        third = await outcome(lambda: search(client))
    assert type(first) is type(without)
    assert isinstance(first, supermemory.APIStatusError)
    assert first.status_code == status
    assert type(second) is SearchMemoriesResponse
    assert type(third) is SearchMemoriesResponse
    assert searches(emulator) == 2 + retries  # the error was not cached; the success was
    assert memory.stats().misses == 2


async def test_a_timeout_reaches_the_caller_uncached(
    emulator: EmulatorServer, seeded: Any, mode: str
) -> None:
    client = make_client(mode, emulator.base_url, timeout=0.2, max_retries=1)
    emulator.hang_next(2, 5.0, path="/v4/search")
    without = await outcome(lambda: search(client))
    # Requests the client gave up on may reach the server only after it gave up: each phase
    # waits for its own two (the first and one retry) before the next begins.
    wait_until(lambda: searches(emulator) == 2)
    emulator.reset(data=False)
    with instrumentation():
        emulator.hang_next(2, 5.0, path="/v4/search")
        first = await outcome(lambda: search(client))
        wait_until(lambda: searches(emulator) == 2)  # one retry
        second = await outcome(lambda: search(client.with_options(timeout=30.0)))
    assert type(without) is supermemory.APITimeoutError
    assert type(first) is supermemory.APITimeoutError
    assert type(second) is SearchMemoriesResponse
    assert searches(emulator) == 3


async def test_a_connection_error_reaches_the_caller_uncached(mode: str) -> None:
    client = make_client(mode, f"http://127.0.0.1:{closed_port()}", max_retries=1)
    without = await outcome(lambda: search(client))
    with instrumentation() as memory:
        first = await outcome(lambda: search(client))
        second = await outcome(lambda: search(client))
    assert type(without) is supermemory.APIConnectionError
    assert type(first) is supermemory.APIConnectionError
    assert type(second) is supermemory.APIConnectionError
    assert memory.stats().misses == 2
    assert len(memory) == 0


# -- never cached ---------------------------------------------------------------------------------
async def test_raw_responses_bypass_the_cache(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], mode: str
) -> None:
    await done(search(client))
    for _ in range(3):
        response = await done(client.search.with_raw_response.memories(q=QUERY, container_tag=TAG))
        assert isinstance(response, AsyncAPIResponse if mode == "async" else APIResponse)
        assert type(await done(response.parse())) is SearchMemoriesResponse
    raw_profile = await done(client.with_raw_response.profile(container_tag=TAG))
    assert type(await done(raw_profile.parse())) is ProfileResponse
    assert searches(emulator) == 4
    assert emulator.count("POST", "/v4/profile") == 1
    assert len(instrumented) == 1  # only the plain search was stored


async def test_streaming_responses_bypass_the_cache(
    emulator: EmulatorServer, client: Any, instrumented: WorkingMemory[Any], mode: str
) -> None:
    await done(search(client))
    for _ in range(3):
        streamed = client.search.with_streaming_response.memories(q=QUERY, container_tag=TAG)
        if mode == "async":
            async with streamed as response:
                assert isinstance(response, AsyncAPIResponse)
                assert type(await response.parse()) is SearchMemoriesResponse
        else:
            with streamed as response:
                assert isinstance(response, APIResponse)
                assert type(response.parse()) is SearchMemoriesResponse
    assert searches(emulator) == 4


async def test_status_polls_are_never_cached(
    emulator: EmulatorServer,
    seeded: Seeded,
    client: Any,
    instrumented: WorkingMemory[Any],
) -> None:
    document_id = _document_id(seeded)
    for _ in range(3):
        await done(client.documents.get(document_id))
        await done(client.documents.list_processing(container_tags=[TAG]))
    assert emulator.count("GET", f"/v3/documents/{document_id}") == 3
    assert emulator.count("GET", "/v3/documents/processing") == 3
    assert instrumented.stats().lookups == 0


# -- instrument() / uninstrument() ----------------------------------------------------------------
async def test_clients_created_before_and_after_instrument_are_cached(
    emulator: EmulatorServer, seeded: Any, mode: str
) -> None:
    before = make_client(mode, emulator.base_url)
    before_search = before.search  # resources built (and ``post`` copied) before the patch
    with instrumentation():
        after = make_client(mode, emulator.base_url, api_key=OTHER_KEY)
        for _ in range(5):
            await done(before_search.memories(q=QUERY, container_tag=TAG))
            await done(search(after))
    assert searches(emulator) == 2


# -- wrap() ---------------------------------------------------------------------------------------
async def test_wrap_returns_a_cached_copy_and_leaves_the_client_untouched(
    emulator: EmulatorServer, client: Any
) -> None:
    methods = {name: getattr(type(client), name) for name in ("request", "post", "copy")}
    cached = wm_middleware.wrap(client)
    assert cached is not client
    assert cached._client is client._client  # one connection pool
    for _ in range(5):
        assert type(await done(search(cached))) is SearchMemoriesResponse
    assert searches(emulator) == 1
    for _ in range(3):
        await done(search(client))
    assert searches(emulator) == 4  # the original always reaches the server
    assert not {"request", "copy", "with_options", "working_memory"} & set(vars(client))
    assert {name: getattr(type(client), name) for name in methods} == methods
    assert cached.working_memory.stats().lookups == 5


async def test_options_of_a_wrapped_client_stay_cached(
    emulator: EmulatorServer, seeded: Any, mode: str
) -> None:
    cached = wm_middleware.wrap(make_client(mode, emulator.base_url))
    await done(search(cached))
    await done(search(cached.with_options(timeout=30.0)))
    await done(search(cached.copy(max_retries=1)))
    assert searches(emulator) == 1


async def test_wrap_under_instrument_caches_and_traces_each_call_once(
    emulator: EmulatorServer, seeded: Any, mode: str
) -> None:
    outer_spans, inner_spans = InMemorySpanExporter(), InMemorySpanExporter()
    outer, inner = TracerProvider(), TracerProvider()
    outer.add_span_processor(SimpleSpanProcessor(outer_spans))
    inner.add_span_processor(SimpleSpanProcessor(inner_spans))
    with instrumentation(tracer_provider=outer) as instrumented:
        cached = wm_middleware.wrap(make_client(mode, emulator.base_url), tracer_provider=inner)
        for _ in range(10):
            await done(search(cached))
        await done(cached.add(content="User likes mate", container_tag=TAG))
        await done(search(cached))
    assert searches(emulator) == 2
    assert cached.working_memory.stats().lookups == 11
    assert instrumented.stats().lookups == 0
    spans = inner_spans.get_finished_spans()
    assert len(spans) == 12  # 11 reads + 1 write
    assert spans[0].attributes is not None
    assert spans[0].attributes["gen_ai.memory.record.count"] >= 1
    assert outer_spans.get_finished_spans() == ()
