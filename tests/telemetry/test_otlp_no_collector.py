"""OTLP with no collector listening (issue 19 item 4): the README's snippet exits without a
long pause and says so in one line, over http/protobuf and over gRPC.

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
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otlp extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="the otlp extra")
supermemory = pytest.importorskip("supermemory")

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
