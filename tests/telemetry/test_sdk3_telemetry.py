"""Telemetry through ``wm_middleware.instrument()`` and the real supermemory 3.x SDK.

The server is the emulator (``wm_middleware.emulator.EmulatorServer``); request counts are what
it saw. HTTP spans come from the real ``opentelemetry-instrumentation-httpx``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import wm_middleware
from wm_middleware._telemetry import CAPTURE_CONTENT_ENV

from ..conftest import clean
from .conftest import Otel, until

if not importlib.metadata.version("supermemory").startswith("3."):
    pytest.skip("supermemory 3.x tests", allow_module_level=True)

import supermemory

from wm_middleware.emulator import EmulatorServer

API_KEY = "sk-telemetry-KEY-MARKER-51c2"
TAG = "user-1"
SEARCH = "/v4/search"


@pytest.fixture(scope="module")
def server(emulator_server: EmulatorServer) -> EmulatorServer:
    """tests/conftest.py's session emulator, clean."""
    return clean(emulator_server)


@pytest.fixture(autouse=True)
def _fresh(server: EmulatorServer) -> None:
    server.reset()
    server.seed(
        API_KEY, ["User has a severe peanut allergy", "User likes green tea"], container_tag=TAG
    )
    server.seed(API_KEY, ["User works nights"], container_tag="user-2")


def instrument(otel: Otel, **options: Any) -> Any:
    return wm_middleware.instrument(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, **options
    )


_OPEN: list[Any] = []


def client(server: EmulatorServer, mode: str, **options: Any) -> Any:
    cls = supermemory.Supermemory if mode == "sync" else supermemory.AsyncSupermemory
    made = cls(api_key=API_KEY, base_url=server.base_url, max_retries=0, **options)
    _OPEN.append(made)
    return made


def instrumented_client(otel: Otel, server: EmulatorServer, mode: str, **options: Any) -> Any:
    """``instrument()`` with ``options`` on ``otel``'s providers, then a client of ``mode``."""
    instrument(otel, **options)
    return client(server, mode)


@pytest.fixture(autouse=True)
async def _close_clients() -> Any:
    """Close async clients on their own loop (else their pools close on a dead one)."""
    yield
    while _OPEN:
        await call(_OPEN.pop().close())


async def call(result: Any) -> Any:
    return await result if asyncio.iscoroutine(result) else result


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def children_of(otel: Otel, span: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in otel.spans() if s.parent and s.parent.span_id == span.context.span_id]


@pytest.fixture
def httpx_spans(otel: Otel) -> Iterator[None]:
    instrumentation = pytest.importorskip("opentelemetry.instrumentation.httpx")
    instrumentor = instrumentation.HTTPXClientInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    yield
    instrumentor.uninstrument()


# -- spans of reads ----------------------------------------------------------------------------
async def test_read_spans_name_operation_server_records_and_result(
    otel: Otel, server: EmulatorServer, mode: str
) -> None:
    c = instrumented_client(otel, server, mode)
    first = await call(c.search.memories(q="peanut", container_tag=TAG))
    again = await call(c.search.memories(q="peanut", container_tag=TAG))
    await call(c.profile(container_tag=TAG, q="tea"))
    await call(c.search.execute(q="tea", container_tags=[TAG]))

    assert again == first
    assert server.count("POST", SEARCH) == 1
    spans = otel.reads()
    assert [
        (attributes(s)["supermemory.operation"], attributes(s)["wm.cache.result"]) for s in spans
    ] == [
        ("search.memories", "miss"),
        ("search.memories", "hit"),
        ("profile", "miss"),
        ("search.execute", "miss"),
    ]
    for span in spans:
        attrs = attributes(span)
        assert span.name == "search_memory"
        assert attrs["gen_ai.operation.name"] == "search_memory"
        assert attrs["gen_ai.provider.name"] == "supermemory"
        assert attrs["server.address"] == "127.0.0.1"
        assert attrs["server.port"] == server.port
    assert attributes(spans[0])["gen_ai.memory.record.count"] == len(first.results)
    assert attributes(spans[1])["gen_ai.memory.record.count"] == len(first.results)


async def test_http_call_of_a_miss_nests_under_its_span_and_a_hit_has_none(
    otel: Otel, server: EmulatorServer, httpx_spans: None, mode: str
) -> None:
    c = instrumented_client(otel, server, mode)
    tracer = otel.tracer_provider.get_tracer("agent")
    with tracer.start_as_current_span("turn") as turn:
        await call(c.search.memories(q="peanut", container_tag=TAG))
        await call(c.search.memories(q="peanut", container_tag=TAG))

    miss, hit = otel.reads()
    http = [s for s in otel.spans() if s.name not in ("search_memory", "turn")]
    assert len(http) == server.count("POST", SEARCH) == 1
    assert http[0].kind is SpanKind.CLIENT
    assert http[0].parent is not None
    assert http[0].parent.span_id == miss.context.span_id
    assert children_of(otel, miss) == http
    assert children_of(otel, hit) == []
    assert miss.parent is not None
    assert hit.parent is not None
    assert miss.parent.span_id == hit.parent.span_id == turn.get_span_context().span_id


async def test_coalesced_task_gets_its_own_span_linked_to_the_leaders_with_real_sdk(
    otel: Otel, server: EmulatorServer, httpx_spans: None
) -> None:
    instrument(otel)
    release = asyncio.Event()

    async def hold(request: httpx.Request) -> None:
        await release.wait()  # the leader's request waits until the follower has joined

    c = client(server, "async", http_client=httpx.AsyncClient(event_hooks={"request": [hold]}))
    memory = wm_middleware.WorkingMemoryInstrumentor().working_memory
    tracer = otel.tracer_provider.get_tracer("agent")

    async def caller(name: str) -> Any:
        with tracer.start_as_current_span(name):
            return await c.search.memories(q="peanut", container_tag=TAG)

    tasks = [asyncio.create_task(caller(f"task {i}")) for i in range(2)]
    await until(lambda: memory.stats().coalesced >= 1)
    release.set()
    first, second = await asyncio.gather(*tasks)

    assert first == second
    assert first is not second
    assert server.count("POST", SEARCH) == 1
    by_result = {attributes(s)["wm.cache.result"]: s for s in otel.reads()}
    assert set(by_result) == {"miss", "coalesced"}
    miss, coalesced = by_result["miss"], by_result["coalesced"]
    assert coalesced.context.trace_id != miss.context.trace_id  # own task, own trace
    assert [(lk.context.trace_id, lk.context.span_id) for lk in coalesced.links] == [
        (miss.context.trace_id, miss.context.span_id)
    ]
    assert len(children_of(otel, miss)) == 1  # the one HTTP call
    assert children_of(otel, coalesced) == []


def test_coalesced_thread_gets_its_own_span_linked_to_the_leaders_with_real_sdk(
    otel: Otel, server: EmulatorServer
) -> None:
    instrument(otel)
    release = threading.Event()

    def hold(request: httpx.Request) -> None:
        assert release.wait(30)

    c = client(server, "sync", http_client=httpx.Client(event_hooks={"request": [hold]}))
    memory = wm_middleware.WorkingMemoryInstrumentor().working_memory
    results: list[Any] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(c.search.memories(q="peanut", container_tag=TAG))
        )
        for _ in range(2)
    ]
    threads[0].start()
    while memory.stats().inflight < 1:
        threading.Event().wait(0.001)
    threads[1].start()
    while memory.stats().coalesced < 1:
        threading.Event().wait(0.001)
    release.set()
    for thread in threads:
        thread.join(30)

    assert len(results) == 2
    assert server.count("POST", SEARCH) == 1
    by_result = {attributes(s)["wm.cache.result"]: s for s in otel.reads()}
    assert set(by_result) == {"miss", "coalesced"}
    (link,) = by_result["coalesced"].links
    assert link.context.span_id == by_result["miss"].context.span_id


async def test_upstream_error_is_an_error_span_recorded_once_and_not_cached(
    otel: Otel, server: EmulatorServer, mode: str
) -> None:
    c = instrumented_client(otel, server, mode)
    server.fail_next(1, 500, path=SEARCH)
    with pytest.raises(supermemory.InternalServerError):
        await call(c.search.memories(q="peanut", container_tag=TAG))
    await call(c.search.memories(q="peanut", container_tag=TAG))
    assert server.count("POST", SEARCH) == 2  # the error was not cached

    failed, retried = otel.reads()
    kind = supermemory.InternalServerError
    assert failed.status.status_code is StatusCode.ERROR
    assert attributes(failed)["error.type"] == f"{kind.__module__}.{kind.__qualname__}"
    assert [e.name for e in failed.events] == ["exception"]
    assert attributes(retried)["wm.cache.result"] == "miss"
    assert retried.status.status_code is StatusCode.UNSET
    errors = [p for p in otel.points("wm.search.duration") if "error.type" in p.attributes]
    assert len(errors) == 1
    assert errors[0].count == 1


# -- writes, raw responses, options ------------------------------------------------------------
async def test_write_span_counts_the_entries_it_invalidated(
    otel: Otel, server: EmulatorServer, mode: str
) -> None:
    memory = instrument(otel)
    c = client(server, mode)
    await call(c.search.memories(q="peanut", container_tag=TAG))
    await call(c.profile(container_tag=TAG))
    await call(c.search.memories(q="nights", container_tag="user-2"))

    await call(c.add(content="User moved to Lisbon", container_tag=TAG))
    await call(c.search.memories(q="peanut", container_tag=TAG))  # a miss again

    (write,) = [s for s in otel.spans() if s.name != "search_memory"]
    assert write.name == "upsert_memory"  # add may create or merge
    assert attributes(write)["gen_ai.operation.name"] == "upsert_memory"
    assert attributes(write)["gen_ai.memory.record.count"] == 1
    assert attributes(write)["wm.cache.invalidated"] == 2
    assert attributes(write)["supermemory.operation"] == "add"
    assert server.count("POST", SEARCH) == 3
    assert memory.stats().invalidations == 2
    invalidations = otel.points("wm.cache.invalidations")
    assert [p.value for p in invalidations] == [2]


async def test_raw_responses_are_bypass_spans_and_always_go_upstream(
    otel: Otel, server: EmulatorServer, mode: str
) -> None:
    c = instrumented_client(otel, server, mode)
    for _ in range(2):
        raw = await call(c.search.with_raw_response.memories(q="peanut", container_tag=TAG))
        assert raw.status_code == 200
    assert server.count("POST", SEARCH) == 2
    assert [attributes(s)["wm.cache.result"] for s in otel.reads()] == ["bypass", "bypass"]
    assert otel.requests() == {("bypass", "search.memories"): 2}


async def test_cache_false_sends_every_call_upstream_recorded_as_bypass(
    otel: Otel, server: EmulatorServer, mode: str
) -> None:
    c = instrumented_client(otel, server, mode, cache=False)
    for _ in range(3):
        result = await call(c.search.memories(q="peanut", container_tag=TAG))
        assert result.results
    await call(c.profile(container_tag=TAG))
    assert server.count("POST", SEARCH) == 3
    assert [attributes(s)["wm.cache.result"] for s in otel.reads()] == ["bypass"] * 4
    assert otel.requests() == {("bypass", "search.memories"): 3, ("bypass", "profile"): 1}
    assert sum(p.value for p in otel.points("wm.cache.size")) == 0


async def test_trace_hits_false_makes_no_hit_span_and_still_counts_hits(
    otel: Otel, server: EmulatorServer, mode: str
) -> None:
    c = instrumented_client(otel, server, mode, trace_hits=False)
    for _ in range(5):
        await call(c.search.memories(q="peanut", container_tag=TAG))
    assert [attributes(s)["wm.cache.result"] for s in otel.reads()] == ["miss"]
    assert otel.requests() == {("miss", "search.memories"): 1, ("hit", "search.memories"): 4}


async def test_suppressed_calls_make_no_span(
    otel: Otel, server: EmulatorServer, httpx_spans: None, mode: str
) -> None:
    c = instrumented_client(otel, server, mode)
    with suppress_instrumentation():
        await call(c.search.memories(q="peanut", container_tag=TAG))
        await call(c.search.memories(q="peanut", container_tag=TAG))
        await call(c.add(content="User moved", container_tag=TAG))
    assert [s.name for s in otel.spans()] == []


# -- providers ---------------------------------------------------------------------------------
def test_instrument_uses_the_given_providers_and_sets_nothing_global(
    otel: Otel, server: EmulatorServer
) -> None:
    tracer_before = trace.get_tracer_provider()
    meter_before = metrics.get_meter_provider()
    instrument(otel)
    supermemory.Supermemory(api_key=API_KEY, base_url=server.base_url).search.memories(
        q="peanut", container_tag=TAG
    )
    assert len(otel.reads()) == 1
    assert otel.requests() == {("miss", "search.memories"): 1}
    assert trace.get_tracer_provider() is tracer_before
    assert metrics.get_meter_provider() is meter_before


def test_instrument_alone_sets_no_global_provider(server: EmulatorServer) -> None:
    tracer_before = trace.get_tracer_provider()
    meter_before = metrics.get_meter_provider()
    wm_middleware.instrument()
    c = supermemory.Supermemory(api_key=API_KEY, base_url=server.base_url)
    c.search.memories(q="peanut", container_tag=TAG)
    c.search.memories(q="peanut", container_tag=TAG)
    assert server.count("POST", SEARCH) == 1
    assert trace.get_tracer_provider() is tracer_before
    assert metrics.get_meter_provider() is meter_before
    assert isinstance(tracer_before, trace.ProxyTracerProvider)  # still no SDK in this process


# -- what never leaves the process -------------------------------------------------------------
QUERY_MARKER = "QUERY-MARKER-0b9e"


async def _every_kind_of_call(server: EmulatorServer, mode: str, query: str) -> None:
    c = client(server, mode)
    await call(c.search.memories(q=query, container_tag=TAG))  # miss
    await call(c.search.memories(q=query, container_tag=TAG))  # hit
    await call(c.profile(container_tag=TAG, q=query))
    await call(c.search.with_raw_response.memories(q=query, container_tag=TAG))  # bypass
    server.fail_next(1, 500, path=SEARCH)
    with pytest.raises(supermemory.InternalServerError):
        await call(c.search.memories(q=query + " again", container_tag=TAG))  # error
    await call(c.add(content=query, container_tag=TAG))  # write
    if mode == "async":
        memory = wm_middleware.WorkingMemoryInstrumentor().working_memory
        assert memory is not None
        release = asyncio.Event()

        async def hold(request: httpx.Request) -> None:
            await release.wait()

        held = client(server, mode, http_client=httpx.AsyncClient(event_hooks={"request": [hold]}))
        tasks = [
            asyncio.create_task(held.search.memories(q=query, container_tag="user-2"))
            for _ in range(2)
        ]
        await until(lambda: memory.stats().coalesced >= 1)
        release.set()
        await asyncio.gather(*tasks)  # leader + coalesced (with a link)


async def test_query_text_never_reaches_exported_data_by_default(
    otel: Otel, server: EmulatorServer, mode: str
) -> None:
    instrument(otel)
    await _every_kind_of_call(server, mode, QUERY_MARKER)
    exported = otel.exported_text()
    assert "search_memory" in exported
    assert "wm.cache.requests" in exported
    assert QUERY_MARKER not in exported
    assert all("gen_ai.memory.query.text" not in attributes(s) for s in otel.spans())


async def test_api_key_never_reaches_exported_data_even_with_capture_on(
    otel: Otel, server: EmulatorServer, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    instrument(otel)
    await _every_kind_of_call(server, mode, QUERY_MARKER)
    exported = otel.exported_text()
    assert QUERY_MARKER in exported  # capture is on: the query is on the read spans
    assert "KEY-MARKER" not in exported
    assert API_KEY not in exported
    captured = {attributes(s).get("gen_ai.memory.query.text") for s in otel.reads()}
    assert QUERY_MARKER in captured
