"""The demo's telemetry through the real stack: ``wm-middleware demo`` exports over http/protobuf
and over gRPC into the collector; the traces are read back from Jaeger's query API, the series
from Prometheus (every query of the Grafana dashboard) and from Jaeger's Monitor API."""

from __future__ import annotations

import bisect
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack import MONITOR_OPERATION
from stack.services import COLLECTOR_CONFIG
from wm_middleware.semconv import CACHE_RESULT, SEARCH_MEMORY, WRITE_SPANS

from .conftest import SERVICES, STATUS_CHECK, StackRun, require_stack

require_stack()

TURN_SPAN = "invoke_agent"
REPO = Path(__file__).resolve().parents[2]


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span["tags"]}


def _parents(trace: dict[str, Any]) -> dict[str, str]:
    """Each span's parent (its CHILD_OF reference), by span id."""
    return {
        span["spanID"]: ref["spanID"]
        for span in trace["spans"]
        for ref in span.get("references") or []
        if ref["refType"] == "CHILD_OF"
    }


def _check_tree(trace: dict[str, Any]) -> None:
    """Every parent id resolves within the trace; the one root is the agent's turn."""
    spans = {span["spanID"]: span for span in trace["spans"]}
    parents = _parents(trace)
    unresolved = {child: parent for child, parent in parents.items() if parent not in spans}
    assert not unresolved, f"parents not in trace {trace['traceID']}: {unresolved}"
    roots = [span["operationName"] for span in spans.values() if span["spanID"] not in parents]
    assert len(roots) == 1, roots
    assert roots[0].startswith(TURN_SPAN), roots


def _in_turn(trace: dict[str, Any], span: dict[str, Any]) -> bool:
    spans = {s["spanID"]: s for s in trace["spans"]}
    parents = _parents(trace)
    current = span["spanID"]
    while current in parents:
        current = parents[current]
    return str(spans[current]["operationName"]).startswith(TURN_SPAN)


def test_both_agents_are_services_in_jaeger_and_jaeger_itself_is_not(stack_run: StackRun) -> None:
    assert stack_run.jaeger.services() == set(SERVICES)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_demo_delivered_every_span_over_each_protocol(
    stack_run: StackRun, protocol: str
) -> None:
    spans = stack_run.reports[protocol]["otlp_spans"]
    assert spans["delivered"] > 0
    assert spans["dropped"] == 0


@pytest.mark.parametrize(
    ("service", "results"),
    [("agent-cached", {"hit", "miss", "coalesced"}), ("agent-uncached", {"bypass"})],
)
def test_reads_carry_their_cache_result_inside_their_agent_turn(
    stack_run: StackRun, service: str, results: set[str]
) -> None:
    seen: set[str] = set()
    for trace in stack_run.jaeger.traces(service, operation=SEARCH_MEMORY):
        _check_tree(trace)
        for span in trace["spans"]:
            if span["operationName"] == SEARCH_MEMORY:
                seen.add(_tags(span)[CACHE_RESULT])
                assert _in_turn(trace, span)
    assert seen == results
    for result in results:  # each one found by its tag too, as the UI's search finds it
        tags = json.dumps({CACHE_RESULT: result})
        assert stack_run.jaeger.traces(service, operation=SEARCH_MEMORY, limit=5, tags=tags)


@pytest.mark.parametrize("service", SERVICES)
def test_writes_are_traced_inside_their_agent_turn(stack_run: StackRun, service: str) -> None:
    found = 0
    for operation in sorted(WRITE_SPANS):
        for trace in stack_run.jaeger.traces(service, operation=operation, limit=50):
            _check_tree(trace)
            writes = [s for s in trace["spans"] if s["operationName"] == operation]
            found += len(writes)
            assert all(_in_turn(trace, span) for span in writes)
    assert found


def _attributes(item: dict[str, Any]) -> dict[str, Any]:
    """An OTLP JSON span's or link's attributes, as plain values."""
    return {a["key"]: next(iter(a["value"].values())) for a in item.get("attributes", [])}


def test_status_checks_are_linked_to_the_write_they_follow(stack_run: StackRun) -> None:
    """Found by name and link, not by parent: a check may run inside the read that asked for
    it or on its own."""
    checks = stack_run.jaeger.otlp_spans("agent-cached", STATUS_CHECK)
    assert checks
    for check in checks:
        links = [
            link
            for link in check.get("links", [])
            if _attributes(link).get("wm.link") == "pending_write"
        ]
        assert links, check
        for link in links:
            write = stack_run.jaeger.otlp_span(link["traceId"], link["spanId"])
            assert write is not None, link
            assert write["name"] in WRITE_SPANS


def test_every_dashboard_query_had_data_for_both_jobs(stack_run: StackRun) -> None:
    dashboard = stack_run.observed.dashboard
    assert dashboard
    for query, jobs in dashboard.items():
        assert jobs == set(SERVICES), query


def _bucket(milliseconds: float) -> int:
    """The index of the spanmetrics histogram bucket ``milliseconds`` falls in."""
    config = yaml.safe_load(COLLECTOR_CONFIG.read_text(encoding="utf-8"))
    bounds = config["connectors"]["span_metrics"]["histogram"]["explicit"]["buckets"]
    units = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    in_ms = [float(b.rstrip("usm")) * units[b.lstrip("0123456789.")] for b in bounds]
    return bisect.bisect_left(in_ms, milliseconds)


def test_the_monitor_compares_the_demo_agents_turn_span() -> None:
    from wm_middleware.demo.agent import TURN_SPAN, run_agent

    agent = inspect.signature(run_agent).parameters["agent_name"].default
    assert f"{TURN_SPAN} {agent}" == MONITOR_OPERATION


def test_the_monitor_shows_the_cached_agents_turns_taking_less_time(
    stack_run: StackRun, record_testsuite_property: Callable[[str, object], None]
) -> None:
    """The Monitor API's p95 of the agent's turn (INTERNAL in both services): the cached one is
    lower, and each agrees with the p95 the demo reported over all its rounds within one bucket
    of the span-metrics histogram."""
    observed = stack_run.observed
    assert all(observed.calls[service] for service in SERVICES), observed.calls
    p95 = {service: observed.latencies[service] for service in SERVICES}
    cached, uncached = p95["agent-cached"], p95["agent-uncached"]
    assert cached is not None
    assert uncached is not None
    assert cached < uncached, (MONITOR_OPERATION, p95)
    runs = stack_run.reports["grpc"]["runs"]
    for name in ("cached", "uncached"):
        reported = runs[name]["all_rounds"]["turn_latency_ms"]["p95"]
        monitor = p95[runs[name]["service_name"]]
        assert monitor is not None
        assert abs(_bucket(monitor) - _bucket(reported)) <= 1, (name, monitor, reported)
        # In the session's JUnit report, for the docs' figures (not a timing assertion).
        record_testsuite_property(
            f"{name}_p95_turn_ms", f"monitor {monitor:.0f}, report {reported:.0f}"
        )


def test_the_p95_graph_link_shows_both_agents(stack_run: StackRun) -> None:
    assert set(stack_run.observed.graph) == set(SERVICES)
