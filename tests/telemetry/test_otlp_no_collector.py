"""OTLP with no collector listening (issue 19 item 4): the README's snippet exits without a
long pause and says so in one line, over http/protobuf and over gRPC; a traces-only backend is
said once, for metrics.

Each case runs the snippet in a subprocess against the emulator, with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a loopback port nothing listens on. The generous
subprocess timeout only bounds the test; what is asserted is that it exited and what it printed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otlp extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="the otlp extra")
supermemory = pytest.importorskip("supermemory")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceResponse,
)

from wm_middleware.emulator import EmulatorServer  # noqa: E402

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


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_no_collector_exits_promptly_with_one_line(protocol: str) -> None:
    with EmulatorServer() as server:
        env = {
            **os.environ,
            "WM_TEST_REPO": str(REPO),
            "WM_TEST_BASE_URL": server.base_url,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        }
        env.pop("OTEL_SDK_DISABLED", None)
        done = subprocess.run(
            [sys.executable, "-c", PROGRAM],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "searched"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("wm_middleware: no OTLP collector at http://127.0.0.1:")
    assert f"over {protocol}" in line
    assert "said once" in line


class _TracesOnly(BaseHTTPRequestHandler):
    """A traces-only backend: accepts /v1/traces, answers every metrics export with 405."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/traces":
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
        else:
            body = b"method not allowed"
            self.send_response(405)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_traces_only_backend_is_said_once_for_metrics() -> None:
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _TracesOnly)
    thread = threading.Thread(target=backend.serve_forever, daemon=True)
    thread.start()
    try:
        with EmulatorServer() as server:
            env = {
                **os.environ,
                "WM_TEST_REPO": str(REPO),
                "WM_TEST_BASE_URL": server.base_url,
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{backend.server_address[1]}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            }
            done = subprocess.run(
                [sys.executable, "-c", PROGRAM],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        backend.shutdown()
        backend.server_close()
        thread.join(10)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "did not accept metrics over http/protobuf" in lines[0]
