"""Every example runs against the emulator (no key needed) and prints what it promises."""

from __future__ import annotations

import functools
import importlib.util
import re
import socket
import subprocess
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

FRAMEWORK = {  # the frameworks' own packages, from the extra of the same name
    "langgraph_agent": "langgraph",
    "pydantic_ai_agent": "pydantic_ai",
    "openai_agents": "agents",
}


def _needs(example: str) -> list[pytest.MarkDecorator]:
    """supermemory 5.x and the framework (``nox -s examples`` installs both)."""
    package = FRAMEWORK[example]
    missing = importlib.util.find_spec(package) is None
    return [SDK5, pytest.mark.skipif(missing, reason=f"needs {package} (nox -s examples)")]


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
    *(pytest.param(name, "cached: ", marks=_needs(name)) for name in FRAMEWORK),
]
FRAMEWORKS = [pytest.param(name, marks=_needs(name)) for name in FRAMEWORK]


def test_every_example_is_run_here() -> None:
    # A module with a leading underscore is what examples share, not an example.
    assert {param.values[0] for param in EXAMPLES} == {
        path.stem for path in (ROOT / "examples").glob("[!_]*.py")
    }


@pytest.mark.parametrize(("example", "expected"), EXAMPLES)
def test_example_runs_against_the_emulator(example: str, expected: str) -> None:
    result = ran_example(example)

    assert result.returncode == 0, result.stderr
    assert expected.format(endpoint=CLOSED) in result.stdout
    assert "using the emulator" in result.stdout


# Where the observability example's OTEL_EXPORTER_OTLP_ENDPOINT points: nothing listens there.
CLOSED = f"http://127.0.0.1:{_closed_port()}"


@functools.cache
def ran_example(example: str) -> subprocess.CompletedProcess[str]:
    """An example's one run of the test session (the framework examples take seconds); the
    observability example's standard OTLP endpoint variable is :data:`CLOSED`."""
    extra = {"OTEL_EXPORTER_OTLP_ENDPOINT": CLOSED} if example == "observability" else {}
    return run(f"examples/{example}.py", **extra)


def _printed(example: str) -> str:
    result = ran_example(example)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("example", FRAMEWORKS)
def test_framework_example_sends_fewer_upstream_requests_cached(example: str) -> None:
    printed = _printed(example)
    found = dict(re.findall(r"^(uncached|cached): (\d+) upstream requests", printed, re.M))
    seen = dict(re.findall(r"^(uncached|cached): .*first seen in turn (\d+)$", printed, re.M))

    assert int(found["cached"]) < int(found["uncached"]), printed
    # Written in turn 2, indexed a second later: no agent sees it before turn 3. Turns are further
    # apart than a settling copy is served (PAUSE), so the cached agent asks the API again each
    # turn and sees it no later than the uncached one.
    assert 3 <= int(seen["cached"]) <= int(seen["uncached"]), printed


@pytest.mark.parametrize("example", FRAMEWORKS)
def test_framework_example_coalesces_the_parallel_searches(example: str) -> None:
    stats = re.search(r"^  (\d+) hits, (\d+) misses, (\d+) coalesced$", _printed(example), re.M)

    assert stats is not None
    _, misses, coalesced = map(int, stats.groups())
    # Every turn's two parallel searches share one request. (No turn is a hit: the turns are
    # further apart than a settling copy is served, so each turn after the add asks the API.)
    assert misses > 0, stats.group(0)
    assert coalesced > 0, stats.group(0)


@pytest.mark.parametrize("example", [p for p in FRAMEWORKS if p.values[0] == "pydantic_ai_agent"])
def test_pydantic_ai_memory_spans_are_children_of_execute_tool(example: str) -> None:
    tree = _printed(example).split("the first turn's trace, cached:\n", 1)[1].splitlines()
    parents: list[str] = []  # the span names on the path to the current line
    nested = []
    for line in tree:
        depth = (len(line) - len(line.lstrip())) // 2
        name = line.strip()
        parents[depth - 1 :] = [name]
        if name.startswith("search_memory"):
            nested.append((parents[-2], name))  # (its parent, the span)

    # The two parallel tool calls of the first turn, each read under its own tool call: one
    # fetches, the other waits for that fetch (single-flight).
    assert [parent for parent, _ in nested] == ["execute_tool search_memories"] * 2, tree
    assert sorted(span for _, span in nested) == [
        "search_memory (coalesced)",
        "search_memory (miss)",
    ], tree
    assert tree[0].strip() == "invoke_agent agent"


@pytest.mark.parametrize("example", [p for p in FRAMEWORKS if p.values[0] == "openai_agents"])
def test_openai_agents_own_tracing_records_the_same_spans_cached(example: str) -> None:
    spans = dict(
        re.findall(r"^the Agents SDK's own trace spans, (\w+): (.+)$", _printed(example), re.M)
    )

    assert "function search_memories" in spans["cached"]
    assert spans["cached"] == spans["uncached"]
