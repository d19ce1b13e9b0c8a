"""OTLP with no collector listening (issue 19 item 4): the README's snippet exits without a
long pause and says so in one line, over http/protobuf and over gRPC; a traces-only backend is
said once, for metrics.

Each case runs the snippet in a subprocess against the emulator, with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a loopback port nothing listens on. The generous
subprocess timeout only bounds the test; what is asserted is that it exited and what it printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otlp extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="the otlp extra")
supermemory = pytest.importorskip("supermemory")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceResponse,
)

from wm_middleware.emulator import EmulatorServer  # noqa: E402

from ..conftest import free_port  # noqa: E402
from ._loopback_http import QuietHandler, serving  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GENERATION = supermemory.__version__.split(".")[0]
SEARCH = {
    "3": 'client.search.memories(q="peanut allergy", container_tag="user-alex")',
    "5": 'client.search("user-alex", query="peanut allergy")',
}
PROGRAM = textwrap.dedent(
    f"""
    import os, sys
    sys.path.insert(0, os.environ["WM_TEST_REPO"])
    import wm_middleware
    from supermemory import Supermemory

    memory = wm_middleware.instrument(store_id="travel-assistant-memories")
    client = Supermemory(api_key="sk-test", base_url=os.environ["WM_TEST_BASE_URL"])
    {SEARCH[GENERATION]}
    wm_middleware.uninstrument()
    print("searched")
    """
)


def _run_snippet(endpoint: str, protocol: str) -> subprocess.CompletedProcess[str]:
    """The snippet against a fresh emulator, exporting to ``endpoint`` over ``protocol``."""
    with EmulatorServer() as server:
        env = {
            **os.environ,
            "WM_TEST_REPO": str(REPO),
            "WM_TEST_BASE_URL": server.base_url,
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        }
        env.pop("OTEL_SDK_DISABLED", None)
        return subprocess.run(
            [sys.executable, "-c", PROGRAM],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_no_collector_exits_promptly_with_one_line(protocol: str) -> None:
    closed = free_port()  # bound, then released: nothing listens there
    done = _run_snippet(f"http://127.0.0.1:{closed}", protocol)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "searched"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("wm_middleware: no OTLP collector at http://127.0.0.1:")
    assert f"over {protocol}" in line
    assert "said once" in line


class _TracesOnly(QuietHandler):
    """A traces-only backend: accepts /v1/traces, answers every metrics export with 405."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/traces":
            self.reply(
                200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf"
            )
        else:
            self.reply(405, b"method not allowed")


def test_a_traces_only_backend_is_said_once_for_metrics() -> None:
    with serving(_TracesOnly) as port:
        done = _run_snippet(f"http://127.0.0.1:{port}", "http/protobuf")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "did not accept metrics over http/protobuf" in lines[0]
