"""``wm-middleware`` / ``python -m wm_middleware``: demo, serve, help and argument errors."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time

import httpx
import pytest

from ._run import ROOT, environment, run

needs_tools = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)


@needs_tools
def test_demo_json_summary_shows_the_cached_run_sending_fewer_requests() -> None:
    result = run("-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "5", "--json")

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    uncached, cached = summary["runs"]["uncached"], summary["runs"]["cached"]
    assert summary["target"] == "emulator"
    assert uncached["searches"] == cached["searches"] > 0
    assert uncached["errors"] == cached["errors"] == []
    # Uncached: every search and the add reach the emulator, recorded as bypass.
    assert uncached["upstream_requests"] == uncached["tool_calls"]
    assert uncached["cache"]["bypass"] == uncached["searches"]
    # Cached: hits and coalesced reads never reach it.
    assert cached["cache"]["hits"] > 0
    assert cached["cache"]["coalesced"] > 0
    assert cached["cache"]["invalidations"] > 0  # the add_memory in the middle
    assert cached["upstream_requests"] == cached["cache"]["misses"] + 1  # + the add
    assert summary["requests_saved"] == uncached["upstream_requests"] - cached["upstream_requests"]
    repeated_turn = cached["turns"][0]
    assert repeated_turn["upstream_requests"] == 2  # 10 repeats -> 1, plus one other query
    assert {"p50", "p95", "p99"} <= set(cached["search_latency_ms"])
    assert [r["service_name"] for r in (uncached, cached)] == ["agent-uncached", "agent-cached"]


@needs_tools
def test_demo_text_mode_prints_the_table_and_a_labelled_waterfall() -> None:
    result = run("-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "5")

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "upstream requests" in out
    assert "per-search latency p95" in out
    assert "Requests saved:" in out
    assert "Trace of cached turn 2" in out
    for label in ("hit", "miss", "coalesced", "write"):
        assert f" {label} " in out


@needs_tools
def test_demo_with_unreachable_collector_says_so_and_still_runs() -> None:
    port = _free_port()
    result = run(
        "-m",
        "wm_middleware",
        "demo",
        "--turns",
        "1",
        "--latency-ms",
        "0",
        "--json",
        "--otlp-endpoint",
        f"http://127.0.0.1:{port}",
    )

    assert result.returncode == 0, result.stderr
    assert "no OTLP collector reachable" in result.stderr
    assert json.loads(result.stdout)["otlp_endpoint"] is None


def test_help_lists_the_commands() -> None:
    result = run("-m", "wm_middleware", "--help")

    assert result.returncode == 0
    assert "demo" in result.stdout
    assert "serve" in result.stdout


def test_demo_help_lists_its_options() -> None:
    result = run("-m", "wm_middleware", "demo", "--help")

    assert result.returncode == 0
    for option in (
        "--turns",
        "--latency-ms",
        "--json",
        "--otlp-endpoint",
        "--api-key",
        "--base-url",
    ):
        assert option in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["demo", "--turns", "0"], "--turns: must be at least 1"),
        (["demo", "--turns", "many"], "--turns: expected a whole number"),
        (["demo", "--latency-ms", "-5"], "--latency-ms: must be between"),
        (["demo", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["serve", "--port", "70000"], "--port: must be between"),
        (["dance"], "invalid choice: 'dance'"),
        ([], "the following arguments are required"),
    ],
)
def test_a_bad_argument_is_a_clear_error_with_exit_code_2(args: list[str], message: str) -> None:
    result = run("-m", "wm_middleware", *args)

    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_runs_the_emulator_until_terminated() -> None:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "wm_middleware", "serve", "--port", str(port), "--demo-data"],
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()[1]
            try:
                if httpx.get(f"{base}/_emulator/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the emulator did not come up"
            time.sleep(0.1)

        response = httpx.post(
            f"{base}/v4/search",
            json={"q": "peanut allergy", "containerTag": "user-alex"},
            headers={"Authorization": "Bearer sk-wm-demo"},
        )

        assert response.status_code == 200
        assert any("peanut" in r["memory"] for r in response.json()["results"])
        assert httpx.get(f"{base}/_emulator/stats").json()["total"] == 1
    finally:
        process.terminate()
        process.communicate(timeout=10)
    assert process.returncode is not None
