"""Shared fixtures of the telemetry tests: real SDK providers with in-memory exporters.

Every test gets its own ``TracerProvider`` (``InMemorySpanExporter`` behind a
``SimpleSpanProcessor``) and ``MeterProvider`` (``InMemoryMetricReader``); nothing global is set
in this process. Tests that need global providers run in a subprocess (see test_otlp.py).

Tests that ask for ``mode`` run twice, ``"sync"`` and ``"async"``; :func:`read_once` and
:func:`write_once` drive a ``Runtime`` in that mode, :func:`coalesce` makes coalesced reads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware._calls import Read, Write
from wm_middleware._runtime import Runtime
from wm_middleware._settings import Settings
from wm_middleware._telemetry import CAPTURE_CONTENT_ENV, Telemetry

from ..conftest import until as until

SERVER = ("memory.example", 8443)
RECORDS = ("peanut allergy", "likes tea")
"""What the synthetic upstream returns for a read."""


@dataclass
class Otel:
    """One test's providers and what they exported."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    _last: MetricsData | None = field(default=None, repr=False)

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans, oldest first, optionally only those called ``name``."""
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def reads(self) -> list[ReadableSpan]:
        return self.spans("search_memory")

    def collect(self) -> MetricsData | None:
        """Run a collection (observable callbacks included) and keep its result."""
        self._last = self.reader.get_metrics_data()
        return self._last

    def metrics(self) -> dict[str, Any]:
        """``{instrument name: Metric}`` of one fresh collection."""
        data = self.collect()
        found: dict[str, Any] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str) -> list[Any]:
        metric = self.metrics().get(name)
        return [] if metric is None else list(metric.data.data_points)

    def requests(self) -> dict[tuple[str, str], int]:
        """``wm.cache.requests`` as ``{(result, operation): count}``."""
        return {
            (p.attributes["wm.cache.result"], p.attributes["supermemory.operation"]): p.value
            for p in self.points("wm.cache.requests")
        }

    def durations(self) -> dict[tuple[Any, ...], int]:
        """``wm.search.duration`` point counts by sorted attribute items."""
        return {
            tuple(sorted(p.attributes.items())): p.count for p in self.points("wm.search.duration")
        }

    def exported_text(self) -> str:
        """Everything exported so far (spans and one metrics collection) as JSON text."""
        spans = [json.loads(s.to_json()) for s in self.spans()]
        data = self.collect()
        return json.dumps(spans) + (data.to_json() if data else "")


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(tracer_provider, meter_provider, exporter, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No content capture, no OTLP endpoint, nothing instrumented, unless a test says so."""
    for name in (
        CAPTURE_CONTENT_ENV,
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ):
        monkeypatch.delenv(name, raising=False)
    _uninstrument()
    yield
    _uninstrument()


def _uninstrument() -> None:
    if wm_middleware.WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry:
        wm_middleware.uninstrument()


def make_runtime(
    otel: Otel | None,
    *,
    cache: bool = True,
    trace_hits: bool = True,
    max_entries: int = 100,
    memory: WorkingMemory[Any] | None = None,
) -> Runtime:
    telemetry = Telemetry(
        otel.tracer_provider if otel else None,
        otel.meter_provider if otel else None,
        Settings.resolve({"trace_hits": trace_hits}),
    )
    if memory is None:
        memory = WorkingMemory(max_entries=max_entries, ttl=3600.0)
    return Runtime(memory, telemetry, cache=cache)


def make_read(
    query: str = "what does the user eat",
    tag: str = "user-1",
    *,
    operation: str = "search.memories",
    tenant: str = "tenant-a",
) -> Read:
    """A read whose value is a list of records, copied per caller."""
    return Read(
        operation=operation,
        key=("test", tenant, operation, query, tag),
        scopes=((tenant,), (tenant, tag)),
        server=SERVER,
        query=query,
        encode=tuple,
        decode=list,
        count=len,
    )


def make_write(tag: str = "user-1", *, tenant: str = "tenant-a", deletes: bool = False) -> Write:
    name = "delete_memory" if deletes else "upsert_memory"
    return Write("documents.add", ((tenant, tag),), SERVER, deletes, 1, operation_name=name)


async def read_once(
    runtime: Runtime, read: Read, mode: str, fetch: Callable[[], Any] | None = None
) -> Any:
    """``runtime.read`` (``mode`` "sync") or ``runtime.aread`` of ``read``; upstream returns
    what ``fetch`` returns (or raises), :data:`RECORDS` without one."""
    fetch = fetch or (lambda: RECORDS)
    if mode == "sync":
        return runtime.read(read, fetch)

    async def afetch() -> Any:
        return fetch()

    return await runtime.aread(read, afetch)


async def write_once(runtime: Runtime, write: Write, mode: str, call: Callable[[], Any]) -> Any:
    """``runtime.write`` (``mode`` "sync") or ``runtime.awrite`` of ``write`` around ``call``."""
    if mode == "sync":
        return runtime.write(write, call)

    async def acall() -> Any:
        return call()

    return await runtime.awrite(write, acall)


async def coalesce(runtime: Runtime, read: Read, callers: int = 2) -> list[Any]:
    """``callers`` tasks read ``read`` at once: the leader's fetch waits until all the others
    have joined its flight (coalesced), then returns :data:`RECORDS`. Their values, in order."""
    release = asyncio.Event()

    async def slow() -> Any:
        await release.wait()
        return RECORDS

    joined = runtime.memory.stats().coalesced + callers - 1
    tasks = [asyncio.create_task(runtime.aread(read, slow)) for _ in range(callers)]
    await until(lambda: runtime.memory.stats().coalesced >= joined)
    release.set()
    return list(await asyncio.gather(*tasks))


# ``until`` and the ``mode`` fixture are tests/conftest.py's; ``until`` is importable from here as
# before.
