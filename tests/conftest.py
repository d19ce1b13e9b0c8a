"""Fixtures and helpers every test directory shares.

* The emulator: ``emulator_server`` (one real HTTP server on a free loopback port for the whole
  session), ``emulator`` (that server, clean, for one test), ``second_emulator_server`` /
  ``second_emulator`` (an independent second server, for tests that need two upstreams), and
  :func:`clean` for module-scoped fixtures that seed the session server themselves.
* :func:`free_port`: a free loopback TCP port.
* :func:`wait_until` (sync) and :func:`until` (async): poll a condition, bounded. A bound is a
  guard against a hang, never a timing assertion.
* :func:`holding`: an httpx client (an SDK's ``http_client=``) whose requests wait for a
  condition before they are sent: a leader's fetch held until every caller has joined it.
* The installed SDK generation: :data:`SDK_MAJOR`, the ``v3_only`` / ``v5_only`` marks,
  :func:`sdk_client`, the ``mode`` fixture (each test using it runs sync and async) and
  :func:`done` (a call's result, sync or awaited).
* :class:`FakeClock` and the ``clock`` fixture: a monotonic clock that moves when a test says so.
* :func:`answer_of`: what two answers to one question share, without the fields the server
  measures per request (:data:`PER_REQUEST_FIELDS`): compare answers of two requests with it.
* A fresh interpreter: :func:`python` (``python -c``, optionally under a launcher),
  :func:`opentelemetry_instrument` (the same under ``opentelemetry-instrument``) and
  :data:`SEARCH_TWICE` (program text for them).
* A forked child: :func:`in_forked_child` (``os.fork()`` or multiprocessing's fork context), its
  exit code awaited with a bound (a child that hangs is killed and the test fails).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported by the fixtures: tests that never start it need no server extra
    from wm_middleware.emulator import EmulatorServer

__all__ = [
    "PER_REQUEST_FIELDS",
    "SDK_MAJOR",
    "SEARCH_TWICE",
    "FakeClock",
    "answer_of",
    "clean",
    "done",
    "free_port",
    "holding",
    "in_forked_child",
    "opentelemetry_instrument",
    "python",
    "sdk_client",
    "until",
    "v3_only",
    "v5_only",
    "wait_until",
]

# -- the installed SDK generation ----------------------------------------------------------------

try:
    SDK_MAJOR = importlib.metadata.version("supermemory").split(".")[0]
    """``"3"`` or ``"5"``: the major version of the installed supermemory, ``""`` if none."""
except importlib.metadata.PackageNotFoundError:  # pragma: no cover
    SDK_MAJOR = ""

v3_only = pytest.mark.skipif(SDK_MAJOR != "3", reason="needs the supermemory 3.x SDK")
v5_only = pytest.mark.skipif(SDK_MAJOR != "5", reason="needs the supermemory 5.x SDK")


def sdk_client(mode: str, base_url: str, api_key: str, **options: Any) -> Any:
    """A client of the installed supermemory: ``Supermemory``, or ``AsyncSupermemory`` when
    ``mode`` is ``"async"``; ``options`` (``max_retries``, ``timeout``, ...) are passed on."""
    import supermemory

    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    cls = supermemory.AsyncSupermemory if mode == "async" else supermemory.Supermemory
    return cls(api_key=api_key, base_url=base_url, **options)


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    """Each test using it runs with the sync and with the async client."""
    return str(request.param)


async def done(value: Any) -> Any:
    """The result of a client call, sync or async."""
    return await value if inspect.isawaitable(value) else value


# -- answers -------------------------------------------------------------------------------------

PER_REQUEST_FIELDS = frozenset({"timing", "search_time", "searchTime"})
"""Fields the server measures for each request (the emulator's ``timing`` of a 3.x search and
``searchTime`` of a 5.x one, the SDK models' ``timing`` / ``search_time``): two requests for one
answer may differ in them by a millisecond, more on a loaded machine."""


def answer_of(value: Any) -> Any:
    """What two answers to one question share: ``value`` as plain data without
    :data:`PER_REQUEST_FIELDS` at any depth (a profile's search results carry their own).

    An SDK model is dumped (``model_dump``), an ``httpx.Response`` read as JSON, JSON text
    parsed; dicts, lists and tuples are walked. Compare an answer fetched again (uncached, after
    a refusal, by another process) with the first through it; a hit or a coalesced read is the
    stored answer itself and may be compared as it is.
    """
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    elif hasattr(value, "json") and hasattr(value, "status_code"):
        value = value.json()
    elif isinstance(value, (str, bytes)) and value[:1] in ("{", b"{", "[", b"["):
        value = json.loads(value)
    if isinstance(value, dict):
        return {k: answer_of(v) for k, v in value.items() if k not in PER_REQUEST_FIELDS}
    if isinstance(value, (list, tuple)):
        return [answer_of(v) for v in value]
    return value


# -- time ----------------------------------------------------------------------------------------


class FakeClock:
    """A monotonic clock that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# -- ports and polling ---------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` (loopback) at the time of the call."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def wait_until(
    predicate: Callable[[], object],
    limit: float = 20.0,
    *,
    what: str = "condition",
    interval: float = 0.005,
) -> None:
    """Return once ``predicate()`` is true; fail after ``limit`` seconds (a bound that a
    passing run never reaches, not a measurement)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {limit} s")
        time.sleep(interval)


async def until(
    condition: Callable[[], object],
    what: str = "condition",
    *,
    limit: float = 10.0,
    interval: float = 0.001,
) -> None:
    """Yield to the event loop until ``condition()`` holds; fail after ``limit`` seconds (a
    bound, not a measurement)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {limit} s")
        await asyncio.sleep(interval)


def holding(
    condition: Callable[[], object], mode: str, only: Callable[[Any], object] | None = None
) -> Any:
    """An ``httpx.Client`` (``mode="async"``: an ``httpx.AsyncClient``) for an SDK's
    ``http_client=``, whose every request (or every one ``only(request)`` picks) waits before it
    is sent until ``condition()`` holds (bounded as :func:`wait_until`): a leader's fetch held
    until every other caller has joined it, so that none of them can come after the answer
    however loaded the machine is."""
    import httpx

    def held(request: httpx.Request) -> bool:
        return only is None or bool(only(request))

    if mode == "async":

        async def ahold(request: httpx.Request) -> None:
            if held(request):
                await until(condition, "the request's condition", limit=20.0)

        return httpx.AsyncClient(event_hooks={"request": [ahold]})

    def hold(request: httpx.Request) -> None:
        if held(request):
            wait_until(condition, what="the request's condition")

    return httpx.Client(event_hooks={"request": [hold]})


# -- a fresh interpreter -------------------------------------------------------------------------

SEARCH_TWICE = """
import supermemory, sys
client = supermemory.Supermemory(api_key="sk-env", base_url=sys.argv[1], max_retries=0)
search = (
    (lambda: client.search.memories(q="tea", container_tag="user-1"))
    if supermemory.__version__.startswith("3.")
    else (lambda: client.search("user-1", query="tea"))
)
search()
search()
"""
"""Program text for :func:`python`: the same search twice, by a client of the installed SDK on
the base URL given as the first argument."""


def python(
    code: str, *args: str, env: dict[str, str] | None = None, launcher: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code *args`` in a fresh interpreter (run by ``launcher`` when given), with
    ``env`` (default: this process's); asserts it exited 0 and returns it."""
    command = [sys.executable, "-c", code, *args]
    run = subprocess.run(
        [str(launcher), *command] if launcher else command,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return run


def opentelemetry_instrument(
    code: str, *args: str, **variables: str
) -> subprocess.CompletedProcess[str]:
    """:func:`python` under ``opentelemetry-instrument`` (the test skips where it is not
    installed), exporting nothing, with no ``OTEL_*`` or ``WM_MIDDLEWARE_*`` variable of this
    process but ``variables``."""
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    if not launcher.exists():
        pytest.skip("opentelemetry-instrument is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WM_MIDDLEWARE_"))}
    env |= {
        **variables,
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    return python(code, *args, env=env, launcher=launcher)


# -- a forked child -------------------------------------------------------------------------------

FORKS = ["os.fork", "multiprocessing"]
"""How :func:`in_forked_child` forks: ``os.fork()`` itself, or multiprocessing's fork context
(Celery's prefork pool, ``multiprocessing`` on Linux by default)."""


def in_forked_child(child: Callable[[], int], how: str = "os.fork", limit: float = 60.0) -> int:
    """Run ``child()`` in a process forked from this one (``how``: one of :data:`FORKS`) and
    return its exit code: what ``child`` returned, 1 if it raised. A child still running after
    ``limit`` seconds (a bound that a passing run never reaches) is killed, and this fails."""

    def run() -> None:
        code = 1
        try:
            code = child()
        finally:
            os._exit(code)  # no test teardown, no atexit of the parent's, in the child

    if how == "multiprocessing":
        import multiprocessing

        process = multiprocessing.get_context("fork").Process(target=run, daemon=True)
        process.start()
        process.join(limit)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise AssertionError(f"the forked child still ran after {limit} s: killed")
        return process.exitcode
    if how != "os.fork":
        raise ValueError(f"how must be one of {FORKS}, got {how!r}")
    pid = os.fork()
    if pid == 0:
        run()
    deadline = time.monotonic() + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"the forked child still ran after {limit} s: killed")
        time.sleep(0.01)


# -- the emulator --------------------------------------------------------------------------------


def clean(server: EmulatorServer) -> EmulatorServer:
    """``server`` as a fresh one: no data, counts or faults, no latency, no indexing delay, and
    any API key accepted."""
    server.reset()
    server.set_latency(None)
    server.set_indexing_delay(0)
    server.api_keys = None
    return server


@pytest.fixture(scope="session")
def emulator_server() -> Iterator[EmulatorServer]:
    """One emulator on a free loopback port for the session; use ``emulator`` for a clean one
    per test, or :func:`clean` it in a module-scoped fixture."""
    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer(seed=3) as server:
        yield server


@pytest.fixture
def emulator(emulator_server: EmulatorServer) -> Iterator[EmulatorServer]:
    """The session's emulator with no data, counts, faults, latency or indexing delay; cleaned
    again after the test, so that no delay or fault outlives it."""
    yield clean(emulator_server)
    clean(emulator_server)


@pytest.fixture(scope="session")
def second_emulator_server() -> Iterator[EmulatorServer]:
    """A second, independent emulator for the session (two upstreams, two base URLs)."""
    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer(seed=4) as server:
        yield server


@pytest.fixture
def second_emulator(second_emulator_server: EmulatorServer) -> EmulatorServer:
    """The second emulator, clean."""
    return clean(second_emulator_server)
