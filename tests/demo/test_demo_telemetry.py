"""What the demo traces and exports: GenAI operation names on the agent's spans, no query text
without the opt-in, an HTTP child span under every miss, ``--duration`` keeping both
deployments running, and a report of spans that never reached the collector."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
from typing import Any

import pytest

from ._run import run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)


@pytest.fixture(scope="module")
def demo() -> Any:
    from wm_middleware.demo.runner import DemoOptions, run_demo

    return asyncio.run(run_demo(DemoOptions(turns=2, latency_ms=2.0)))


def _attributes(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_agent_spans_carry_the_genai_operation_name(demo: Any) -> None:
    spans = demo.cached.spans
    turns = [s for s in spans if s.name.startswith("invoke_agent")]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert turns
    assert tools
    assert {_attributes(s)["gen_ai.operation.name"] for s in turns} == {"invoke_agent"}
    assert {_attributes(s)["gen_ai.operation.name"] for s in tools} == {"execute_tool"}


def test_no_query_text_on_any_span_without_the_opt_in(demo: Any) -> None:
    queries = {c.query for c in demo.cached.agent.calls if c.query}
    assert queries
    for span in demo.cached.spans + demo.uncached.spans:
        assert "demo.query" not in _attributes(span)
        exported = span.to_json()
        for query in queries:
            assert query not in exported, f"{query!r} exported on {span.name}"


def test_every_miss_that_fetches_has_an_http_child_span_and_no_hit_has_one(demo: Any) -> None:
    """A miss's request is a CLIENT span with the HTTP span under it; a miss of a settling scope
    answered from a copy (what it answered before an add, still true) makes no request: an
    INTERNAL span, marked settling, with no child."""
    from opentelemetry.trace import SpanKind

    spans = demo.cached.spans
    children: dict[int, list[Any]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    reads = [s for s in spans if s.name == "search_memory"]
    misses = [s for s in reads if _attributes(s)["wm.cache.result"] == "miss"]
    hits = [s for s in reads if _attributes(s)["wm.cache.result"] == "hit"]
    fetched = [s for s in misses if s.kind == SpanKind.CLIENT]
    assert fetched
    assert hits
    for miss in fetched:
        (http,) = children[miss.context.span_id]
        assert http.name.startswith("POST")
        assert _attributes(http).get("http.response.status_code", 200) == 200
    for miss in misses:
        if miss.kind != SpanKind.CLIENT:
            assert _attributes(miss)["wm.cache.settling"] is True
            assert miss.context.span_id not in children
    for hit in hits:
        assert hit.context.span_id not in children


def test_the_waterfall_still_names_each_calls_query(demo: Any) -> None:
    from wm_middleware.demo.report import waterfall_data

    data = waterfall_data(demo)
    assert data is not None
    assert any('"' in row.name for row in data.rows if row.label != "write")


def test_duration_keeps_both_deployments_running_and_reports_the_first_round() -> None:
    from ..telemetry._otlp_receiver import http_receiver

    # --duration is for a dashboard: it needs a collector to export to (else it is refused).
    with http_receiver() as (endpoint, received):
        result = run(
            "-m", "wm_middleware", "demo", "--turns", "1", "--latency-ms", "2", "--json",
            "--duration", "3s", "--otlp-endpoint", endpoint,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    services = {resource.get("service.name") for resource in received.resources}
    assert {"agent-uncached", "agent-cached"} <= services
    assert "/v1/metrics" in received.paths  # the collector takes metrics: they are sent
    summary = json.loads(result.stdout)
    assert summary["duration_s"] == 3.0
    assert summary["rounds"]["uncached"] >= 2
    assert summary["rounds"]["cached"] >= 2
    uncached, cached = summary["runs"]["uncached"], summary["runs"]["cached"]
    # The detailed figures are the first round's, comparable between the runs.
    assert uncached["upstream_requests"] == uncached["tool_calls"]
    assert cached["upstream_requests"] < uncached["upstream_requests"]
    assert "side by side" in result.stderr
    # Beside them, every round's latency: what a dashboard shows of the run.
    for name in ("uncached", "cached"):
        every = summary["runs"][name]["all_rounds"]
        assert every["rounds"] == summary["rounds"][name]
        for quantiles in (every["turn_latency_ms"], every["search_latency_ms"]):
            assert 0 < quantiles["p50"] <= quantiles["p95"] <= quantiles["p99"]


@pytest.mark.parametrize("text", ["0s", "2x", "-5", "25h"])
def test_duration_rejects_a_bad_value_with_a_usage_error(text: str) -> None:
    result = run("-m", "wm_middleware", "demo", "--duration", text)
    assert result.returncode == 2
    assert "--duration" in result.stderr
    assert "Traceback" not in result.stderr


def test_with_nothing_listening_the_demo_says_nothing_was_received_and_what_was_dropped() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    result = run(
        "-m", "wm_middleware", "demo", "--turns", "1", "--latency-ms", "0", "--json",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"no OTLP collector reachable at {endpoint}" in result.stderr
    assert "grpc" in result.stderr
    line = next(x for x in result.stderr.splitlines() if "nothing was received" in x)
    dropped = int(line.split(": ")[-1].split()[0])
    assert dropped > 0
    assert f"nothing was received at {endpoint}" in line


def test_an_unsupported_otlp_protocol_is_one_line_and_exit_2() -> None:
    result = run(
        "-m", "wm_middleware", "demo", "--turns", "1", "--otlp-endpoint", "http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/json",
    )  # fmt: skip
    assert result.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL" in result.stderr
    assert "Traceback" not in result.stderr
