"""A real trace backend (issue 20 item 7): Arize Phoenix on loopback receives the demo and an
``instrument()`` app over http/protobuf and gRPC; the spans are read back from its REST API.

Opt-in: runs only with ``WM_TEST_PHOENIX=1``, as the ``phoenix`` nox session does
(``nox -s phoenix``). Phoenix runs from ``WM_TEST_PHOENIX_PYTHON`` (an interpreter with
``arize-phoenix`` installed; the session gives it an environment of its own, since Phoenix and
the SDK 3.x integrations pin incompatible FastAPI releases), else from this interpreter.

Checked: every span the exporters delivered arrived, with its parent; reads are RETRIEVER
spans (OpenInference on) with their cache result; no API key on any span; no query text without
the content opt-in, and the query with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("WM_TEST_PHOENIX") != "1":
    pytest.skip("the Phoenix test is opt-in: nox -s phoenix", allow_module_level=True)
PHOENIX_PYTHON = os.environ.get("WM_TEST_PHOENIX_PYTHON") or sys.executable
if sys.executable == PHOENIX_PYTHON:
    pytest.importorskip("phoenix", reason="arize-phoenix (nox -s phoenix installs it)")
pytest.importorskip("supermemory_openai", reason="the demo needs supermemory 3.x")

from wm_middleware.emulator import EmulatorServer  # noqa: E402

from ..conftest import free_port  # noqa: E402
from ._server_process import log_tail, server_process  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-phoenix-KEY-MARKER-5c2a"
QUERY = "does alex still have the peanut allergy"
PROTOCOLS = ("http/protobuf", "grpc")
APP = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.environ["WM_TEST_REPO"])
    import supermemory
    import wm_middleware

    wm_middleware.instrument(store_id="phoenix-test")
    client = supermemory.Supermemory(api_key=os.environ["WM_TEST_KEY"],
                                     base_url=os.environ["WM_TEST_BASE_URL"], max_retries=0)
    for _ in range(2):  # a miss, then a hit
        client.search.memories(q=os.environ["WM_TEST_QUERY"], container_tag="user-alex")
    client.add(content="likes tea", container_tag="user-alex")
    wm_middleware.uninstrument()
    """
)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


class Phoenix:
    def __init__(self, http_port: int, grpc_port: int) -> None:
        self.base = f"http://127.0.0.1:{http_port}"
        self.endpoints = {"http/protobuf": self.base, "grpc": f"http://127.0.0.1:{grpc_port}"}

    def spans(self, project: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor = None
        for _ in range(100):  # pages of 1000: bounded
            query = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
            try:
                page = _get(f"{self.base}/v1/projects/{project}/spans?{query}")
            except urllib.error.HTTPError as error:
                if error.code == 404:  # no such project yet
                    return []
                raise
            found += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return found

    def wait_for(self, project: str, count: int) -> list[dict[str, Any]]:
        """The project's spans once ``count`` have arrived (ingestion is asynchronous)."""
        spans: list[dict[str, Any]] = []
        for _ in range(240):
            spans = self.spans(project)
            if len(spans) >= count:
                return spans
            time.sleep(0.5)
        raise AssertionError(f"{project}: {len(spans)} of {count} spans arrived")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    http_port, grpc_port = free_port(), free_port()
    work = tmp_path_factory.mktemp("phoenix")
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = work / "phoenix.log"
    argv = [PHOENIX_PYTHON, "-m", "phoenix.server.main", "serve"]
    with server_process(argv, log, env=env, stop_timeout=20) as process:
        server = Phoenix(http_port, grpc_port)
        for _ in range(360):  # up to 3 minutes on a busy machine
            assert process.poll() is None, log_tail(log, 3000)
            try:
                urllib.request.urlopen(f"{server.base}/healthz", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        else:
            raise AssertionError("Phoenix did not start")
        yield server


def _check_tree(spans: list[dict[str, Any]]) -> None:
    """Every parent arrived too (each span's parent is in the same project)."""
    ids = {span["context"]["span_id"] for span in spans}
    for span in spans:
        assert span["parent_id"] is None or span["parent_id"] in ids, span["name"]


def _no_secret(spans: list[dict[str, Any]], *secrets: str) -> None:
    text = json.dumps(spans)
    for secret in secrets:
        assert secret not in text


def _reads(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [span for span in spans if span["name"] == "search_memory"]


def _result(span: dict[str, Any]) -> str:
    """The cache result (Phoenix keeps OpenInference's span kind; the OpenTelemetry kind, CLIENT
    or INTERNAL, does not survive its storage, so it is checked in test_semconv_registry)."""
    return str(span["attributes"]["wm.cache.result"])


def test_the_demo_over_http_and_grpc(phoenix: Phoenix, monkeypatch: pytest.MonkeyPatch) -> None:
    from wm_middleware.demo.runner import DemoOptions, run_demo

    monkeypatch.setenv("WM_MIDDLEWARE_OPENINFERENCE", "true")
    expected = {"agent-cached": 0, "agent-uncached": 0}
    for protocol in PROTOCOLS:
        options = DemoOptions(
            turns=2,
            latency_ms=5.0,
            otlp_endpoint=phoenix.endpoints[protocol],
            otlp_protocol=protocol,
        )
        result = asyncio.run(run_demo(options))
        for run in (result.cached, result.uncached):
            assert run.otlp is not None
            assert run.otlp.dropped == 0
            assert run.otlp.delivered == run.spans_recorded
            expected[run.service_name] += run.otlp.delivered
    for project, count in expected.items():
        spans = phoenix.wait_for(project, count)
        assert len(spans) == count  # every span delivered, none twice
        _check_tree(spans)
        reads = _reads(spans)
        assert reads
        assert {span["span_kind"] for span in reads} == {"RETRIEVER"}
        results = {_result(span) for span in reads}
        if project == "agent-uncached":
            assert results == {"bypass"}
        else:
            assert {"hit", "miss"} <= results
        for span in reads:  # Phoenix flattens the metadata JSON into metadata.* attributes
            assert span["attributes"]["metadata.wm.cache.result"] == _result(span)
        http = [s for s in spans if "http.request.method" in s["attributes"]]
        assert http  # the stable HTTP names
        _no_secret(spans, "sk-")  # the demo's API key


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("capture", [False, True])
def test_an_instrumented_app(phoenix: Phoenix, protocol: str, capture: bool) -> None:
    project = f"app-{protocol.replace('/', '-')}-{'content' if capture else 'private'}"
    with EmulatorServer() as server:
        server.seed(API_KEY, ["User has a severe peanut allergy"], container_tag="user-alex")
        env = {
            **os.environ,
            "WM_TEST_REPO": str(REPO),
            "WM_TEST_KEY": API_KEY,
            "WM_TEST_BASE_URL": server.base_url,
            "WM_TEST_QUERY": QUERY,
            "WM_MIDDLEWARE_OPENINFERENCE": "true",
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.endpoints[protocol],
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true" if capture else "false",
        }
        done = subprocess.run(
            [sys.executable, "-c", APP], env=env, capture_output=True, text=True, timeout=180
        )
    assert done.returncode == 0, done.stderr
    assert "no OTLP collector" not in done.stderr
    spans = phoenix.wait_for(project, 3)
    assert sorted(span["name"] for span in spans) == [
        "search_memory",
        "search_memory",
        "upsert_memory",
    ]
    _check_tree(spans)
    reads = _reads(spans)
    assert sorted(_result(span) for span in reads) == ["hit", "miss"]
    assert {span["span_kind"] for span in reads} == {"RETRIEVER"}
    for span in spans:
        attributes = span["attributes"]
        assert attributes["gen_ai.provider.name"] == "supermemory"
        assert attributes["gen_ai.memory.store.id"] == "phoenix-test"
    _no_secret(spans, API_KEY)
    text = json.dumps(spans)
    if capture:
        assert QUERY in text
        assert all(span["attributes"]["gen_ai.memory.query.text"] == QUERY for span in reads)
    else:
        assert QUERY not in text
