"""A user's metric path (issue 20 item 6): the demo exports over OTLP to a real OTLP receiver,
what arrives is served as the collector's ``prometheus`` exporter would serve it, a real
``prometheus`` scrapes that, and every query of the Grafana dashboard returns data.

The receiver is ``_otlp_receiver.http_receiver`` (opentelemetry-proto decoding real OTLP/HTTP
requests); the exposition follows the collector's translation rules (``_prometheus_exposition``),
since no collector binary can be installed here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otlp extra")
yaml = pytest.importorskip("yaml")
if importlib.util.find_spec("supermemory_openai") is None:
    pytest.skip(
        "the demo needs supermemory 3.x and supermemory-openai-sdk", allow_module_level=True
    )

from ._otlp_receiver import Received, http_receiver  # noqa: E402
from ._prometheus_exposition import exposition, metric_name, serving  # noqa: E402
from ._prometheus_server import Prometheus, prometheus, scrape_job  # noqa: E402

DEMO_SECONDS = 10.0
"""The demo's traffic: what arrived stays served after it ends, and the dashboard's 30 s rate
windows hold its last samples for 30 s more, so the queries need not finish while it plays."""
JOBS = {"agent-cached", "agent-uncached"}


def _play(endpoint: str, failures: list[BaseException]) -> threading.Thread:
    from wm_middleware.demo.runner import DemoOptions, run_demo

    options = DemoOptions(
        turns=4,
        latency_ms=20.0,
        duration=DEMO_SECONDS,
        otlp_endpoint=endpoint,
        otlp_protocol="http/protobuf",
    )

    def play() -> None:
        try:
            asyncio.run(run_demo(options))
        except BaseException as error:
            failures.append(error)

    player = threading.Thread(target=play, name="demo-otlp", daemon=True)
    player.start()
    return player


def _arrived(received: Received) -> dict[str, Any]:
    return {metric.name: metric for _, metric in list(received.resource_metrics)}


def _check_what_arrived(received: Received) -> None:
    metrics = _arrived(received)
    for name in ("wm.cache.requests", "wm.search.duration", "gen_ai.client.operation.duration"):
        assert name in metrics, sorted(metrics)
    assert metrics["wm.search.duration"].unit == "s"
    histogram = metrics["gen_ai.client.operation.duration"].histogram
    assert list(histogram.data_points[0].explicit_bounds)[:2] == [0.00005, 0.0001]
    jobs = {str(resource.get("service.name")) for resource, _ in received.resource_metrics}
    assert jobs == JOBS


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = dict(_LABEL.findall(match.group(2) or ""))
            found.append((match.group(1), labels, float(match.group(3))))
    return found


def _one(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> None:
    matching = [
        got
        for metric, got, _ in samples
        if metric == name and all(got.get(k) == v for k, v in labels.items())
    ]
    assert matching, f"no {name} with {labels}"


def _check_exposition(text: str) -> None:
    """Names and labels as the collector's exporter writes them."""
    assert metric_name("wm.cache.requests", "{request}", True) == "wm_cache_requests_total"
    assert re.search(r"^# TYPE wm_cache_requests_total counter$", text, re.MULTILINE)
    assert re.search(
        r"^# TYPE gen_ai_client_operation_duration_seconds histogram$", text, re.MULTILINE
    )
    samples = _samples(text)
    _one(samples, "wm_cache_requests_total", job="agent-uncached", wm_cache_result="bypass")
    _one(
        samples,
        "wm_search_duration_seconds_bucket",
        job="agent-cached",
        le="5e-05",
        wm_cache_result="hit",
    )
    _one(
        samples,
        "gen_ai_client_operation_duration_seconds_count",
        job="agent-cached",
        gen_ai_operation_name="search_memory",
        gen_ai_provider_name="supermemory",
    )
    _one(samples, "wm_cache_size", job="agent-cached")
    _one(samples, "target_info", job="agent-cached", telemetry_sdk_language="python")
    for name, labels, _ in samples:
        assert "." not in name
        assert not [key for key in labels if "." in key]
        if name.startswith("gen_ai_client_operation_duration_seconds"):
            assert set(labels) - {"le", "job", "instance"} <= {
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "server_address",
                "server_port",
                "error_type",
            }, labels
            assert labels.get("server_port", "1").isdigit()


def test_dashboard_queries_over_the_otlp_path(tmp_path: Path) -> None:
    failures: list[BaseException] = []
    with http_receiver() as (endpoint, received), serving(received) as exporter_port:
        # honor_labels as examples/observability/prometheus.yml: the job is the service.name
        scrapes = [scrape_job("otel-collector", exporter_port, honor_labels=True)]
        with prometheus(tmp_path, scrapes) as server:
            player = _play(endpoint, failures)
            try:
                server.wait_for_dashboard_data()
                _check_jobs(server)
                _check_what_arrived(received)
                _check_exposition(exposition(received))
            finally:
                player.join(timeout=DEMO_SECONDS + 60)
    assert not failures, failures


def _check_jobs(server: Prometheus) -> None:
    assert server.jobs("sum by (job) (wm_cache_requests_total)") == JOBS
    bypass = 'sum by (job) (wm_cache_requests_total{wm_cache_result="bypass"})'
    assert server.jobs(bypass) == {"agent-uncached"}
    standard = (
        "histogram_quantile(0.5, sum by (job, le) "
        "(rate(gen_ai_client_operation_duration_seconds_bucket[30s])))"
    )
    assert server.jobs(standard) == JOBS
