"""One resolution for every setting: argument, then ``WM_MIDDLEWARE_*`` variable, then default.

The same for ``instrument()``, ``wrap()`` and the loader
(``WorkingMemoryInstrumentor().instrument()``), checked on what each builds (the working memory,
the runtime, the telemetry), not on a table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory, WorkingMemoryInstrumentor
from wm_middleware._runtime import Runtime
from wm_middleware._settings import OPTIONS, Settings, table
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse

from ..interception.conftest import Generation

DOCS = Path(__file__).parents[2] / "docs" / "configuration.md"

# field -> (a variable's text, the value it means, an argument value other than both)
SAMPLES: dict[str, tuple[str, Any, Any]] = {
    "cache": ("false", False, True),
    "max_entries": ("7", 7, 9),
    "ttl": ("2.5", 2.5, 5.0),
    "refresh_after": ("1.5", 1.5, 2.0),
    "shared": ("redis://127.0.0.1:1/0", "redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0"),
    "shared_secret": ("from-env", "from-env", b"from-arg"),
    "store_id": ("from-env", "from-env", "from-arg"),
    "freshness": ("off", False, True),
    "settle_interval": ("0.25", 0.25, 0.5),
    "settle_max": ("30", 30.0, 10.0),
    "openinference": ("yes", True, False),
    "trace_hits": ("0", False, True),
    "httpx": ("on", True, False),
    "semantic": ("Shadow", SemanticReuse(), SemanticReuse(min_similarity=0.95)),
}
BAD: dict[str, str] = {
    "cache": "maybe",
    "max_entries": "0",
    "ttl": "abc",
    "refresh_after": "-1",
    "shared": "http://cache:6379",
    "shared_secret": "",  # blank is unset; any other text is a secret
    "store_id": "",  # blank is unset, tested apart
    "freshness": "2",
    "settle_interval": "nan",
    "settle_max": "inf",
    "openinference": "sometimes",
    "trace_hits": "sometimes",
    "httpx": "2",
    "semantic": "serving",
}
VARIABLES = {option.field: option.variable for option in OPTIONS}
# field -> the arguments it is resolved beside: a secret is for a tier made from a URL
BESIDE: dict[str, dict[str, Any]] = {"shared_secret": {"shared": "redis://127.0.0.1:1/0"}}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for variable in VARIABLES.values():
        monkeypatch.delenv(variable, raising=False)
    wm_middleware.uninstrument()
    yield monkeypatch
    wm_middleware.uninstrument()


def test_the_table_is_the_settings_class() -> None:
    fields = {option.field for option in OPTIONS}
    assert set(Settings.__slots__) == fields == set(Settings.__annotations__)
    defaults = Settings.resolve({}, {})
    assert {name: getattr(defaults, name) for name in fields} == {
        option.field: option.default for option in OPTIONS
    }
    assert set(SAMPLES) == fields
    assert all(variable.startswith("WM_MIDDLEWARE_") for variable in VARIABLES.values())


def test_the_brief_defaults() -> None:
    assert Settings.resolve({}, {}) == Settings(
        cache=True,
        max_entries=100,
        ttl=60.0,
        refresh_after=None,
        shared=None,
        shared_secret=None,
        store_id=None,
        freshness=True,
        settle_interval=1.0,
        settle_max=60.0,
        openinference=False,
        trace_hits=True,
        httpx=False,
        semantic=None,
    )


def test_settings_are_read_only_and_equal_by_value() -> None:
    settings = Settings.resolve({"ttl": 5.0}, {})
    with pytest.raises(AttributeError, match="read-only"):
        settings.ttl = 6.0  # type: ignore[misc]
    assert settings == Settings.resolve({"ttl": 5.0}, {})
    assert hash(settings) == hash(Settings.resolve({"ttl": 5.0}, {}))
    assert settings.changes(Settings.resolve({}, {})) == {"ttl": (5.0, 60.0)}
    assert "ttl=5.0" in repr(settings)


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_argument_then_variable_then_default(field: str) -> None:
    text, meant, argument = SAMPLES[field]
    environ = {VARIABLES[field]: f"  {text} "}
    default = next(option.default for option in OPTIONS if option.field == field)
    beside = BESIDE.get(field, {})
    assert getattr(Settings.resolve(beside, {}), field) == default
    if field == "shared_secret":  # blank for a URL's tier: refused, never an unauthenticated tier
        with pytest.raises(ValueError, match="set but blank"):
            Settings.resolve(beside, {VARIABLES[field]: "  "})
    else:
        assert getattr(Settings.resolve(beside, {VARIABLES[field]: "  "}), field) == default
    assert getattr(Settings.resolve(beside, environ), field) == meant
    assert getattr(Settings.resolve({**beside, field: argument}, environ), field) == argument
    assert getattr(Settings.resolve({**beside, field: None}, environ), field) == meant


@pytest.mark.parametrize("field", sorted(set(BAD) - {"store_id", "shared_secret"}))
def test_a_bad_variable_is_a_value_error_naming_it_and_its_value(field: str) -> None:
    with pytest.raises(ValueError, match=VARIABLES[field]) as raised:
        Settings.resolve({}, {VARIABLES[field]: BAD[field]})
    assert repr(BAD[field]) in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_url_in_an_error_hides_its_password() -> None:
    with pytest.raises(ValueError, match="WM_MIDDLEWARE_SHARED_URL") as raised:
        Settings.resolve({}, {"WM_MIDDLEWARE_SHARED_URL": "http://user:s3cret@cache:6379"})
    assert "s3cret" not in str(raised.value)


def test_a_repr_of_the_settings_hides_a_urls_password() -> None:
    settings = Settings.resolve({"shared": "redis://app:s3cret@cache:6379/0"}, {})
    assert "shared='redis://app:***@cache:6379/0'" in repr(settings)
    assert "s3cret" not in repr(settings) + str(settings)


def test_a_repr_of_the_settings_shows_the_secret_as_stars_whatever_its_source() -> None:
    url = {"WM_MIDDLEWARE_SHARED_URL": "redis://cache:6379/0"}
    for settings in (
        Settings.resolve({"shared_secret": b"k3y"}, url),
        Settings.resolve({}, {**url, "WM_MIDDLEWARE_SHARED_SECRET": "k3y"}),
    ):
        assert "shared_secret='***'" in repr(settings)
        assert "k3y" not in repr(settings) + str(settings)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("cache", "no", TypeError),
        ("max_entries", 0, ValueError),
        ("max_entries", 2.0, TypeError),
        ("ttl", float("nan"), ValueError),
        ("ttl", True, TypeError),
        ("settle_interval", -1, ValueError),
        ("settle_max", "60", TypeError),
        ("store_id", " ", ValueError),
        ("shared", "http://cache", ValueError),
        ("shared", 6379, TypeError),
        ("shared_secret", "", ValueError),
        ("shared_secret", b"", ValueError),
        ("shared_secret", 1234, TypeError),
        ("openinference", 1, TypeError),
        ("semantic", "serving", ValueError),
        ("semantic", 0.9, TypeError),
    ],
)
def test_a_bad_argument_names_the_argument(field: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=re.escape(field)):
        Settings.resolve({field: value}, {})


def test_refresh_after_must_be_below_ttl_from_either_source() -> None:
    with pytest.raises(ValueError, match="WM_MIDDLEWARE_REFRESH_AFTER"):
        Settings.resolve({"ttl": 5.0}, {"WM_MIDDLEWARE_REFRESH_AFTER": "5"})


def test_settle_interval_must_not_exceed_settle_max() -> None:
    with pytest.raises(ValueError, match="settle_interval"):
        Settings.resolve({"settle_max": 0.5}, {"WM_MIDDLEWARE_SETTLE_INTERVAL": "2"})


# -- the three entry points read the environment the same way -------------------------------------
def _instrumented(**_: Any) -> WorkingMemory[Any]:
    memory = wm_middleware.instrument()
    assert WorkingMemoryInstrumentor().working_memory is memory
    return memory


def _loaded(**_: Any) -> WorkingMemory[Any]:
    WorkingMemoryInstrumentor().instrument()  # what opentelemetry-instrument calls
    memory = WorkingMemoryInstrumentor().working_memory
    assert memory is not None
    return memory


def _wrapped(*, client: Any) -> WorkingMemory[Any]:
    memory: WorkingMemory[Any] = wm_middleware.wrap(client).working_memory
    return memory


ENTRY_POINTS: dict[str, Callable[..., WorkingMemory[Any]]] = {
    "instrument": _instrumented,
    "loader": _loaded,
    "wrap": _wrapped,
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_entry_point_reads_the_memory_settings_from_the_environment(
    env: pytest.MonkeyPatch, emulator: EmulatorServer, generation: Generation, entry: str
) -> None:
    env.setenv("WM_MIDDLEWARE_MAX_ENTRIES", "7")
    env.setenv("WM_MIDDLEWARE_TTL", "2.5")
    env.setenv("WM_MIDDLEWARE_REFRESH_AFTER", "1.5")
    memory = ENTRY_POINTS[entry](client=generation.client("sync", emulator.base_url))
    assert (memory.max_entries, memory.ttl, memory.refresh_after) == (7, 2.5, 1.5)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
async def test_every_entry_point_turns_the_cache_off_by_environment(
    env: pytest.MonkeyPatch,
    emulator: EmulatorServer,
    generation: Generation,
    mode: str,
    entry: str,
) -> None:
    # Once a defect: a code call of instrument() ignored WM_MIDDLEWARE_CACHE=false (issue 19).
    env.setenv("WM_MIDDLEWARE_CACHE", "false")
    generation.seed(emulator)
    plain = generation.client(mode, emulator.base_url)
    memory = ENTRY_POINTS[entry](client=plain)
    client = plain if entry != "wrap" else wm_middleware.wrap(plain)
    for _ in range(3):
        result = generation.search(client)
        if mode == "async":
            await result
    assert generation.searches(emulator) == 3
    assert memory.stats().hits == 0


@pytest.mark.parametrize("entry", ["instrument", "wrap"])
@pytest.mark.parametrize("field", ["cache", "ttl", "settle_max", "trace_hits"])
def test_a_bad_variable_fails_a_code_call_naming_it(
    env: pytest.MonkeyPatch,
    emulator: EmulatorServer,
    generation: Generation,
    entry: str,
    field: str,
) -> None:
    env.setenv(VARIABLES[field], BAD[field])
    client = generation.client("sync", emulator.base_url)
    call = (lambda: wm_middleware.wrap(client)) if entry == "wrap" else wm_middleware.instrument
    with pytest.raises(ValueError, match=VARIABLES[field]):
        call()
    assert not WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry


def test_wrap_does_not_read_the_variable_of_instrument_alone(
    env: pytest.MonkeyPatch, emulator: EmulatorServer, generation: Generation
) -> None:
    env.setenv("WM_MIDDLEWARE_HTTPX", "2")
    assert wm_middleware.wrap(generation.client("sync", emulator.base_url)) is not None


def test_the_runtime_and_telemetry_get_every_setting_they_take(env: pytest.MonkeyPatch) -> None:
    env.setenv("WM_MIDDLEWARE_STORE_ID", "kb-prod")
    env.setenv("WM_MIDDLEWARE_TRACE_HITS", "false")
    env.setenv("WM_MIDDLEWARE_SETTLE_INTERVAL", "0.25")
    wm_middleware.instrument(cache=False, freshness=False, settle_max=30.0, openinference=True)
    runtime = WorkingMemoryInstrumentor().runtime
    assert isinstance(runtime, Runtime)
    assert runtime.cache is False
    assert runtime.telemetry.store_id == "kb-prod"
    assert runtime.telemetry.trace_hits is False
    freshness = runtime.freshness
    assert (freshness.enabled, freshness.interval, freshness.settle_max) == (False, 0.25, 30.0)
    assert runtime.telemetry.openinference is True


# -- keyword-only ---------------------------------------------------------------------------------
def test_options_given_by_position_are_refused_saying_they_are_keyword_only(
    emulator: EmulatorServer, generation: Generation
) -> None:
    client = generation.client("sync", emulator.base_url)
    with pytest.raises(TypeError, match="keyword only"):
        wm_middleware.wrap(client, 500)
    with pytest.raises(TypeError, match="keyword only"):
        wm_middleware.instrument(500)  # type: ignore[misc]
    assert not WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry


def test_the_signatures_show_every_option_as_keyword_only() -> None:
    import inspect

    for function, positional in ((wm_middleware.instrument, []), (wm_middleware.wrap, ["client"])):
        parameters = inspect.signature(function).parameters.values()
        assert [p.name for p in parameters if p.kind is not p.KEYWORD_ONLY] == positional
        names = {p.name for p in parameters}
        assert {option.field for option in OPTIONS} - {"httpx"} <= names


def test_a_setting_beside_a_given_memory_is_refused_not_ignored() -> None:
    with pytest.raises(ValueError, match="ttl"):
        wm_middleware.instrument(working_memory=WorkingMemory[Any](), ttl=5.0)


# -- the documentation ----------------------------------------------------------------------------
def test_docs_configuration_holds_the_settings_table_as_generated() -> None:
    regenerate = "from wm_middleware._settings import table; print(table(), end='')"
    assert table() in DOCS.read_text(encoding="utf-8"), f'regenerate: python -c "{regenerate}"'
