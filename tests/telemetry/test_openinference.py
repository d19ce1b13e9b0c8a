"""Opt-in OpenInference attributes (issue 20 item 5), with the real OpenTelemetry SDK: reads
render as retrievals with their cache result visible; the query and the documents only with the
content opt-in; the demo's two deployments land in two projects."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from typing import Any

import pytest

from wm_middleware._telemetry import CAPTURE_CONTENT_ENV, OPENINFERENCE_ENV, Telemetry

from .conftest import SERVER, Otel, make_read, make_runtime, make_write, until

RECORDS = ("peanut allergy", "likes tea")


def _openinference(otel: Otel) -> Any:
    runtime = make_runtime(otel)
    runtime.telemetry.openinference = True
    return runtime


async def _reads(runtime: Any) -> None:
    read = make_read("what does alex eat")
    release = asyncio.Event()

    async def slow() -> Any:
        await release.wait()
        return RECORDS

    tasks = [asyncio.create_task(runtime.aread(read, slow)) for _ in range(2)]
    await until(lambda: runtime.memory.stats().coalesced >= 1)
    release.set()
    await asyncio.gather(*tasks)
    runtime.read(read, lambda: RECORDS)
    runtime.bypass("search.memories", SERVER, lambda: RECORDS, "what does alex eat", len)
    runtime.write(make_write(), lambda: None)


def test_off_by_default(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OPENINFERENCE_ENV, raising=False)
    runtime = make_runtime(otel)
    asyncio.run(_reads(runtime))
    for span in otel.spans():
        keys = set(span.attributes or {})
        assert not {k for k in keys if k.startswith(("openinference.", "retrieval.", "input."))}
        assert "metadata" not in keys


def test_reads_are_retrievers_with_their_cache_result_in_metadata(otel: Otel) -> None:
    asyncio.run(_reads(_openinference(otel)))
    results = []
    for span in otel.reads():
        attributes = dict(span.attributes or {})
        assert attributes["openinference.span.kind"] == "RETRIEVER"
        metadata = json.loads(str(attributes["metadata"]))
        assert metadata["wm.cache.result"] == attributes["wm.cache.result"]
        assert metadata["supermemory.operation"] == "search.memories"
        results.append(metadata["wm.cache.result"])
        # no content without the content opt-in
        assert "input.value" not in attributes
        assert not [k for k in attributes if k.startswith("retrieval.documents")]
        assert "what does alex eat" not in span.to_json()
    assert sorted(results) == ["bypass", "coalesced", "hit", "miss"]
    (write,) = otel.spans("upsert_memory")
    assert "openinference.span.kind" not in (write.attributes or {})


def test_documents_and_query_only_with_content_capture(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    runtime = _openinference(otel)
    runtime.telemetry.capture_content = True
    runtime.read(make_read("what does alex eat"), lambda: RECORDS)
    (span,) = otel.reads()
    attributes = dict(span.attributes or {})
    assert attributes["input.value"] == "what does alex eat"
    assert attributes["retrieval.documents.0.document.content"] == "peanut allergy"
    assert attributes["retrieval.documents.1.document.content"] == "likes tea"


def test_documents_of_an_sdk_result_have_id_content_and_score(otel: Otel) -> None:
    from wm_middleware._telemetry.openinference import documents_of

    result = {
        "results": [
            {"id": "m1", "memory": "User has a peanut allergy", "similarity": 0.91},
            {"documentId": "d2", "chunks": [{"content": "likes"}, {"content": "tea"}], "score": 1},
        ],
        "total": 2,
    }
    assert documents_of(result) == [
        {"id": "m1", "content": "User has a peanut allergy", "score": 0.91},
        {"id": "d2", "content": "likes\ntea", "score": 1.0},
    ]
    assert documents_of(object()) == []


def test_the_environment_variable_switches_it_on_and_a_bad_value_is_named(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OPENINFERENCE_ENV, "true")
    assert Telemetry(otel.tracer_provider).openinference is True
    assert Telemetry(otel.tracer_provider, openinference=False).openinference is False
    monkeypatch.setenv(OPENINFERENCE_ENV, "maybe")
    with pytest.raises(ValueError, match=OPENINFERENCE_ENV):
        Telemetry(otel.tracer_provider)


@pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)
def test_the_demo_names_its_two_deployments_and_uses_stable_http_names() -> None:
    from wm_middleware.demo.runner import DemoOptions, run_demo

    result = asyncio.run(run_demo(DemoOptions(turns=1, latency_ms=1.0)))
    projects = set()
    for run in (result.uncached, result.cached):
        resources = {
            span.resource.attributes.get("openinference.project.name") for span in run.spans
        }
        assert resources == {run.service_name}
        projects |= resources
        http = [s for s in run.spans if "http.request.method" in (s.attributes or {})]
        assert http, "no httpx span with the stable HTTP attribute names"
        assert not [s for s in run.spans if "http.method" in (s.attributes or {})]
    assert projects == {"agent-uncached", "agent-cached"}
