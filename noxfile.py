"""Test sessions. The two supermemory SDK generations cannot share an environment.

python3 -m nox                  # lint, then the test-suite under SDK 3.x and under SDK 5.x
python3 -m nox -s tests-sdk3    # one of them, then the SDK's own test suite plain and instrumented
python3 -m nox -s tests-sdk3 -- tests/core -n 0   # a focused run, in one process
python3 -m nox -s docs          # the documentation site, mkdocs build --strict (CI runs it too)
python3 -m nox -s examples      # the LangGraph, pydantic-ai and OpenAI Agents SDK examples (CI too)
python3 -m nox -s phoenix       # opt-in: traces read back from a real Arize Phoenix on loopback
python3 -m nox -s stack         # the collector, Jaeger and Prometheus, built and run for real

Sessions run on the interpreter that runs nox when it is a supported one (3.11 or later), else
on the newest supported ``python3.X`` found on PATH. Environments are made and filled by ``uv``
when it is there (``pip install 'nox[uv]'``), else by virtualenv and pip. The suite runs in
:data:`WORKERS` pytest-xdist processes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests-sdk3", "tests-sdk5"]
nox.options.error_on_missing_interpreters = True
nox.options.default_venv_backend = "uv|virtualenv"

SUPPORTED = ("3.11", "3.12", "3.13", "3.14")


def _python() -> str | None:
    """The sessions' interpreter: ``None`` (nox's own) when supported, else one on PATH."""
    if sys.version_info >= (3, 11):  # noqa: UP036 -- nox itself may run on an older Python
        return None
    for version in reversed(SUPPORTED):
        if shutil.which(f"python{version}"):
            return version
    # None present: nox stops with "interpreter not found" (error_on_missing_interpreters).
    return SUPPORTED[0]


PYTHON = _python()
SDK3 = [
    "supermemory>=3.50,<4",
    "supermemory-openai-sdk>=1.0.10,<2",
    "supermemory-agent-framework>=1.0.3,<2",
    "supermemory-pipecat>=0.1.5,<1",
    "supermemory-cartesia>=0.1.5,<1",
]
SDK5 = [
    "supermemory>=5,<6",
    "supermemory-agent-framework>=2,<3",
]
# The SDK versions whose own test suites run plain and under instrument() (the same outcome
# both ways), and what those suites need beyond the project's test extra.
SDK3_SUITE = "3.62.0"
SDK5_SUITE = "5.0.1"
# pip: the runner downloads the sdist with it (an environment uv made has none).
SUITE_NEEDS = ["respx", "dirty-equals", "pip"]
# Three workers on two cores: much of a test's time is waiting (emulated latency, indexing
# delays, servers starting), which a third worker fills; more would have the tests that do compute
# (fresh interpreters, fleets of processes) wait for a core. Each worker has its own session
# servers (emulator, valkey-server, redis-server) and its own instrument() state. ``worksteal``:
# each worker takes a run of neighbouring tests (few module fixtures set up twice) and an idle
# worker takes over part of a busy one's. Arguments after ``--`` come later and win: ``-n 0`` runs
# in one process.
WORKERS = ["-n", "3", "--dist", "worksteal"]


def _suite(session: nox.Session) -> None:
    """The project's suite, in :data:`WORKERS` processes (or as the arguments after ``--`` say)."""
    session.run("pytest", "-q", *WORKERS, *session.posargs)


def _sdk_suite(session: nox.Session, pinned: str) -> None:
    """The SDK's own suite at ``pinned``, downloaded as an sdist, plain and instrumented at once."""
    session.install(f"supermemory=={pinned}", *SUITE_NEEDS)
    session.run("python", "tests/interception/sdk_suites.py", pinned, "--parallel")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (lint + format) on everything, mypy --strict on the package."""
    session.install("-e", ".[test,demo,otlp]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session(name="tests-sdk3", python=PYTHON)
def tests_sdk3(session: nox.Session) -> None:
    """The whole suite with supermemory 3.x and the integrations built on it."""
    session.install("-e", ".[test,demo,otlp]", *SDK3)
    _suite(session)
    if not session.posargs:  # a focused run (``nox -s tests-sdk3 -- tests/x``) skips the suite
        _sdk_suite(session, SDK3_SUITE)


@nox.session(name="tests-sdk5", python=PYTHON)
def tests_sdk5(session: nox.Session) -> None:
    """The whole suite with supermemory 5.x and supermemory-agent-framework 2.x."""
    session.install("-e", ".[test,server,otlp]", *SDK5)
    _suite(session)
    if not session.posargs:
        _sdk_suite(session, SDK5_SUITE)


# Each framework example's extra, on supermemory 5.x (what those extras install).
EXAMPLES = ".[test,langgraph,pydantic-ai,openai-agents]"


@nox.session(python=PYTHON)
def examples(session: nox.Session) -> None:
    """The framework examples, each run as a user would run it; the other examples and the
    pages' snippets run in the tests-sdk* sessions."""
    session.install("-e", EXAMPLES)
    # The examples, and the output samples of their pages (docs/langgraph.md, ...).
    tests = ["tests/demo/test_examples.py", "tests/test_readme.py"]
    chosen = ["-k", "langgraph or pydantic or openai"]
    session.run("pytest", "-q", *tests, *chosen, *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site from docs/ and mkdocs.yml: a warning (a broken link or anchor, a
    page missing from the nav) fails the build."""
    session.install("-e", ".[docs]")
    site = Path(session.create_tmp()) / "site"
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(site), env={"NO_MKDOCS_2_WARNING": "1"}
    )


# Phoenix and the SDK 3.x integrations pin incompatible FastAPI releases: the server gets an
# environment of its own, inside this session's directory.
PHOENIX = "arize-phoenix>=12,<30"


@nox.session(python=PYTHON)
def phoenix(session: nox.Session) -> None:
    """Opt-in: the demo and an instrument() app export to Arize Phoenix (started on loopback
    by the test) over http/protobuf and gRPC; the spans are read back from its REST API."""
    import os
    from pathlib import Path

    session.install("-e", ".[test,demo,otlp]", *SDK3[:2])
    server = Path(session.create_tmp()) / "phoenix-server"
    if not (server / "bin" / "phoenix").exists():
        session.run("python", "-m", "venv", "--clear", str(server))
        session.run(
            str(server / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            PHOENIX,
            external=True,
        )
    env = {
        "WM_TEST_PHOENIX": "1",
        "WM_TEST_PHOENIX_PYTHON": os.fspath(server / "bin" / "python"),
    }
    session.run("pytest", "-q", "tests/telemetry/test_phoenix.py", *session.posargs, env=env)


@nox.session(python=PYTHON)
def stack(session: nox.Session) -> None:
    """The observability stack for real: the collector and Jaeger built from ``stack/`` (Go,
    cached by their ``go.sum``), Prometheus from the system's package, all on loopback with the
    project's config files; the demo exports into it and the tests read traces and series back.
    A skipped test fails the session: here nothing may be left unchecked."""
    import xml.etree.ElementTree as ElementTree

    session.install("-e", ".[test,demo,otlp]")
    # The build first, on its own: a cold one takes minutes and says so here, not in a test.
    session.run("python", "-m", "stack", "build")
    report = Path(session.create_tmp()) / "stack-junit.xml"
    # The config files' own checks (tests/test_observability_stack.py) run in tests-sdk3/5.
    tests = ["tests/stack"]
    session.run(
        "pytest",
        "-q",
        "-rs",
        *tests,
        f"--junitxml={report}",
        *session.posargs,
        env={"WM_TEST_STACK": "1"},
    )
    skipped = [
        f"{case.get('classname')}.{case.get('name')}: {skip.get('message')}"
        for case in ElementTree.parse(report).iter("testcase")
        for skip in case.iter("skipped")
    ]
    if skipped:
        session.error(
            "skipped in the stack session (a skip is a failure here):\n" + "\n".join(skipped)
        )
