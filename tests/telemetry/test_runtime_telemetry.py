"""Spans of the one call path (``Runtime``), with the real OpenTelemetry SDK.

These tests drive ``Runtime.read/aread/bypass/write`` directly with synthetic reads, so that
every rule of the telemetry contract is pinned independently of any client library; the same
rules through the real supermemory 3.x SDK are in test_sdk3_telemetry.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NonRecordingSpan, SpanKind, StatusCode

from wm_middleware._telemetry import CAPTURE_CONTENT_ENV, capture_content_enabled

from ..conftest import wait_until as _wait_for
from .conftest import (
    RECORDS,
    SERVER,
    Otel,
    coalesce,
    make_read,
    make_runtime,
    make_write,
    read_once,
    until,
    write_once,
)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# -- span shape --------------------------------------------------------------------------------
async def test_miss_then_hit_make_one_search_memory_span_each(otel: Otel, mode: str) -> None:
    runtime = make_runtime(otel)
    read = make_read()

    assert await read_once(runtime, read, mode) == list(RECORDS)
    assert await read_once(runtime, read, mode) == list(RECORDS)

    miss, hit = otel.reads()
    common = {
        "gen_ai.operation.name": "search_memory",
        "gen_ai.provider.name": "supermemory",
        "supermemory.operation": "search.memories",
        "server.address": SERVER[0],
        "server.port": SERVER[1],
        "gen_ai.memory.record.count": len(RECORDS),
        "gen_ai.memory.store.id": "supermemory",
    }
    assert attributes(miss) == {**common, "wm.cache.result": "miss"}
    assert attributes(hit) == {**common, "wm.cache.result": "hit", "wm.cache.tier": "local"}
    assert miss.kind is SpanKind.CLIENT
    assert miss.status.status_code is StatusCode.UNSET
    assert hit.status.status_code is StatusCode.UNSET


async def test_upstream_call_of_a_miss_is_a_child_of_its_span_and_a_hit_has_none(
    otel: Otel, mode: str
) -> None:
    runtime = make_runtime(otel)
    read = make_read()
    tracer = otel.tracer_provider.get_tracer("upstream")

    def fetch() -> Any:
        with tracer.start_as_current_span("POST /v4/search", kind=SpanKind.CLIENT):
            return RECORDS

    await read_once(runtime, read, mode, fetch)
    await read_once(runtime, read, mode, fetch)

    miss, hit = otel.reads()
    (upstream,) = otel.spans("POST /v4/search")
    assert upstream.parent is not None
    assert upstream.parent.span_id == miss.context.span_id
    assert upstream.context.trace_id == miss.context.trace_id
    assert not [s for s in otel.spans() if s.parent and s.parent.span_id == hit.context.span_id]


async def test_read_span_is_a_child_of_the_callers_span(otel: Otel, mode: str) -> None:
    runtime = make_runtime(otel)
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("agent turn") as turn:
        await read_once(runtime, make_read(), mode)
        await read_once(runtime, make_read(), mode)
    for span in otel.reads():
        assert span.parent is not None
        assert span.parent.span_id == turn.get_span_context().span_id


def test_coalesced_thread_gets_its_own_span_linked_to_the_leaders(otel: Otel) -> None:
    runtime = make_runtime(otel)
    read = make_read()
    release = threading.Event()
    results: dict[str, Any] = {}

    def slow_fetch() -> Any:
        assert release.wait(30)
        return RECORDS

    def call(name: str) -> None:
        results[name] = runtime.read(read, slow_fetch)

    leader = threading.Thread(target=call, args=("leader",))
    leader.start()
    _wait_for(lambda: runtime.memory.stats().inflight == 1)
    follower = threading.Thread(target=call, args=("follower",))
    follower.start()
    _wait_for(lambda: runtime.memory.stats().coalesced == 1)
    release.set()
    leader.join(30)
    follower.join(30)

    assert results == {"leader": list(RECORDS), "follower": list(RECORDS)}
    spans = {attributes(s)["wm.cache.result"]: s for s in otel.reads()}
    assert set(spans) == {"miss", "coalesced"}
    miss, coalesced = spans["miss"], spans["coalesced"]
    assert coalesced.context.span_id != miss.context.span_id
    assert coalesced.parent is None  # its own thread, its own trace
    (link,) = coalesced.links
    assert link.context.span_id == miss.context.span_id
    assert link.context.trace_id == miss.context.trace_id
    assert attributes(coalesced)["gen_ai.memory.record.count"] == len(RECORDS)
    assert not miss.links
    # Where the coalesced read's time went: the leader's fetch, which it joined.
    assert attributes(coalesced)["wm.wait.on"] == "flight"
    assert "wm.wait.on" not in attributes(miss)


async def test_coalesced_task_gets_its_own_span_linked_to_the_leaders(otel: Otel) -> None:
    runtime = make_runtime(otel)
    read = make_read()
    tracer = otel.tracer_provider.get_tracer("app")
    release = asyncio.Event()

    async def slow_fetch() -> Any:
        await release.wait()
        return RECORDS

    async def caller(name: str) -> tuple[Any, trace.SpanContext]:
        with tracer.start_as_current_span(name) as parent:
            return await runtime.aread(read, slow_fetch), parent.get_span_context()

    first = asyncio.create_task(caller("task 1"))
    second = asyncio.create_task(caller("task 2"))
    await until(lambda: runtime.memory.stats().coalesced >= 1)
    release.set()
    (value1, parent1), (value2, parent2) = await asyncio.gather(first, second)

    assert value1 == value2 == list(RECORDS)
    assert value1 is not value2
    spans = {attributes(s)["wm.cache.result"]: s for s in otel.reads()}
    assert set(spans) == {"miss", "coalesced"}
    miss, coalesced = spans["miss"], spans["coalesced"]
    # Each caller's span lives in its caller's own task and trace.
    assert miss.parent is not None
    assert coalesced.parent is not None
    assert {miss.parent.span_id, coalesced.parent.span_id} == {parent1.span_id, parent2.span_id}
    assert miss.context.trace_id != coalesced.context.trace_id
    (link,) = coalesced.links
    assert (link.context.trace_id, link.context.span_id) == (
        miss.context.trace_id,
        miss.context.span_id,
    )


# -- errors ------------------------------------------------------------------------------------
class UpstreamError(Exception):
    """Not a builtin: ``error.type`` is its fully qualified name."""


async def test_failed_read_is_an_error_span_recorded_once_and_not_cached(
    otel: Otel, mode: str
) -> None:
    runtime = make_runtime(otel)
    read = make_read()

    def fail() -> Any:
        raise UpstreamError("upstream said no")

    with pytest.raises(UpstreamError):
        await read_once(runtime, read, mode, fail)
    assert await read_once(runtime, read, mode) == list(RECORDS)  # nothing was cached

    failed, retried = otel.reads()
    assert failed.status.status_code is StatusCode.ERROR
    assert attributes(failed)["error.type"] == f"{__name__}.UpstreamError"
    assert attributes(failed)["wm.cache.result"] == "miss"
    assert [e.name for e in failed.events] == ["exception"]
    assert attributes(retried)["wm.cache.result"] == "miss"
    assert "error.type" not in attributes(retried)


async def test_error_type_is_the_same_on_the_span_and_the_duration_metric(otel: Otel) -> None:
    """Both carry the semantic-conventions ``error.type`` of one failure: the same value."""
    runtime = make_runtime(otel)

    def fail() -> Any:
        raise UpstreamError("no")

    with pytest.raises(UpstreamError):
        runtime.read(make_read(), fail)
    (span,) = otel.reads()
    (point,) = [p for p in otel.points("wm.search.duration") if "error.type" in p.attributes]
    assert point.attributes["error.type"] == attributes(span)["error.type"]


async def test_failed_bypass_is_an_error_span(otel: Otel, mode: str) -> None:
    runtime = make_runtime(otel)

    def fail() -> Any:
        raise UpstreamError("no")

    async def afail() -> Any:
        fail()

    async def bypass() -> Any:
        if mode == "sync":
            return runtime.bypass("search.memories", SERVER, fail)
        return await runtime.abypass("search.memories", SERVER, afail)

    with pytest.raises(UpstreamError):
        await bypass()
    (span,) = otel.reads()
    assert span.status.status_code is StatusCode.ERROR
    assert attributes(span)["wm.cache.result"] == "bypass"
    assert [e.name for e in span.events] == ["exception"]


# -- writes ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("deletes", "name"), [(False, "upsert_memory"), (True, "delete_memory")])
async def test_write_span_counts_the_entries_it_invalidated(
    otel: Otel, mode: str, deletes: bool, name: str
) -> None:
    runtime = make_runtime(otel)
    await read_once(runtime, make_read("q1", "user-1"), mode)
    await read_once(runtime, make_read("q2", "user-1"), mode)
    await read_once(runtime, make_read("q3", "user-2"), mode)

    assert await write_once(runtime, make_write("user-1", deletes=deletes), mode, lambda: "ok") == (
        "ok"
    )
    await write_once(runtime, make_write("user-9", deletes=deletes), mode, lambda: "ok")

    first, second = otel.spans(name)
    assert attributes(first)["wm.cache.invalidated"] == 2
    assert attributes(second)["wm.cache.invalidated"] == 0
    assert attributes(first)["supermemory.operation"] == "documents.add"
    assert attributes(first)["gen_ai.operation.name"] == name
    assert attributes(first)["gen_ai.memory.record.count"] == 1  # records attempted
    assert first.kind is SpanKind.CLIENT
    assert runtime.memory.stats().size == 1


async def test_failed_write_is_an_error_span_that_still_invalidates(otel: Otel) -> None:
    runtime = make_runtime(otel)
    runtime.read(make_read(), lambda: RECORDS)

    def fail() -> Any:
        raise UpstreamError("no")

    with pytest.raises(UpstreamError):
        runtime.write(make_write(), fail)
    (span,) = otel.spans("upsert_memory")
    assert span.status.status_code is StatusCode.ERROR
    assert attributes(span)["wm.cache.invalidated"] == 1
    assert [e.name for e in span.events] == ["exception"]


# -- options -----------------------------------------------------------------------------------
async def test_trace_hits_false_makes_no_hit_spans_but_counts_every_hit(
    otel: Otel, mode: str
) -> None:
    runtime = make_runtime(otel, trace_hits=False)
    read = make_read()
    for _ in range(200):
        assert await read_once(runtime, read, mode) == list(RECORDS)

    assert [attributes(s)["wm.cache.result"] for s in otel.reads()] == ["miss"]
    assert otel.requests() == {("miss", "search.memories"): 1, ("hit", "search.memories"): 199}


async def test_cache_false_goes_upstream_every_time_recorded_as_bypass(
    otel: Otel, mode: str
) -> None:
    runtime = make_runtime(otel, cache=False)
    calls = []

    def fetch() -> Any:
        calls.append(1)
        return RECORDS

    for _ in range(3):
        assert await read_once(runtime, make_read(), mode, fetch) == RECORDS
    assert len(calls) == 3
    assert runtime.memory.stats().size == 0
    assert [attributes(s)["wm.cache.result"] for s in otel.reads()] == ["bypass"] * 3
    assert otel.requests() == {("bypass", "search.memories"): 3}
    assert otel.durations() == {
        (("supermemory.operation", "search.memories"), ("wm.cache.result", "bypass")): 3
    }


async def test_cache_false_spans_still_report_the_record_count(otel: Otel) -> None:
    """``cache=False`` is for comparing runs: its spans carry what cached runs carry."""
    runtime = make_runtime(otel, cache=False)
    runtime.read(make_read(), lambda: RECORDS)
    (span,) = otel.reads()
    assert attributes(span)["gen_ai.memory.record.count"] == len(RECORDS)


# -- suppression, sampling ---------------------------------------------------------------------
async def test_suppressed_reads_make_no_span(otel: Otel, mode: str) -> None:
    runtime = make_runtime(otel)
    read = make_read()
    await read_once(runtime, read, mode)  # cached now
    otel.exporter.clear()
    with suppress_instrumentation():
        # Served uncached: the value comes straight from upstream.
        assert list(await read_once(runtime, read, mode)) == list(RECORDS)
        assert list(await read_once(runtime, make_read("other"), mode)) == list(RECORDS)
    assert otel.spans() == []


async def test_suppressed_write_makes_no_span(otel: Otel, mode: str) -> None:
    runtime = make_runtime(otel)
    with suppress_instrumentation():
        assert await write_once(runtime, make_write(), mode, lambda: "ok") == "ok"
    assert [s.name for s in otel.spans()] == []


class _SeenByProcessor(SpanProcessor):
    def __init__(self) -> None:
        self.started: list[Any] = []
        self.ended: list[Any] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


_SPAN_SETTERS = (
    "set_attribute",
    "set_attributes",
    "add_event",
    "add_link",
    "record_exception",
    "set_status",
    "update_name",
)


async def test_no_attribute_work_on_a_span_that_is_not_recording(
    otel: Otel, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    for setter in _SPAN_SETTERS:
        original = getattr(NonRecordingSpan, setter)

        def spy(
            self: Any, *args: Any, _name: str = setter, _orig: Any = original, **kw: Any
        ) -> Any:
            calls.append(_name)
            return _orig(self, *args, **kw)

        monkeypatch.setattr(NonRecordingSpan, setter, spy)
    processor = _SeenByProcessor()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(processor)
    dropped = Otel(provider, otel.meter_provider, otel.exporter, otel.reader)
    runtime = make_runtime(dropped)
    read = make_read()

    await read_once(runtime, read, mode)  # miss
    await read_once(runtime, read, mode)  # hit
    with pytest.raises(UpstreamError):
        await read_once(runtime, make_read("boom"), mode, _raise)
    runtime.bypass("search.memories", SERVER, lambda: RECORDS, "query")
    await write_once(runtime, make_write(), mode, lambda: "ok")
    await coalesce(runtime, make_read("slow"))

    assert calls == []
    assert processor.started == processor.ended == []
    # Metrics do not depend on sampling.
    assert otel.requests()[("coalesced", "search.memories")] == 1
    provider.shutdown()


def _raise() -> Any:
    raise UpstreamError("no")


# -- failing exporters -------------------------------------------------------------------------
class _RaisingExporter(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise RuntimeError("the collector is down")


async def test_an_exporter_that_raises_changes_no_result(otel: Otel, mode: str) -> None:
    exporter = _RaisingExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = make_runtime(Otel(provider, otel.meter_provider, otel.exporter, otel.reader))

    assert await read_once(runtime, make_read(), mode) == list(RECORDS)
    assert await read_once(runtime, make_read(), mode) == list(RECORDS)
    with pytest.raises(UpstreamError):
        await read_once(runtime, make_read("boom"), mode, _raise)
    assert await write_once(runtime, make_write(), mode, lambda: "written") == "written"
    assert runtime.bypass("search.memories", SERVER, lambda: "raw") == "raw"

    assert exporter.calls == 5  # it was called, and it raised, every time
    assert runtime.memory.stats().invalidations == 1
    provider.shutdown()


async def test_a_hung_exporter_blocks_no_call(otel: Otel) -> None:
    entered = threading.Event()
    release = threading.Event()

    class Hung(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            entered.set()
            release.wait()
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    # A tiny queue: it fills up while the exporter hangs, and must then drop, not block.
    provider.add_span_processor(
        BatchSpanProcessor(Hung(), max_queue_size=2, max_export_batch_size=1)
    )
    runtime = make_runtime(Otel(provider, otel.meter_provider, otel.exporter, otel.reader))
    try:
        assert runtime.read(make_read(), lambda: RECORDS) == list(RECORDS)
        assert entered.wait(30), "the batch processor never exported"
        returned = threading.Event()
        results: list[Any] = []

        def calls() -> None:
            for i in range(50):
                results.append(runtime.read(make_read(), lambda: RECORDS))  # hits
                results.append(runtime.read(make_read(f"q{i}"), lambda: RECORDS))  # misses
                results.append(runtime.write(make_write("user-x"), lambda: "ok"))
            returned.set()

        # A thread only so that a blocked call fails this test instead of hanging the run.
        threading.Thread(target=calls, daemon=True).start()
        assert returned.wait(60), "a call blocked on the hung exporter"
        assert not release.is_set()  # returned while the exporter was still hung
        assert results == [list(RECORDS), list(RECORDS), "ok"] * 50
        results.clear()
        assert await runtime.aread(make_read(), _arecords) == list(RECORDS)
        assert await runtime.aread(make_read("async miss"), _arecords) == list(RECORDS)
        assert not release.is_set()
    finally:
        release.set()
        provider.shutdown()


async def _arecords() -> Any:
    return RECORDS


# -- content -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        (None, False),
        ("", False),
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("false", False),
        ("1", False),
        ("yes", False),
        ("on", False),
        ("truthy", False),
        ("true,false", False),
    ],
)
def test_content_capture_switch_is_parsed_strictly(
    monkeypatch: pytest.MonkeyPatch, value: str | None, enabled: bool
) -> None:
    if value is not None:
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, value)
    assert capture_content_enabled() is enabled


@pytest.mark.parametrize("capture", [False, True])
async def test_query_text_is_on_spans_only_when_capture_is_on(
    otel: Otel, monkeypatch: pytest.MonkeyPatch, capture: bool
) -> None:
    if capture:
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    runtime = make_runtime(otel)
    read = make_read("QUERY-MARKER-7f3a")
    runtime.read(read, lambda: RECORDS)
    runtime.read(read, lambda: RECORDS)
    runtime.bypass("search.memories", SERVER, lambda: RECORDS, "QUERY-MARKER-7f3a")
    spans = otel.reads()
    assert len(spans) == 3
    for span in spans:
        expected = "QUERY-MARKER-7f3a" if capture else None
        assert attributes(span).get("gen_ai.memory.query.text") == expected
    # Never on metrics, capture or not.
    assert "QUERY-MARKER" not in (otel.collect() or _empty()).to_json()


def _empty() -> Any:
    from opentelemetry.sdk.metrics.export import MetricsData

    return MetricsData(resource_metrics=[])


# ``_wait_for`` is tests/conftest.py's ``wait_until``.
