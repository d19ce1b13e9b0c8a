"""The stack for this directory's tests: built, started, fed by the demo, read back.

Opt-in (``WM_TEST_STACK=1``, as ``nox -s stack`` sets it): the first build takes minutes. The
collector and Jaeger come from ``stack/`` (Go; a machine without it skips with one line, which
fails the ``stack`` session), Prometheus from Debian's package.

``stack_run`` starts the three programs on free loopback ports with the project's config files,
runs ``wm-middleware demo`` into the collector over http/protobuf (one round) and then over gRPC
with ``--duration``, and polls Prometheus and Jaeger's Monitor API until every dashboard query and
the Monitor's series have data for both services; then it stops the demo with Ctrl-C (SIGINT),
which prints the report of the run's first round. Nothing here sleeps for a fixed time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stack import MONITOR_KIND, MONITOR_OPERATION, P95_QUERY, GoNotFound, build_all, running
from stack.services import Stack, prometheus_binary

from ..telemetry._prometheus_server import (
    load_dashboard,
    panel_queries,
    substitute,
    variable_queries,
)

STACK_ENV = "WM_TEST_STACK"
SERVICES = ("agent-cached", "agent-uncached")
STATUS_CHECK = "wm.freshness.status_check"
# Generous bounds that a passing run never reaches; the loops poll for a condition.
DEMO_LIMIT = 600.0
DATA_LIMIT = 600.0
# Rounds of the gRPC demo's script the Monitor's quantile is computed over, at least.
ROUNDS = 10
DEMO_ARGS = ("--json", "--turns", "4", "--latency-ms", "20")


# The turn spans the span-metrics connector counted, by service (every run, every round).
COUNTED_TURNS = (
    f'sum by (service_name) (traces_span_metrics_calls_total{{span_name="{MONITOR_OPERATION}"}})'
)


def require_stack() -> None:
    """Skip the calling module unless the stack tests are asked for."""
    if os.environ.get(STACK_ENV) != "1":
        pytest.skip("the stack tests are opt-in: nox -s stack", allow_module_level=True)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def poll(check: Callable[[], str | None], limit: float, what: str) -> None:
    """Call ``check`` (``None`` once done, else what is still missing) until it is done; fail
    after ``limit`` seconds naming what was missing last."""
    deadline = time.monotonic() + limit
    missing = check()
    while missing is not None:
        assert time.monotonic() < deadline, f"{what}: still missing after {limit:g} s: {missing}"
        time.sleep(1)
        missing = check()


@dataclass
class Jaeger:
    """Jaeger's query API (what its UI reads) and Monitor API."""

    base: str

    def get(self, path: str, params: list[tuple[str, str]] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return get_json(f"{self.base}{path}{query}")

    def services(self) -> set[str]:
        return set(self.get("/api/services")["data"] or [])

    def traces(self, service: str, limit: int = 200, **search: str) -> list[dict[str, Any]]:
        """``/api/traces`` of ``service`` in the last hour (``operation=``, ``tags=`` narrow)."""
        params = [("service", service), ("limit", str(limit)), ("lookback", "1h")]
        traces: list[dict[str, Any]] = self.get("/api/traces", params + list(search.items()))[
            "data"
        ]
        return traces

    def otlp_spans(self, service: str, operation: str) -> list[dict[str, Any]]:
        """The spans named ``operation`` of ``service`` in the last hour, from
        ``/api/v3/traces`` (OTLP JSON, which keeps the links' attributes)."""
        now = datetime.now(UTC)
        params = [
            ("query.service_name", service),
            ("query.operation_name", operation),
            ("query.start_time_min", (now - timedelta(hours=1)).isoformat()),
            ("query.start_time_max", (now + timedelta(minutes=1)).isoformat()),
            ("query.num_traces", "100"),
        ]
        try:
            found = self.get("/api/v3/traces", params)
        except urllib.error.HTTPError as error:
            if error.code == 404:  # no trace matches
                return []
            raise
        return [span for span in _otlp(found) if span["name"] == operation]

    def otlp_span(self, trace_id: str, span_id: str) -> dict[str, Any] | None:
        """One span of ``/api/v3/traces/<trace_id>``, if Jaeger has it."""
        spans = _otlp(self.get(f"/api/v3/traces/{trace_id}"))
        return next((span for span in spans if span["spanId"] == span_id), None)

    def metrics(self, kind: str, service: str, **params: str) -> list[dict[str, Any]]:
        """``/api/metrics/<kind>`` of ``service`` for the Monitor's span kind, by operation."""
        query = [
            ("service", service),
            ("spanKind", MONITOR_KIND),
            ("groupByOperation", "true"),
            ("lookback", "900000"),
            ("step", "5000"),
            *params.items(),
        ]
        series: list[dict[str, Any]] = self.get(f"/api/metrics/{kind}", query)["metrics"]
        return series


def _otlp(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans of an OTLP JSON answer."""
    return [
        span
        for resource in answer["result"]["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def monitor_value(series: list[dict[str, Any]], operation: str) -> float | None:
    """The latest finite point of ``operation``'s series in a Monitor API answer."""
    for metric in series:
        labels = {label["name"]: label["value"] for label in metric["labels"]}
        if labels.get("operation") != operation:
            continue
        values = [
            point["gaugeValue"]["doubleValue"]
            for point in metric["metricPoints"]
            if isinstance(point.get("gaugeValue", {}).get("doubleValue"), int | float)
        ]
        if values:
            return float(values[-1])
    return None


def prometheus_query(stack: Stack, expr: str) -> list[dict[str, Any]]:
    data = get_json(f"{stack.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert data["status"] == "success", data
    result: list[dict[str, Any]] = data["data"]["result"]
    return result


def finite_by(stack: Stack, expr: str, label: str) -> dict[str, float]:
    """The finite values of an instant query, by ``label``."""
    found: dict[str, float] = {}
    for series in prometheus_query(stack, expr):
        value = float(series["value"][1])
        if value == value and abs(value) != float("inf"):
            found[series["metric"].get(label, "")] = value
    return found


@dataclass
class Observed:
    """What the stack showed at the last poll while the demo ran."""

    dashboard: dict[str, set[str]] = field(default_factory=dict)  # query -> jobs with data
    latencies: dict[str, float | None] = field(default_factory=dict)  # service -> p95 (ms)
    calls: dict[str, float | None] = field(default_factory=dict)  # service -> calls per second
    graph: dict[str, float] = field(default_factory=dict)  # service -> P95_QUERY (ms)
    turns: dict[str, float] = field(default_factory=dict)  # service -> turn spans counted
    status_checks: int = 0  # the cached agent's status-check spans in Jaeger

    def missing(self, rounds_of: dict[str, int]) -> str | None:
        gaps = [f"{q}: data for {sorted(j)}" for q, j in self.dashboard.items() if len(j) < 2]
        gaps += [f"Monitor latencies of {s}" for s, v in self.latencies.items() if v is None]
        gaps += [f"Monitor calls of {s}" for s, v in self.calls.items() if v is None]
        gaps += [f"p95 graph of {s}" for s in SERVICES if s not in self.graph]
        gaps += [
            f"{s}: {self.turns.get(s, 0):g} of {n} turns counted"
            for s, n in rounds_of.items()
            if self.turns.get(s, 0) < n
        ]
        if not self.status_checks:
            gaps.append("a status check of agent-cached in Jaeger")
        return "; ".join(gaps) or None


def observe(stack: Stack, jaeger: Jaeger) -> Observed:
    dashboard = load_dashboard()
    seen = Observed()
    for title, expr in panel_queries(dashboard) + variable_queries(dashboard):
        jobs = set(finite_by(stack, substitute(expr), "job")) & set(SERVICES)
        if title.startswith("variable"):  # label_values(): any series counts
            jobs = {s["metric"].get("job", "") for s in prometheus_query(stack, substitute(expr))}
        seen.dashboard[f"{title}: {expr}"] = jobs & set(SERVICES)
    for service in SERVICES:
        seen.latencies[service] = monitor_value(
            jaeger.metrics("latencies", service, quantile="0.95"), MONITOR_OPERATION
        )
        seen.calls[service] = monitor_value(jaeger.metrics("calls", service), MONITOR_OPERATION)
    seen.graph = finite_by(stack, P95_QUERY, "service_name")
    seen.turns = finite_by(stack, COUNTED_TURNS, "service_name")
    seen.status_checks = len(jaeger.traces("agent-cached", limit=1, operation=STATUS_CHECK))
    return seen


def _span_count(port: int, metric: str, label: str) -> int:
    """A span counter of a program's own metrics (``otelcol_<metric>``, with ``_total`` as
    Jaeger's collector release names it), summed over the series that carry ``label``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    pattern = re.compile(rf"^otelcol_{metric}(?:_total)?\{{([^}}]*)\}} (\S+)$", re.MULTILINE)
    return sum(int(float(value)) for labels, value in pattern.findall(text) if label in labels)


def wait_until_stored(stack: Stack, delivered: int) -> None:
    """Until Jaeger stored every span the demo delivered: the collector accepted them and sent
    them all on, and Jaeger's storage exporter wrote as many (its own metrics say so)."""

    def check() -> str | None:
        ports = stack.ports
        accepted = _span_count(ports.collector_metrics, "receiver_accepted_spans", 'receiver="')
        sent = _span_count(ports.collector_metrics, "exporter_sent_spans", "otlp_grpc/jaeger")
        stored = _span_count(ports.jaeger_metrics, "exporter_sent_spans", "jaeger_storage")
        if accepted >= delivered and accepted == sent == stored:
            return None
        return f"{delivered} delivered, {accepted} accepted, {sent} sent on, {stored} stored"

    poll(check, DATA_LIMIT, "every span in Jaeger")


@dataclass
class StackRun:
    stack: Stack
    jaeger: Jaeger
    reports: dict[str, dict[str, Any]]  # protocol -> the demo's --json report
    observed: Observed


def demo(stack: Stack, protocol: str, *extra: str) -> list[str]:
    """``wm-middleware demo`` exporting into the stack's collector over ``protocol``."""
    endpoint = stack.otlp_grpc if protocol == "grpc" else stack.otlp_http
    command = Path(sys.executable).with_name("wm-middleware")
    base = [str(command), "demo", "--otlp-endpoint", endpoint, "--otlp-protocol", protocol]
    return [*base, *DEMO_ARGS, *extra]


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    """The collector and Jaeger, built once (cached by their go.sum)."""
    try:
        prometheus_binary()
        built = build_all()
    except (GoNotFound, FileNotFoundError) as error:
        pytest.skip(str(error))
    return {name: b.path for name, b in built.items()}


@pytest.fixture(scope="session")
def stack_run(binaries: dict[str, Path]) -> Iterator[StackRun]:
    with running(binaries["otelcol-wm"], binaries["jaeger"], flush_interval="1s") as stack:
        jaeger = Jaeger(stack.jaeger)
        reports = {"http/protobuf": _one_round(stack)}
        reports["grpc"], observed = _rounds_until_observed(stack, jaeger, reports)
        wait_until_stored(stack, sum(r["otlp_spans"]["delivered"] for r in reports.values()))
        _final_latencies(stack, jaeger, reports, observed)
        yield StackRun(stack, jaeger, reports, observed)


def _final_latencies(
    stack: Stack, jaeger: Jaeger, reports: dict[str, dict[str, Any]], observed: Observed
) -> None:
    """The Monitor's p95 per turn once Prometheus has every turn of both demo runs, so that
    it covers the rounds the gRPC run's report does (``all_rounds``)."""
    one, every = reports["http/protobuf"]["runs"], reports["grpc"]["runs"]
    expected = {
        one[name]["service_name"]: len(one[name]["turns"])
        + every[name]["all_rounds"]["rounds"] * len(every[name]["turns"])
        for name in ("cached", "uncached")
    }

    def check() -> str | None:
        counted = finite_by(stack, COUNTED_TURNS, "service_name")
        # More once Ctrl-C cut a round short: its finished turns count here, not in the report.
        if all(counted.get(service, 0) >= n for service, n in expected.items()):
            return None
        return f"turns counted {counted}, expected {expected}"

    poll(check, DATA_LIMIT, "every turn in Prometheus")
    for service in SERVICES:
        series = jaeger.metrics("latencies", service, quantile="0.95")
        observed.latencies[service] = monitor_value(series, MONITOR_OPERATION)


def _one_round(stack: Stack) -> dict[str, Any]:
    done = subprocess.run(
        demo(stack, "http/protobuf"), capture_output=True, text=True, timeout=DEMO_LIMIT
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _rounds_until_observed(
    stack: Stack, jaeger: Jaeger, reports: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], Observed]:
    """The gRPC demo replaying its script until the stack shows everything (or the bound),
    then stopped with Ctrl-C: its report (of the first round) and the last observation."""
    runs = reports["http/protobuf"]["runs"]
    rounds_of = {
        runs[name]["service_name"]: ROUNDS * len(runs[name]["turns"])
        for name in ("cached", "uncached")
    }
    process = subprocess.Popen(
        demo(stack, "grpc", "--duration", "1h"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C must reach it even where this process was started ignoring SIGINT (a
        # background job), which a child would inherit.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    observed = Observed()
    try:

        def check() -> str | None:
            nonlocal observed
            assert process.poll() is None, process.communicate()[1]
            observed = observe(stack, jaeger)
            return observed.missing(rounds_of)

        poll(check, DATA_LIMIT, "the demo's data in Prometheus and the Monitor API")
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: the report of the first round
        out, err = process.communicate(timeout=DEMO_LIMIT)
    assert process.returncode == 130, err  # interrupted, as the demo says after Ctrl-C
    report: dict[str, Any] = json.loads(out)
    return report, observed
