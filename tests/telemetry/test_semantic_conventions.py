"""GenAI memory-span conventions and privacy of what is exported (issue 11 item 1, issue 8
defect 11), with the real OpenTelemetry SDK."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from wm_middleware._adapters.calls import write_of
from wm_middleware._api.routes import find
from wm_middleware._calls import Write
from wm_middleware._telemetry import CAPTURE_CONTENT_ENV, STORE_ID_ENV

from .conftest import RECORDS, SERVER, Otel, coalesce, make_read, make_runtime, read_once

SECRET_QUERY = "does alex-4711 still take sertraline"


class EchoingUpstreamError(Exception):
    """What search APIs do: the error message repeats the query."""


def _echo() -> Any:
    raise EchoingUpstreamError(f"no index for query {SECRET_QUERY!r}")


def _exported(span: ReadableSpan) -> str:
    return span.to_json()


async def test_error_span_has_type_and_status_but_not_the_message_by_default(
    otel: Otel, mode: str
) -> None:
    runtime = make_runtime(otel)
    with pytest.raises(EchoingUpstreamError, match="sertraline"):  # unchanged for the caller
        await read_once(runtime, make_read(SECRET_QUERY), mode, _echo)
    (span,) = otel.reads()
    assert span.status.status_code is StatusCode.ERROR
    assert not span.status.description
    assert span.attributes is not None
    assert span.attributes["error.type"].endswith("EchoingUpstreamError")
    (event,) = span.events
    assert event.name == "exception"
    assert dict(event.attributes or {}) == {"exception.type": span.attributes["error.type"]}
    assert "sertraline" not in otel.exported_text()


def test_error_message_is_exported_with_content_capture_on(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    runtime = make_runtime(otel)
    with pytest.raises(EchoingUpstreamError):
        runtime.read(make_read(SECRET_QUERY), _echo)
    (span,) = otel.reads()
    assert "sertraline" in (span.status.description or "")
    assert "exception.message" in dict(span.events[0].attributes or {})


def test_failed_write_does_not_export_the_message_either(otel: Otel) -> None:
    runtime = make_runtime(otel)
    with pytest.raises(EchoingUpstreamError):
        runtime.write(
            Write("documents.add", (("t", "u"),), SERVER, operation_name="upsert_memory"), _echo
        )
    (span,) = otel.spans("upsert_memory")
    assert span.status.status_code is StatusCode.ERROR
    assert "sertraline" not in _exported(span)


@pytest.mark.parametrize(
    ("generation", "method", "path", "body", "name", "records"),
    [
        (3, "POST", "/v3/documents", {"content": "x"}, "upsert_memory", 1),
        (3, "POST", "/v3/documents/batch", {"documents": [{}, {}]}, "upsert_memory", 2),
        (3, "PATCH", "/v3/documents/d1", {}, "update_memory", 1),
        (3, "PATCH", "/v4/memories", {"id": "m1"}, "update_memory", 1),
        (3, "DELETE", "/v3/documents/d1", {}, "delete_memory", 1),
        (3, "DELETE", "/v3/documents/bulk", {"containerTags": ["u"]}, "delete_memory", None),
        (5, "DELETE", "/ns/u/memories/semantic", {"query": "x"}, "delete_memory", None),
    ],
)
def test_write_spans_name_the_memory_operation_and_count_records_attempted_from_the_route(
    otel: Otel,
    generation: int,
    method: str,
    path: str,
    body: dict[str, Any],
    name: str,
    records: int | None,
) -> None:
    found = find(method, path)
    assert found is not None
    assert found.route.generation == generation
    write = write_of(found, (("t", "u"),), SERVER, body, lambda: None)  # type: ignore[arg-type]
    assert (write.operation_name, write.records) == (name, records)
    make_runtime(otel).write(write, lambda: None)
    (span,) = otel.spans(name)
    assert (span.attributes or {}).get("gen_ai.operation.name") == name
    assert (span.attributes or {}).get("gen_ai.memory.record.count") == records


async def test_coalesced_span_is_internal_like_a_hit_and_a_miss_is_client(otel: Otel) -> None:
    runtime = make_runtime(otel)
    read = make_read()
    await coalesce(runtime, read)  # a miss and a coalesced read
    await read_once(runtime, read, "async")  # a hit
    kinds = {(s.attributes or {})["wm.cache.result"]: s.kind for s in otel.reads()}
    assert kinds == {
        "miss": SpanKind.CLIENT,
        "coalesced": SpanKind.INTERNAL,
        "hit": SpanKind.INTERNAL,
    }


def test_store_id_names_the_store_never_a_container_tag(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = make_runtime(otel)
    runtime.read(make_read("q", "user-alex"), lambda: RECORDS)
    monkeypatch.setenv(STORE_ID_ENV, "travel-assistant-memories")
    make_runtime(otel).read(make_read("q2", "user-alex"), lambda: RECORDS)
    default, named = otel.reads()
    assert (default.attributes or {})["gen_ai.memory.store.id"] == "supermemory"
    assert (named.attributes or {})["gen_ai.memory.store.id"] == "travel-assistant-memories"
    assert "user-alex" not in otel.exported_text()


def test_a_write_always_names_its_memory_operation() -> None:
    with pytest.raises(TypeError, match="operation_name"):
        Write("documents.add", (("t", "u"),), SERVER)  # type: ignore[call-arg]
