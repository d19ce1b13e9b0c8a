"""An explicit call's settings take effect; an identical call is quiet; errors say what to pass.

Issue 19, items 1 and 8: under ``opentelemetry-instrument``, or after a first ``instrument()``,
``instrument(ttl=5.0, ...)`` returned the first memory unchanged and logged nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory, WorkingMemoryInstrumentor
from wm_middleware._settings import OPTIONS
from wm_middleware.emulator import EmulatorServer

from ..conftest import SEARCH_TWICE, done, opentelemetry_instrument, python
from ..interception.conftest import Generation


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for option in OPTIONS:
        monkeypatch.delenv(option.variable, raising=False)
    wm_middleware.uninstrument()
    yield
    wm_middleware.uninstrument()


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name.startswith("wm_middleware")]


async def test_a_second_call_with_other_settings_re_instruments_with_them(
    clean: None,
    emulator: EmulatorServer,
    generation: Generation,
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    generation.seed(emulator)
    client = generation.client(mode, emulator.base_url)
    first = wm_middleware.instrument()
    with caplog.at_level(logging.DEBUG, logger="wm_middleware"):
        second = wm_middleware.instrument(ttl=5.0, max_entries=1000)
    assert second is not first
    assert (second.ttl, second.max_entries) == (5.0, 1000)
    assert WorkingMemoryInstrumentor().working_memory is second
    (line,) = [r for r in _records(caplog) if r.levelno >= logging.INFO]
    assert "ttl=5.0 (was 60.0)" in line.getMessage()
    assert "max_entries=1000 (was 100)" in line.getMessage()
    for _ in range(3):
        await done(generation.search(client))
    assert generation.searches(emulator) == 1  # patched once, by the new instrumentation
    assert (second.stats().lookups, first.stats().lookups) == (3, 0)


def test_an_identical_second_call_is_quiet_and_returns_the_same_memory(
    clean: None, caplog: pytest.LogCaptureFixture
) -> None:
    first = wm_middleware.instrument(ttl=5.0)
    with caplog.at_level(logging.DEBUG, logger="wm_middleware"):
        assert wm_middleware.instrument(ttl=5.0) is first
        assert WorkingMemoryInstrumentor().instrument(ttl=5.0) is first
    assert _records(caplog) == []


def test_a_call_that_matches_the_environment_is_identical(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WM_MIDDLEWARE_TTL", "5")
    first = wm_middleware.instrument()
    assert wm_middleware.instrument(ttl=5.0) is first


def test_the_re_instrument_line_hides_a_urls_password(
    clean: None, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("redis")
    wm_middleware.instrument(shared="redis://user:first-secret@127.0.0.1:1/0")
    with caplog.at_level(logging.INFO, logger="wm_middleware"):
        wm_middleware.instrument(shared="redis://user:second-secret@127.0.0.1:1/0")
    (line,) = [r.getMessage() for r in _records(caplog) if "instrumenting again" in r.getMessage()]
    assert "secret" not in line
    assert "shared='redis://user:***@127.0.0.1:1/0'" in line


def test_a_given_memory_replaces_the_active_one(clean: None) -> None:
    wm_middleware.instrument()
    mine = WorkingMemory[Any](ttl=3.0)
    assert wm_middleware.instrument(working_memory=mine) is mine
    assert WorkingMemoryInstrumentor().working_memory is mine


_APP = """
import json, sys
import supermemory
import wm_middleware
from wm_middleware import WorkingMemoryInstrumentor
loaded = WorkingMemoryInstrumentor().working_memory
memory = wm_middleware.instrument(ttl=5.0, max_entries=1000)
"""
_APP += SEARCH_TWICE  # the app's own settings, then its reads
_APP += """
print(json.dumps({
    "loaded": [loaded.ttl, loaded.max_entries] if loaded is not None else None,
    "memory": [memory.ttl, memory.max_entries],
    "current": WorkingMemoryInstrumentor().working_memory is memory,
    "hits": memory.stats().hits,
}))
"""


def test_under_opentelemetry_instrument_the_apps_own_settings_take_effect(
    emulator: EmulatorServer, generation: Generation
) -> None:
    generation.seed(emulator)
    run = opentelemetry_instrument(_APP, emulator.base_url)
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found == {"loaded": [60.0, 100], "memory": [5.0, 1000], "current": True, "hits": 1}
    assert generation.searches(emulator) == 1


# -- wrap(): what it takes, and cache=False -------------------------------------------------------
def test_wrap_of_an_unknown_object_names_what_it_takes() -> None:
    with pytest.raises(TypeError, match="Supermemory or AsyncSupermemory") as raised:
        wm_middleware.wrap(object())
    assert "not a object" in str(raised.value)


def test_wrap_of_a_client_class_says_to_pass_an_instance() -> None:
    import supermemory

    with pytest.raises(TypeError, match=r"instance, not the class Supermemory"):
        wm_middleware.wrap(supermemory.Supermemory)


async def test_wrap_cache_false_observes_without_caching(
    clean: None, emulator: EmulatorServer, generation: Generation, mode: str
) -> None:
    generation.seed(emulator)
    plain = generation.client(mode, emulator.base_url)
    copy = wm_middleware.wrap(plain, cache=False)
    for _ in range(3):
        await done(generation.search(copy))
    assert generation.searches(emulator) == 3
    assert copy.working_memory.stats().hits == 0
    cached = wm_middleware.wrap(plain)
    for _ in range(3):
        await done(generation.search(cached))
    assert generation.searches(emulator) == 4


# -- help() and dir() -----------------------------------------------------------------------------
def test_help_and_dir_show_the_lazily_loaded_names_without_importing_them() -> None:
    code = (
        "import sys, pydoc, wm_middleware\n"
        "names = ('RedisTier', 'CachingTransport', 'AsyncCachingTransport', 'configure_otlp')\n"
        "listed = all(name in dir(wm_middleware) for name in names)\n"
        "eager = 'redis' in sys.modules\n"
        "text = pydoc.render_doc(wm_middleware, renderer=pydoc.plaintext)\n"
        "print(listed, eager, all(name in text for name in names),"
        " 'WorkingMemoryInstrumentor().working_memory' in text)\n"
    )
    run = python(code)
    assert run.stdout.split() == ["True", "False", "True", "True"]


def test_help_works_without_the_optional_extras() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "import pydoc, wm_middleware\n"
        "text = pydoc.render_doc(wm_middleware, renderer=pydoc.plaintext)\n"
        "print('RedisTier' in text)\n"
    )
    run = python(code)
    assert run.stdout.split() == ["True"]  # named by the docstring
