"""Telemetry never breaks a call (issue 8, defect 10), with the real OpenTelemetry SDK.

A span processor whose ``on_end`` raises, SDK spans whose ``end`` or ``get_span_context``
raise, and a meter whose instruments raise: every read still returns its value (hit, miss,
coalesced, bypass), every write its result, sync and async, and an upstream error still reaches
the caller unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.metrics import Histogram, Meter, MeterProvider, NoOpMeter
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from wm_middleware import WorkingMemory
from wm_middleware._runtime import Runtime
from wm_middleware._settings import Settings
from wm_middleware._telemetry import Telemetry

from .conftest import RECORDS, SERVER, coalesce, make_read, make_write, read_once


class UpstreamError(Exception):
    pass


class _RaisingOnEnd(SpanProcessor):
    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1
        raise RuntimeError("on_end exploded")


class _BreakSpans(SpanProcessor):
    """Makes the SDK's own spans raise from the methods named in ``broken``."""

    def __init__(self, *broken: str) -> None:
        self.broken = broken
        self.started = 0

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self.started += 1

        def boom(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("span method exploded")

        for name in self.broken:
            setattr(span, name, boom)


class _RaisingHistogram(Histogram):
    def record(self, amount: Any, attributes: Any = None, context: Any = None) -> None:
        raise RuntimeError("histogram exploded")


class _RaisingMeter(NoOpMeter):
    def create_histogram(self, name: str, *args: Any, **kwargs: Any) -> Histogram:
        return _RaisingHistogram(name)


class _RaisingMeterProvider(MeterProvider):
    def __init__(self, *, at_creation: bool = False) -> None:
        self.at_creation = at_creation

    def get_meter(self, name: str, *args: Any, **kwargs: Any) -> Meter:
        if self.at_creation:
            raise RuntimeError("get_meter exploded")
        return _RaisingMeter(name)


def _processor_on_end() -> tuple[TracerProvider, Any]:
    provider = TracerProvider()
    processor = _RaisingOnEnd()
    provider.add_span_processor(processor)
    return provider, processor


def _span_methods(*names: str) -> Callable[[], tuple[TracerProvider, Any]]:
    def make() -> tuple[TracerProvider, Any]:
        provider = TracerProvider()
        processor = _BreakSpans(*names)
        provider.add_span_processor(processor)
        return provider, processor

    return make


FAULTS: dict[str, Callable[[], tuple[TracerProvider | None, Any]]] = {
    "processor on_end raises": _processor_on_end,
    "span.end raises": _span_methods("end"),
    "span.get_span_context raises": _span_methods("get_span_context"),
    "every span method raises": _span_methods(
        "end", "get_span_context", "set_attribute", "is_recording", "add_link", "set_status"
    ),
    "meter raises": lambda: (None, None),
    "meter provider raises": lambda: (None, None),
}


@pytest.fixture(params=list(FAULTS))
def faulty(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    provider, _ = FAULTS[request.param]()
    meter_provider: MeterProvider | None = None
    if request.param == "meter raises":
        meter_provider = _RaisingMeterProvider()
    elif request.param == "meter provider raises":
        meter_provider = _RaisingMeterProvider(at_creation=True)
    telemetry = Telemetry(provider, meter_provider, Settings.resolve({"trace_hits": True}))
    yield Runtime(WorkingMemory(max_entries=100, ttl=3600.0), telemetry)
    if provider is not None:
        provider.shutdown()


def _raise() -> Any:
    raise UpstreamError("upstream said no")


async def test_reads_writes_and_bypasses_return_their_values_whatever_telemetry_raises(
    faulty: Runtime, mode: str
) -> None:
    read = make_read()
    assert await read_once(faulty, read, mode, lambda: RECORDS) == list(RECORDS)  # miss
    assert await read_once(faulty, read, mode, lambda: ("other",)) == list(RECORDS)  # hit
    with pytest.raises(UpstreamError, match="upstream said no"):
        await read_once(faulty, make_read("failing"), mode, _raise)
    if mode == "sync":
        assert faulty.write(make_write(), lambda: "written") == "written"
        assert faulty.bypass("search.memories", SERVER, lambda: "raw") == "raw"
    else:

        async def written() -> str:
            return "written"

        async def raw() -> str:
            return "raw"

        assert await faulty.awrite(make_write(), written) == "written"
        assert await faulty.abypass("search.memories", SERVER, raw) == "raw"
    assert faulty.memory.stats().invalidations == 1  # the write still invalidated
    assert await read_once(faulty, read, mode, lambda: ("fresh",)) == ["fresh"]


async def test_coalesced_tasks_get_the_leaders_value_whatever_telemetry_raises(
    faulty: Runtime,
) -> None:
    assert await coalesce(faulty, make_read("together"), callers=3) == [list(RECORDS)] * 3


def test_a_telemetry_failure_is_logged_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    provider, processor = _span_methods("end")()
    runtime = Runtime(WorkingMemory(max_entries=10, ttl=60.0), Telemetry(provider, None))
    with caplog.at_level(logging.DEBUG, logger="wm_middleware._telemetry"):
        for n in range(5):
            assert runtime.read(make_read(f"q{n}"), lambda: RECORDS) == list(RECORDS)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert processor.started == 5
    assert len(warnings) <= 1  # once per process, not once per call
    provider.shutdown()


async def test_a_record_count_that_raises_costs_a_hit_its_count_not_its_value(mode: str) -> None:
    from dataclasses import replace

    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    def count(value: Any) -> int:
        raise RuntimeError("count exploded")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = Runtime(WorkingMemory(max_entries=10, ttl=60.0), Telemetry(provider, None))
    read = replace(make_read("counted"), count=count)
    assert await read_once(runtime, read, mode, lambda: RECORDS) == list(RECORDS)  # miss
    assert await read_once(runtime, read, mode, lambda: ()) == list(RECORDS)  # hit
    hit = [
        span
        for span in exporter.get_finished_spans()
        if span.attributes.get("wm.cache.result") == "hit"
    ]
    assert len(hit) == 1
    assert "gen_ai.memory.record.count" not in (hit[0].attributes or {})
    assert runtime.bypass("search.memories", SERVER, lambda: "raw", None, count) == "raw"
    provider.shutdown()
