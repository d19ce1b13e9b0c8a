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
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otlp extra")
yaml = pytest.importorskip("yaml")
if importlib.util.find_spec("supermemory_openai") is None:
    pytest.skip(
        "the demo needs supermemory 3.x and supermemory-openai-sdk", allow_module_level=True
    )

from ..test_observability_stack import (  # noqa: E402
    _free_port,
    _has_finite_sample,
    _load_dashboard,
    _panel_queries,
    _query,
    _substitute,
    _variable_queries,
)
from ._otlp_receiver import Received, http_receiver  # noqa: E402
from ._prometheus_exposition import exposition, metric_name, serving  # noqa: E402

DEMO_SECONDS = 35.0
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
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no `prometheus` binary (CI installs it: apt-get install -y prometheus)")
    failures: list[BaseException] = []
    with http_receiver() as (endpoint, received), serving(received) as exporter_port:
        player = _play(endpoint, failures)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "otel-collector",
                    "honor_labels": True,  # as examples/observability/prometheus.yml
                    "scrape_interval": "1s",
                    "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
                }
            ],
        }
        config_file = tmp_path / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        log = (tmp_path / "prometheus.log").open("wb")
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _run_queries(base, process, tmp_path)
            _check_what_arrived(received)
            _check_exposition(exposition(received))
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            log.close()
            player.join(timeout=DEMO_SECONDS + 60)
    assert not failures, failures


def _run_queries(base: str, process: subprocess.Popen[bytes], tmp_path: Path) -> None:
    dashboard = _load_dashboard()
    pending = dict.fromkeys(_panel_queries(dashboard) + _variable_queries(dashboard), "not run")
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-4000:]
        for title, expr in list(pending):
            try:
                result = _query(base, _substitute(expr))
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                pending[(title, expr)] = f"prometheus not answering: {error}"
                continue
            if result and _has_finite_sample(result):
                del pending[(title, expr)]
            else:
                pending[(title, expr)] = f"result {result}"
        if pending:
            time.sleep(1)
    assert not pending, "queries without data:\n" + "\n".join(
        f"- {title}: {expr}\n  {why}" for (title, expr), why in pending.items()
    )
    jobs = {s["metric"]["job"] for s in _query(base, "sum by (job) (wm_cache_requests_total)")}
    assert jobs == JOBS
    bypass = _query(base, 'sum by (job) (wm_cache_requests_total{wm_cache_result="bypass"})')
    assert {s["metric"]["job"] for s in bypass} == {"agent-uncached"}
    standard = _query(
        base,
        "histogram_quantile(0.5, sum by (job, le) "
        "(rate(gen_ai_client_operation_duration_seconds_bucket[30s])))",
    )
    assert {s["metric"]["job"] for s in standard} == JOBS
