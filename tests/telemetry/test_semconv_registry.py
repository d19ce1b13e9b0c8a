"""Everything emitted is checked against a pinned copy of the GenAI conventions' entries
(issue 20 items 1-4): names, requirement levels, enum values, types, span kinds, the schema URL.

The pin (``semconv_genai.json``) is extracted from open-telemetry/semantic-conventions-genai
``model/gen-ai/{spans,registry,metrics}.yaml`` at the commits it names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

from wm_middleware._calls import Write
from wm_middleware._runtime import Runtime
from wm_middleware._telemetry import CAPTURE_CONTENT_ENV, SCHEMA_URL, SEMCONV_VERSION
from wm_middleware._telemetry import UPSERT_MEMORY as UPSERT

from .conftest import RECORDS, SERVER, Otel, coalesce, make_read, make_runtime

PIN = json.loads((Path(__file__).with_name("semconv_genai.json")).read_text())
SPAN = PIN["spans"]["gen_ai.memory.client"]
METRIC = PIN["metrics"]["gen_ai.client.operation.duration"]
REGISTRY = PIN["registry"]
TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "enum": (str,),
    "int": (int,),
    "any": (object,),
}


class Upstream(Exception):
    pass


def _boom() -> Any:
    raise Upstream("no")


def _level(entry: Any) -> str:
    return entry if isinstance(entry, str) else next(iter(entry))


async def _every_outcome(runtime: Runtime) -> None:
    """A miss, hits, a coalesced read, a bypass, a failed read; writes of every kind."""
    read = make_read()
    await coalesce(runtime, read)  # a miss and a coalesced read
    runtime.read(read, lambda: RECORDS)  # a hit
    runtime.bypass("search.memories", SERVER, lambda: RECORDS, "q", len)
    with pytest.raises(Upstream):
        runtime.read(make_read("fails"), _boom)
    scopes = (("tenant-a", "user-1"),)
    runtime.write(Write("documents.add", scopes, SERVER, 1, operation_name=UPSERT), lambda: None)
    runtime.write(
        Write("documents.update", scopes, SERVER, operation_name="update_memory", record_id="d1"),
        lambda: None,
    )
    runtime.write(
        Write(
            "documents.delete",
            scopes,
            SERVER,
            True,
            1,
            operation_name="delete_memory",
            record_id="doc-1",
        ),
        lambda: None,
    )
    runtime.write(
        Write("memories.create", scopes, SERVER, records=3, operation_name="create_memory"),
        lambda: None,
    )
    with pytest.raises(Upstream):
        runtime.write(Write("documents.add", scopes, SERVER, 1, operation_name=UPSERT), _boom)


def _memory_spans(otel: Otel) -> list[ReadableSpan]:
    spans = [s for s in otel.spans() if "gen_ai.operation.name" in (s.attributes or {})]
    assert len(spans) == 10
    return spans


def test_the_pin_names_the_schema_url_we_emit(otel: Otel) -> None:
    assert PIN["source"]["schema_url"] == SCHEMA_URL
    assert f"https://opentelemetry.io/schemas/gen-ai-dev/{SEMCONV_VERSION}" == SCHEMA_URL
    assert SEMCONV_VERSION.endswith("-dev")
    make_runtime(otel).read(make_read(), lambda: RECORDS)
    (span,) = otel.reads()
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.schema_url == SCHEMA_URL
    data = otel.collect()
    assert data is not None
    scopes = {s.scope.schema_url for r in data.resource_metrics for s in r.scope_metrics}
    assert scopes == {SCHEMA_URL}


def test_every_span_attribute_is_defined_typed_and_at_its_level(otel: Otel) -> None:
    asyncio.run(_every_outcome(make_runtime(otel)))
    defined = SPAN["attributes"]
    members = REGISTRY["gen_ai.operation.name"]["members"]
    for span in _memory_spans(otel):
        attributes = dict(span.attributes or {})
        name = attributes["gen_ai.operation.name"]
        assert name in members
        assert name in SPAN["operations"]
        assert span.name == name  # "{gen_ai.operation.name}"
        ours = {
            k
            for k in attributes
            if k.startswith("gen_ai.") or k in ("server.address", "server.port", "error.type")
        }
        assert ours <= set(defined), ours - set(defined)
        for key in ours:
            assert isinstance(attributes[key], TYPES[REGISTRY[key]["type"]]), key
        for key, entry in defined.items():
            level = _level(entry)
            if level == "required":
                assert key in attributes, (span.name, key)
            if level == "opt_in":
                assert key not in attributes, (span.name, key)  # content capture is off
        assert ("server.port" in attributes) == ("server.address" in attributes)
        failed = span.status.status_code is StatusCode.ERROR
        assert ("error.type" in attributes) == failed
        assert attributes["gen_ai.memory.store.id"] == "supermemory"


def test_record_id_is_on_operations_that_target_one_record(otel: Otel) -> None:
    asyncio.run(_every_outcome(make_runtime(otel)))
    ids = {s.name: (s.attributes or {}).get("gen_ai.memory.record.id") for s in _memory_spans(otel)}
    assert ids["update_memory"] == "d1"
    assert ids["delete_memory"] == "doc-1"
    assert ids["upsert_memory"] is None
    assert ids["search_memory"] is None
    counts = {s.name: (s.attributes or {}).get("gen_ai.memory.record.count") for s in otel.spans()}
    assert counts["create_memory"] == 3


def test_a_read_by_id_carries_its_record_id(otel: Otel) -> None:
    runtime = make_runtime(otel)
    read = dataclasses.replace(make_read(), record_id="doc-1")
    runtime.read(read, lambda: RECORDS)
    runtime.read(read, lambda: RECORDS)
    runtime.bypass("documents.get", SERVER, lambda: RECORDS, None, len, read)
    assert [(s.attributes or {})["gen_ai.memory.record.id"] for s in otel.reads()] == ["doc-1"] * 3


def test_span_kind_is_client_for_a_request_and_internal_without_one(otel: Otel) -> None:
    asyncio.run(_every_outcome(make_runtime(otel)))
    assert SPAN["kind"] == "client"
    for span in _memory_spans(otel):
        result = (span.attributes or {}).get("wm.cache.result")
        expected = SpanKind.INTERNAL if result in ("hit", "coalesced") else SpanKind.CLIENT
        assert span.kind is expected, (span.name, result)


def test_opt_in_attributes_appear_only_with_content_capture(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    make_runtime(otel).read(make_read("the query"), lambda: RECORDS)
    (span,) = otel.reads()
    assert _level(SPAN["attributes"]["gen_ai.memory.query.text"]) == "opt_in"
    assert (span.attributes or {})["gen_ai.memory.query.text"] == "the query"


def test_operation_duration_metric_matches_the_conventions(otel: Otel) -> None:
    asyncio.run(_every_outcome(make_runtime(otel)))
    metric = otel.metrics()["gen_ai.client.operation.duration"]
    assert metric.unit == METRIC["unit"]
    assert type(metric.data).__name__.lower() == METRIC["instrument"]
    points = list(metric.data.data_points)
    operations = set()
    for point in points:
        attributes = dict(point.attributes)
        assert set(attributes) <= set(METRIC["attributes"]), attributes
        for key, entry in METRIC["attributes"].items():
            if _level(entry) == "required":
                assert key in attributes, key
        assert attributes["gen_ai.provider.name"] == "supermemory"
        assert ("server.port" in attributes) == ("server.address" in attributes)
        operations.add((attributes["gen_ai.operation.name"], attributes.get("error.type")))
    assert operations == {
        ("search_memory", None),
        ("search_memory", f"{__name__}.Upstream"),
        ("upsert_memory", None),
        ("upsert_memory", f"{__name__}.Upstream"),
        ("update_memory", None),
        ("delete_memory", None),
        ("create_memory", None),
    }
    search = next(
        p
        for p in points
        if dict(p.attributes)
        == {
            "gen_ai.operation.name": "search_memory",
            "gen_ai.provider.name": "supermemory",
            "server.address": SERVER[0],
            "server.port": SERVER[1],
        }
    )
    assert search.count == 4  # the miss, the coalesced read, the hit and the bypass
    assert search.explicit_bounds[0] < 0.0001  # a sub-millisecond hit has a bucket of its own


class _KindAtStart(SpanProcessor):
    """Records each span's kind when it starts and when it ends."""

    def __init__(self) -> None:
        self.started: dict[int, SpanKind] = {}
        self.pairs: list[tuple[SpanKind, SpanKind]] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started[span.context.span_id] = span.kind

    def on_end(self, span: ReadableSpan) -> None:
        self.pairs.append((self.started[span.context.span_id], span.kind))


def test_a_span_keeps_the_kind_it_started_with(otel: Otel) -> None:
    """Issue 20 item 4: the kind is decided before the span starts, never rewritten after."""
    processor = _KindAtStart()
    otel.tracer_provider.add_span_processor(processor)
    asyncio.run(_every_outcome(make_runtime(otel)))
    assert len(processor.pairs) == 10
    assert all(start == end for start, end in processor.pairs), processor.pairs
    assert (SpanKind.INTERNAL, SpanKind.INTERNAL) in processor.pairs  # the coalesced read
