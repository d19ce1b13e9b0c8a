"""Opt-in OpenInference attributes (issue 20 item 5), with the real OpenTelemetry SDK: reads
render as retrievals with their cache result visible; the query and the documents only with the
content opt-in; the demo's two deployments land in two projects."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from wm_middleware._settings import Settings
from wm_middleware._telemetry import CAPTURE_CONTENT_ENV, OPENINFERENCE_ENV, Telemetry

from .conftest import RECORDS, SERVER, Otel, coalesce, make_read, make_runtime, make_write


def _openinference(otel: Otel) -> Any:
    runtime = make_runtime(otel)
    runtime.telemetry.openinference = True
    return runtime


async def _reads(runtime: Any) -> None:
    read = make_read("what does alex eat")
    await coalesce(runtime, read)  # a miss and a coalesced read
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
    from wm_middleware._telemetry.openinference import retrieval_documents

    result = {
        "results": [
            {"id": "m1", "memory": "User has a peanut allergy", "similarity": 0.91},
            {"documentId": "d2", "chunks": [{"content": "likes"}, {"content": "tea"}], "score": 1},
        ],
        "total": 2,
    }
    assert retrieval_documents(result) == [
        {"id": "m1", "content": "User has a peanut allergy", "score": 0.91},
        {"id": "d2", "content": "likes\ntea", "score": 1.0},
    ]
    assert retrieval_documents(object()) == []


def test_the_environment_variable_switches_it_on_and_a_bad_value_is_named(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OPENINFERENCE_ENV, "true")
    assert Telemetry(otel.tracer_provider).openinference is True
    assert (
        Telemetry(
            otel.tracer_provider, None, Settings.resolve({"openinference": False})
        ).openinference
        is False
    )
    monkeypatch.setenv(OPENINFERENCE_ENV, "maybe")
    with pytest.raises(ValueError, match=OPENINFERENCE_ENV):
        Telemetry(otel.tracer_provider)


# The HTTP instrumentation reads OTEL_SEMCONV_STABILITY_OPT_IN once per process: the demo runs
# in a fresh interpreter, as it does from the command line, so earlier tests cannot decide it.
_DEMO_SPANS = """
import asyncio, json
from wm_middleware.demo.runner import DemoOptions, run_demo

result = asyncio.run(run_demo(DemoOptions(turns=1, latency_ms=1.0)))
print(json.dumps([
    {
        "service": run.service_name,
        "projects": sorted({str(s.resource.attributes.get("openinference.project.name"))
                            for s in run.spans}),
        "stable": sum("http.request.method" in (s.attributes or {}) for s in run.spans),
        "old": sum("http.method" in (s.attributes or {}) for s in run.spans),
    }
    for run in (result.uncached, result.cached)
]))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)
def test_the_demo_names_its_two_deployments_and_uses_stable_http_names() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OTEL_SEMCONV_STABILITY_OPT_IN"}
    done = subprocess.run(
        [sys.executable, "-c", _DEMO_SPANS],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=True,
    )
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert [run["projects"] for run in runs] == [["agent-uncached"], ["agent-cached"]]
    for run in runs:
        assert run["projects"] == [run["service"]]
        assert run["stable"] > 0, "no httpx span with the stable HTTP attribute names"
        assert run["old"] == 0
