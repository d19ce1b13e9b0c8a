"""``gen_ai.memory.store.id``: ``instrument(store_id=)``, ``wrap(client, store_id=)``, or
``WM_MIDDLEWARE_STORE_ID``, else ``supermemory``; never a container tag or namespace.

Through the real SDK of the installed generation (3.x or 5.x), sync and async, against the
emulator, with the real OpenTelemetry SDK.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemoryInstrumentor
from wm_middleware._settings import Settings
from wm_middleware._telemetry import STORE_ID_ENV, Telemetry
from wm_middleware.emulator import EmulatorServer

from ..conftest import clean
from ..interception.conftest import KEY, TAG, Generation, done
from .conftest import Otel

STORE = "travel-assistant-memories"
ATTRIBUTE = "gen_ai.memory.store.id"


@pytest.fixture(scope="module")
def server(emulator_server: EmulatorServer) -> EmulatorServer:
    """tests/conftest.py's session emulator, clean, seeded for this module."""
    clean(emulator_server).seed(KEY, ["User likes green tea"], container_tag=TAG)
    return emulator_server


@pytest.fixture(scope="module")
def generation() -> Generation:
    return Generation(version("supermemory").split(".")[0])


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_ID_ENV, raising=False)


async def _search_and_add(generation: Generation, client: Any) -> None:
    await done(generation.search(client))
    await done(generation.add(client))


def _store_ids(otel: Otel) -> set[Any]:
    spans = otel.spans()
    assert {s.name for s in spans} == {"search_memory", "upsert_memory"}
    return {(s.attributes or {}).get(ATTRIBUTE) for s in spans}


async def test_instrument_store_id_names_the_store_on_every_span(
    server: EmulatorServer, otel: Otel, generation: Generation, mode: str
) -> None:
    wm_middleware.instrument(tracer_provider=otel.tracer_provider, store_id=STORE)

    await _search_and_add(generation, generation.client(mode, server.base_url))

    assert _store_ids(otel) == {STORE}
    assert TAG not in otel.exported_text()


async def test_wrap_store_id_names_the_copys_store(
    server: EmulatorServer, otel: Otel, generation: Generation, mode: str
) -> None:
    client = generation.client(mode, server.base_url)
    cached = wm_middleware.wrap(client, tracer_provider=otel.tracer_provider, store_id=STORE)

    await _search_and_add(generation, cached)

    assert _store_ids(otel) == {STORE}


async def test_the_environment_variable_is_read_when_instrumenting_not_at_import(
    server: EmulatorServer,
    otel: Otel,
    generation: Generation,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(STORE_ID_ENV, STORE)  # set after wm_middleware was imported
    WorkingMemoryInstrumentor().instrument(tracer_provider=otel.tracer_provider)  # as the loader

    await _search_and_add(generation, generation.client(mode, server.base_url))

    assert _store_ids(otel) == {STORE}


async def test_an_explicit_store_id_wins_over_the_environment(
    server: EmulatorServer,
    otel: Otel,
    generation: Generation,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(STORE_ID_ENV, "from-the-environment")
    cached = wm_middleware.wrap(
        generation.client("sync", server.base_url),
        tracer_provider=otel.tracer_provider,
        store_id=STORE,
    )

    await _search_and_add(generation, cached)

    assert _store_ids(otel) == {STORE}


async def test_without_a_store_id_spans_say_supermemory(
    server: EmulatorServer, otel: Otel, generation: Generation
) -> None:
    wm_middleware.instrument(tracer_provider=otel.tracer_provider)

    await _search_and_add(generation, generation.client("sync", server.base_url))

    assert _store_ids(otel) == {"supermemory"}


@pytest.mark.parametrize(
    ("bad", "error"), [("", ValueError), ("  ", ValueError), (42, TypeError)], ids=repr
)
@pytest.mark.parametrize("entry", ["instrument", "wrap"])
def test_a_bad_store_id_is_refused_at_the_call(
    server: EmulatorServer, generation: Generation, entry: str, bad: Any, error: type[Exception]
) -> None:
    client = generation.client("sync", server.base_url)
    call = {
        "instrument": lambda: wm_middleware.instrument(store_id=bad),
        "wrap": lambda: wm_middleware.wrap(client, store_id=bad),
    }[entry]

    with pytest.raises(error, match="store_id"):
        call()

    assert not WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry


def test_telemetry_follows_the_settings_it_is_given_and_reads_no_variable_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(STORE_ID_ENV, "from-the-environment")
    given = Settings.resolve({"store_id": STORE, "openinference": True, "trace_hits": False})
    telemetry = Telemetry(None, None, given)
    assert (telemetry.store_id, telemetry.openinference, telemetry.trace_hits) == (
        STORE,
        True,
        False,
    )
    # Settings resolved from an empty environment: the variable set above is not read.
    assert Telemetry(None, None, Settings.resolve({}, {})).store_id == "supermemory"
    assert Telemetry().store_id == "from-the-environment"  # by default, through Settings
