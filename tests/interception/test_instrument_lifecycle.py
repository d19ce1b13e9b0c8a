"""instrument() / uninstrument(): thread-safe, reversible by identity, configured without surprises.

Runs under either SDK generation: the patched attributes are those of the installed supermemory.
Configuration from ``WM_MIDDLEWARE_*`` is read only for settings not passed; a bad value is a
``ValueError`` naming the variable from a code call, and one log line naming it, never a
traceback, under the real ``opentelemetry-instrument``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory, WorkingMemoryInstrumentor
from wm_middleware.emulator import EmulatorServer

from ..conftest import SEARCH_TWICE, opentelemetry_instrument
from .conftest import Generation, done

SDK_MAJOR = version("supermemory").split(".")[0]
ENV = {
    "WM_MIDDLEWARE_MAX_ENTRIES": "0",
    "WM_MIDDLEWARE_TTL": "abc",
    "WM_MIDDLEWARE_CACHE": "maybe",
    "WM_MIDDLEWARE_TRACE_HITS": "sometimes",
    "WM_MIDDLEWARE_HTTPX": "2",
    "WM_MIDDLEWARE_SHARED_URL": "http://cache:6379",
}


def _patched_attributes() -> dict[str, Any]:
    """``name -> the object in the owner's __dict__`` for every attribute instrument() patches."""
    owners: list[tuple[Any, tuple[str, ...]]] = []
    if SDK_MAJOR == "3":
        import supermemory._base_client as base_client

        owners = [
            (base_client.SyncAPIClient, ("request",)),
            (base_client.AsyncAPIClient, ("request",)),
        ]
    else:
        import supermemory.client as client
        import supermemory.core.http_client as http_client

        owners = [
            (client.Supermemory, ("search", "profile", "list")),
            (client.AsyncSupermemory, ("search", "profile", "list")),
            (http_client.HttpClient, ("request",)),
            (http_client.AsyncHttpClient, ("request",)),
        ]
    found: dict[str, Any] = {}
    for owner, names in owners:
        for name in names:
            found[f"{owner.__qualname__}.{name}"] = vars(owner)[name]
    return found


@pytest.fixture
def originals() -> Iterator[dict[str, Any]]:
    wm_middleware.uninstrument()
    before = _patched_attributes()
    yield before
    wm_middleware.uninstrument()
    assert _patched_attributes() == before


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _one_layer(before: dict[str, Any]) -> None:
    during = _patched_attributes()
    for name, original in before.items():
        assert during[name] is not original, name
        assert during[name].__wrapped__ is original, name  # wrapped exactly once


# -- threads --------------------------------------------------------------------------------------
def test_concurrent_instrument_and_uninstrument_leave_a_consistent_state(
    originals: dict[str, Any],
) -> None:
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        try:
            barrier.wait()
            for _ in range(40):
                if rng.random() < 0.5:
                    wm_middleware.instrument()
                else:
                    wm_middleware.uninstrument()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    if WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry:
        _one_layer(originals)
    wm_middleware.uninstrument()
    after = _patched_attributes()
    assert all(after[name] is original for name, original in originals.items())


def test_concurrent_instrument_calls_patch_once_and_share_one_memory(
    originals: dict[str, Any],
) -> None:
    barrier = threading.Barrier(8)
    memories: list[WorkingMemory[Any]] = []

    def instrument() -> None:
        barrier.wait()
        memories.append(wm_middleware.instrument())

    threads = [threading.Thread(target=instrument) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(memories) == 8
    assert all(memory is memories[0] for memory in memories)
    _one_layer(originals)


async def test_instrument_twice_is_harmless_and_uninstrument_sends_calls_upstream(
    originals: dict[str, Any], emulator: EmulatorServer, generation: Generation, mode: str
) -> None:
    generation.seed(emulator)
    client = generation.client(mode, emulator.base_url)
    memory = wm_middleware.instrument()
    assert wm_middleware.instrument() is memory
    _one_layer(originals)
    for _ in range(5):
        await done(generation.search(client))
    assert generation.searches(emulator) == 1
    assert memory.stats().lookups == 5
    wm_middleware.uninstrument()
    assert _patched_attributes() == originals
    for _ in range(2):
        await done(generation.search(client))
    assert generation.searches(emulator) == 3


# -- environment ----------------------------------------------------------------------------------
MEMORY_VARIABLES = ("WM_MIDDLEWARE_MAX_ENTRIES", "WM_MIDDLEWARE_SHARED_URL", "WM_MIDDLEWARE_TTL")


@pytest.mark.parametrize("variable", MEMORY_VARIABLES)
def test_a_given_memory_covers_the_variables_of_the_memory(
    originals: dict[str, Any], clean_env: pytest.MonkeyPatch, variable: str
) -> None:
    clean_env.setenv(variable, ENV[variable])
    mine = WorkingMemory[Any](ttl=5)
    assert wm_middleware.instrument(working_memory=mine) is mine
    _one_layer(originals)


@pytest.mark.parametrize("variable", sorted(set(ENV) - set(MEMORY_VARIABLES)))
def test_a_bad_variable_fails_a_code_call_naming_it(
    originals: dict[str, Any], clean_env: pytest.MonkeyPatch, variable: str
) -> None:
    # Once a defect: a code call ignored WM_MIDDLEWARE_CACHE and the others (issue 19, item 2).
    clean_env.setenv(variable, ENV[variable])
    with pytest.raises(ValueError, match=variable) as raised:
        wm_middleware.instrument(working_memory=WorkingMemory[Any](ttl=5))
    assert repr(ENV[variable]) in str(raised.value)
    assert not WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry
    assert _patched_attributes() == originals


def _instrumentor_runtime(
    env: pytest.MonkeyPatch, variables: dict[str, str], **options: Any
) -> Any:
    """The instrumentor's runtime after ``instrument(**options)`` with ``variables`` set."""
    for name, value in variables.items():
        env.setenv(name, value)
    WorkingMemoryInstrumentor().instrument(**options)
    runtime = WorkingMemoryInstrumentor().runtime
    assert runtime is not None
    return runtime


def test_the_instrumentor_reads_only_the_variables_it_was_not_given(
    originals: dict[str, Any], clean_env: pytest.MonkeyPatch
) -> None:
    # Bad values (ENV's) of the two settings passed; a good one of a setting not passed.
    given = {name: ENV[name] for name in ("WM_MIDDLEWARE_TTL", "WM_MIDDLEWARE_MAX_ENTRIES")}
    variables = given | {"WM_MIDDLEWARE_CACHE": "false"}
    runtime = _instrumentor_runtime(
        clean_env, variables, ttl=5.0, max_entries=7, skip_dep_check=True
    )
    assert (runtime.memory.ttl, runtime.memory.max_entries) == (5.0, 7)
    assert runtime.cache is False  # not passed: read from the environment


def test_good_variables_configure_the_loader_path(
    originals: dict[str, Any], clean_env: pytest.MonkeyPatch
) -> None:
    variables = {
        "WM_MIDDLEWARE_TTL": "2.5",
        "WM_MIDDLEWARE_MAX_ENTRIES": "9",
        "WM_MIDDLEWARE_TRACE_HITS": "off",
    }
    runtime = _instrumentor_runtime(clean_env, variables)
    assert (runtime.memory.ttl, runtime.memory.max_entries) == (2.5, 9)
    assert runtime.telemetry.trace_hits is False
    _one_layer(originals)


@pytest.mark.parametrize("variable", sorted(ENV))
def test_a_bad_variable_on_the_loader_path_is_one_line_and_no_patch(
    originals: dict[str, Any],
    clean_env: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    variable: str,
) -> None:
    clean_env.setenv(variable, ENV[variable])
    with caplog.at_level(logging.DEBUG, logger="wm_middleware"):
        assert WorkingMemoryInstrumentor().instrument() is None
    records = [r for r in caplog.records if r.name.startswith("wm_middleware")]
    assert len(records) == 1
    (record,) = records
    assert record.levelno == logging.ERROR
    assert record.exc_info is None
    assert variable in record.getMessage()
    assert repr(ENV[variable]) in record.getMessage()
    assert "\n" not in record.getMessage()
    assert not WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry
    assert _patched_attributes() == originals


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_ttl_that_is_not_a_positive_finite_number_is_refused(
    originals: dict[str, Any], clean_env: pytest.MonkeyPatch, value: str
) -> None:
    clean_env.setenv("WM_MIDDLEWARE_TTL", value)
    WorkingMemoryInstrumentor().instrument()
    assert not WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry


_APP = (
    SEARCH_TWICE
    + """
from wm_middleware import WorkingMemoryInstrumentor
print("instrumented" if WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry else "plain")
"""
)


@pytest.mark.parametrize("ttl", ["abc", "30"])
def test_opentelemetry_instrument_with_a_bad_variable_runs_uncached_after_one_line(
    emulator: EmulatorServer, ttl: str
) -> None:
    done = opentelemetry_instrument(_APP, emulator.base_url, WM_MIDDLEWARE_TTL=ttl)
    search = "/v4/search" if SDK_MAJOR == "3" else "/ns/user-1/search"
    if ttl == "abc":
        assert done.stdout.strip() == "plain"
        assert "Traceback" not in done.stderr
        lines = [line for line in done.stderr.splitlines() if "WM_MIDDLEWARE_TTL" in line]
        assert len(lines) == 1
        assert emulator.count("POST", search) == 2
    else:
        assert done.stdout.strip() == "instrumented", done.stderr
        assert emulator.count("POST", search) == 1
