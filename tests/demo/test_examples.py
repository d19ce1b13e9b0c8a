"""Every example runs against the emulator (no key needed) and prints what it promises."""

from __future__ import annotations

import importlib.util
import socket
from importlib.metadata import PackageNotFoundError, version

import pytest

from ._run import ROOT, run


def _supermemory_major() -> int | None:
    try:
        return int(version("supermemory").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SDK3 = pytest.mark.skipif(_supermemory_major() != 3, reason="needs supermemory 3.x")
SDK5 = pytest.mark.skipif(_supermemory_major() != 5, reason="needs supermemory 5.x")
OPENAI_SDK = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None, reason="needs supermemory-openai-sdk"
)
AGENT_FRAMEWORK = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_agent_framework") is None,
    reason="needs supermemory-agent-framework",
)


EXAMPLES = [
    pytest.param("quickstart", "CacheStats(hits=1, misses=1", marks=SDK3),
    pytest.param(
        "openai_tools", "CacheStats(hits=1, misses=3, coalesced=1", marks=[SDK3, OPENAI_SDK]
    ),
    pytest.param("agent_framework", "turn 2: context", marks=[SDK5, AGENT_FRAMEWORK]),
    pytest.param("explicit_wrap", "search after add: 2 results", marks=SDK3),
    pytest.param("httpx_transport", "CacheStats(hits=1, misses=1", marks=[]),
    # It reads the standard OTEL_EXPORTER_OTLP_ENDPOINT (set to a closed port by the test).
    pytest.param("observability", "no OTLP collector accepted an export at {endpoint}", marks=SDK3),
]


def test_every_example_is_run_here() -> None:
    assert {param.values[0] for param in EXAMPLES} == {
        path.stem for path in (ROOT / "examples").glob("*.py")
    }


@pytest.mark.parametrize(("example", "expected"), EXAMPLES)
def test_example_runs_against_the_emulator(example: str, expected: str) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"

    result = run(f"examples/{example}.py", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)

    assert result.returncode == 0, result.stderr
    assert expected.format(endpoint=endpoint) in result.stdout
    assert "using the emulator" in result.stdout
