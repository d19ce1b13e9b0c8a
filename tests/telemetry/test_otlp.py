"""One call to see it in Jaeger: OTLP export over HTTP/protobuf and gRPC, checked over the wire.

Loopback OTLP receivers (``_otlp_receiver``: ``http.server`` for HTTP, a ``grpc`` server for
gRPC, on 127.0.0.1) decode what arrives with opentelemetry-proto. Global providers can be set
once per process, so each case runs a small program in a subprocess: it instruments, calls the
emulator started here, and exits. Nothing forces an export before exit (batch delay and metric
interval are seconds away), so what the receiver gets proves the flush at exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otlp extra")
if not pytest.importorskip("supermemory").__version__.startswith("3."):
    pytest.skip("drives the supermemory 3.x API", allow_module_level=True)

from wm_middleware.emulator import EmulatorServer

from ..conftest import clean
from ._otlp_receiver import Received, attributes_of, http_receiver
from ._otlp_receiver import grpc_receiver as grpc_otlp_receiver

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-otlp-KEY-MARKER-9d1e"
TAG = "user-1"

# The program under test. ``WM_TEST_MODE``: "endpoint" passes otlp_endpoint=; "env" relies on
# OTEL_EXPORTER_OTLP_ENDPOINT; "app" configures its own SDK providers first.
PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.environ["WM_TEST_REPO"])
    mode = os.environ["WM_TEST_MODE"]
    app = None
    if mode == "app":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        app = TracerProvider()
        app.add_span_processor(SimpleSpanProcessor(exporter))
        app_meter = MeterProvider(metric_readers=[reader])
        trace.set_tracer_provider(app)
        metrics.set_meter_provider(app_meter)
    if mode == "no-extra":
        for name in ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                     "opentelemetry.exporter.otlp.proto.http.metric_exporter"):
            sys.modules[name] = None  # as if the otlp extra were not installed
    import supermemory
    import wm_middleware
    from opentelemetry import metrics, trace
    if mode == "endpoint":
        wm_middleware.instrument(otlp_endpoint=os.environ["WM_TEST_ENDPOINT"])
    elif mode != "auto":  # "auto": opentelemetry-instrument already instrumented the process
        wm_middleware.instrument()
    client = supermemory.Supermemory(
        api_key=os.environ["WM_TEST_KEY"], base_url=os.environ["WM_TEST_BASE_URL"], max_retries=0
    )
    for _ in range(3):
        client.search.memories(q="peanut", container_tag="user-1")
    client.profile(container_tag="user-1")
    report = {
        "tracer_provider": type(trace.get_tracer_provider()).__module__,
        "meter_provider": type(metrics.get_meter_provider()).__module__,
    }
    if app is not None:
        report["kept"] = trace.get_tracer_provider() is app and (
            metrics.get_meter_provider() is app_meter
        )
        report["app_spans"] = [dict(s.attributes) for s in exporter.get_finished_spans()]
    print(json.dumps(report))
    """
)


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    with http_receiver() as running:
        yield running


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    pytest.importorskip("grpc", reason="the otlp extra installs grpcio")
    with grpc_otlp_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def emulator(emulator_server: EmulatorServer) -> EmulatorServer:
    """tests/conftest.py's session emulator, clean, seeded for this module."""
    clean(emulator_server).seed(API_KEY, ["User has a severe peanut allergy"], container_tag=TAG)
    return emulator_server


def run_program(
    emulator: EmulatorServer, mode: str, launcher: list[str] | None = None, **env: str
) -> dict[str, Any]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "WM_MIDDLEWARE_"))
    }
    environment.update(
        WM_TEST_REPO=str(REPO),
        WM_TEST_MODE=mode,
        WM_TEST_KEY=API_KEY,
        WM_TEST_BASE_URL=emulator.base_url,
        **env,
    )
    done = subprocess.run(
        [*(launcher or []), sys.executable, "-c", PROGRAM],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _points(received: Received, name: str) -> list[Any]:
    points = []
    for metric in received.metrics.get(name, []):
        data = getattr(metric, metric.WhichOneof("data"))
        points.extend(data.data_points)
    return points


def _check_export(received: Received, service: str) -> None:
    reads = [s for s in received.spans if s["name"] == "search_memory"]
    assert [(s["supermemory.operation"], s["wm.cache.result"]) for s in reads] == [
        ("search.memories", "miss"),
        ("search.memories", "hit"),
        ("search.memories", "hit"),
        ("profile", "miss"),
    ]
    for span in reads:
        assert span["gen_ai.operation.name"] == "search_memory"
        assert span["gen_ai.provider.name"] == "supermemory"
        assert span["server.address"] == "127.0.0.1"
    requests = {
        (
            attributes_of(p.attributes)["wm.cache.result"],
            attributes_of(p.attributes)["supermemory.operation"],
        ): (p.as_int)
        for p in _points(received, "wm.cache.requests")
    }
    assert requests == {
        ("miss", "search.memories"): 1,
        ("hit", "search.memories"): 2,
        ("miss", "profile"): 1,
    }
    durations = _points(received, "wm.search.duration")
    assert durations
    assert list(durations[0].explicit_bounds)[:2] == [0.00005, 0.0001]
    assert {"wm.cache.size", "wm.cache.evictions", "wm.cache.invalidations"} <= set(
        received.metrics
    )
    assert {r.get("service.name") for r in received.resources} == {service}
    assert b"KEY-MARKER" not in received.raw
    assert b"peanut" not in received.raw  # the query is not exported by default


@dataclass(frozen=True)
class Export:
    """One way of asking for OTLP export, and where it must arrive."""

    receiver: str  # the fixture: "receiver" (HTTP) or "grpc_receiver"
    given: str  # "endpoint": otlp_endpoint=; "env": OTEL_EXPORTER_OTLP_ENDPOINT alone
    service: str  # OTEL_SERVICE_NAME
    paths: frozenset[str]  # what the receiver was called on
    variables: dict[str, str] = field(default_factory=dict)


HTTP_PATHS = frozenset({"/v1/traces", "/v1/metrics"})
GRPC_PATHS = frozenset({"grpc traces", "grpc metrics"})
EXPORTS = {
    "otlp_endpoint argument": Export("receiver", "endpoint", "agent-under-test", HTTP_PATHS),
    "OTEL_EXPORTER_OTLP_ENDPOINT alone": Export("receiver", "env", "agent-from-env", HTTP_PATHS),
    "grpc protocol from the environment": Export(
        "grpc_receiver",
        "endpoint",
        "agent-over-grpc",
        GRPC_PATHS,
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    ),
    "protocol per signal wins over the general variable": Export(
        "grpc_receiver",
        "env",
        "agent-per-signal",
        GRPC_PATHS,
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
        },
    ),
}


@pytest.mark.parametrize("export", EXPORTS.values(), ids=list(EXPORTS))
def test_instrument_exports_spans_and_metrics_flushed_at_exit(
    emulator: EmulatorServer, request: pytest.FixtureRequest, export: Export
) -> None:
    endpoint, received = request.getfixturevalue(export.receiver)
    variable = "WM_TEST_ENDPOINT" if export.given == "endpoint" else "OTEL_EXPORTER_OTLP_ENDPOINT"
    report = run_program(
        emulator,
        export.given,
        **{variable: endpoint},
        **export.variables,
        OTEL_SERVICE_NAME=export.service,
    )
    assert report["tracer_provider"].startswith("opentelemetry.sdk")
    assert report["meter_provider"].startswith("opentelemetry.sdk")
    assert set(received.paths) == export.paths
    _check_export(received, export.service)


def test_service_name_from_otel_resource_attributes_is_honoured(
    emulator: EmulatorServer, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    run_program(
        emulator,
        "endpoint",
        WM_TEST_ENDPOINT=endpoint,
        OTEL_RESOURCE_ATTRIBUTES="service.name=agent-from-attributes,team=memory",
    )
    assert {r.get("service.name") for r in received.resources} == {"agent-from-attributes"}
    assert {r.get("team") for r in received.resources} == {"memory"}


def test_an_app_that_configured_its_own_providers_keeps_them(
    emulator: EmulatorServer, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    report = run_program(emulator, "app", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert report["kept"] is True
    # instrument() without providers used the global (the app's) ones...
    results = [s["wm.cache.result"] for s in report["app_spans"]]
    assert results == ["miss", "hit", "hit", "miss"]
    # ...and exported nothing on its own.
    assert received.paths == []


def test_otlp_variable_without_the_otlp_extra_does_not_break_instrument(
    emulator: EmulatorServer, receiver: tuple[str, Received]
) -> None:
    """An OTLP endpoint set for some other SDK must not make ``instrument()`` raise."""
    endpoint, received = receiver
    report = run_program(emulator, "no-extra", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert not report["tracer_provider"].startswith("opentelemetry.sdk")
    assert received.paths == []


def test_opentelemetry_instrument_with_the_distro_at_its_defaults_exports_over_grpc(
    emulator: EmulatorServer, grpc_receiver: tuple[str, Received]
) -> None:
    """``opentelemetry-instrument`` + ``opentelemetry-distro``: OTLP over gRPC by default."""
    pytest.importorskip("opentelemetry.distro", reason="opentelemetry-distro is not installed")
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    if not launcher.exists():
        pytest.skip("no opentelemetry-instrument next to this interpreter")
    endpoint, received = grpc_receiver
    run_program(
        emulator,
        "auto",
        launcher=[str(launcher)],
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_SERVICE_NAME="agent-auto",
        OTEL_METRIC_EXPORT_INTERVAL="500",
        # Only this library's instrumentor, so the check sees exactly its spans.
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="httpx,requests,urllib,urllib3,asyncio,threading",
    )
    reads = [s for s in received.spans if s["name"] == "search_memory"]
    assert [s["wm.cache.result"] for s in reads] == ["miss", "hit", "hit", "miss"]
    assert {r.get("service.name") for r in received.resources} == {"agent-auto"}
    assert b"peanut" not in received.raw


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_probe_is_a_real_export_and_tells_a_wrong_protocol_from_a_collector(
    receiver: tuple[str, Received], grpc_receiver: tuple[str, Received], protocol: str
) -> None:
    from wm_middleware._telemetry.otlp import probe

    http_endpoint, _ = receiver
    grpc_endpoint, _ = grpc_receiver
    right, wrong = (
        (grpc_endpoint, http_endpoint)
        if protocol == "grpc"
        else (
            http_endpoint,
            grpc_endpoint,
        )
    )
    assert probe(right, protocol, timeout=2.0) is None
    # Something accepts TCP connections there, but it does not speak this protocol.
    problem = probe(wrong, protocol, timeout=1.0)
    assert problem is not None
    assert protocol in problem


def test_probe_with_nothing_listening_says_so() -> None:
    import socket

    from wm_middleware._telemetry.otlp import probe

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    problem = probe(f"http://127.0.0.1:{port}", "http/protobuf", timeout=1.0)
    assert problem is not None
    assert f"127.0.0.1:{port}" in problem


def test_unsupported_protocol_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from wm_middleware._telemetry.otlp import configure_otlp, otlp_protocol

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        otlp_protocol("traces")
    with pytest.raises(ValueError, match="grpc, http/protobuf"):
        configure_otlp("http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", " GRPC ")
    assert otlp_protocol("metrics") == "grpc"


# -- examples/observability.py: the protocol of the environment, reachability by a real export ---
def _observability_example(**env: str) -> subprocess.CompletedProcess[str]:
    from ..demo._run import run

    return run("examples/observability.py", OTEL_SERVICE_NAME="observability-example", **env)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_observability_example_exports_over_the_protocol_of_the_environment(
    receiver: tuple[str, Received], grpc_receiver: tuple[str, Received], protocol: str
) -> None:
    endpoint, received = grpc_receiver if protocol == "grpc" else receiver

    result = _observability_example(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol
    )

    assert result.returncode == 0, result.stderr
    assert f"exporting traces and metrics to {endpoint} over {protocol}" in result.stdout
    reads = [s["wm.cache.result"] for s in received.spans if s["name"] == "search_memory"]
    assert reads == ["miss", "hit", "hit", "hit", "hit", "miss"]
    assert {r.get("service.name") for r in received.resources} == {"observability-example"}


def test_observability_example_judges_a_collector_by_an_export_not_a_tcp_connect(
    receiver: tuple[str, Received],
) -> None:
    http_endpoint, received = receiver  # accepts TCP connections, but speaks no gRPC

    result = _observability_example(
        OTEL_EXPORTER_OTLP_ENDPOINT=http_endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
    )

    assert result.returncode == 0, result.stderr
    assert f"no OTLP collector accepted an export at {http_endpoint} over grpc" in result.stdout
    assert "exporting traces" not in result.stdout
    assert "CacheStats(hits=4, misses=2" in result.stdout
    assert received.spans == []


def test_observability_example_refuses_an_unsupported_protocol_in_one_line() -> None:
    result = _observability_example(OTEL_EXPORTER_OTLP_PROTOCOL="http/json")

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "observability.py: OTLP protocol must be one of grpc, http/protobuf, got 'http/json' "
        "(from OTEL_EXPORTER_OTLP_PROTOCOL or the protocol argument)"
    ]
