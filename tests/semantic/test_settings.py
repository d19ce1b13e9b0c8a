"""What ``semantic=`` and ``WM_MIDDLEWARE_SEMANTIC`` accept, through instrument() and wrap()."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import wm_middleware
from wm_middleware._instrumentor import INSTRUMENTATION
from wm_middleware._settings import Settings
from wm_middleware.semantic import SemanticReuse

from ..interception.conftest import Generation
from ..interception.conftest import generation as generation  # a fixture

VARIABLE = "WM_MIDDLEWARE_SEMANTIC"


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(VARIABLE, raising=False)
    yield
    wm_middleware.uninstrument()


def shadow_of_instrument(**options: Any) -> SemanticReuse | None:
    wm_middleware.instrument(**options)
    runtime = INSTRUMENTATION.runtime()
    assert runtime is not None
    return None if runtime.near is None else runtime.near.semantic


@pytest.mark.parametrize(
    ("value", "on"),
    [("shadow", True), (" Shadow ", True), (True, True), ("off", False), ("OFF", False),
     (False, False)],
)  # fmt: skip
def test_the_argument_takes_off_shadow_and_a_bool(value: object, on: bool) -> None:
    found = shadow_of_instrument(semantic=value)
    assert found == (SemanticReuse() if on else None)


def test_a_configuration_is_used_as_given() -> None:
    mine = SemanticReuse(min_similarity=0.95, vetoes=())
    assert shadow_of_instrument(semantic=mine) is mine


def test_the_argument_beats_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "shadow")
    assert shadow_of_instrument() == SemanticReuse()
    assert shadow_of_instrument(semantic=False) is None
    monkeypatch.setenv(VARIABLE, "off")
    assert shadow_of_instrument(semantic=True) == SemanticReuse()


@pytest.mark.parametrize(
    ("value", "error"),
    [("on", ValueError), ("", ValueError), (1, TypeError), (0.9, TypeError),
     ({"min_similarity": 0.9}, TypeError), (SemanticReuse, TypeError)],
)  # fmt: skip
def test_a_bad_argument_is_refused_naming_it(
    value: object, error: type[Exception], generation: Generation
) -> None:
    with pytest.raises(error, match="semantic"):
        wm_middleware.instrument(semantic=value)
    assert INSTRUMENTATION.runtime() is None
    client = generation.client("sync", "http://127.0.0.1:9")
    with pytest.raises(error, match="semantic"):
        wm_middleware.wrap(client, semantic=value)


@pytest.mark.parametrize("raw", ["on", "true", "shadow mode"])
def test_a_bad_variable_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(VARIABLE, raw)
    with pytest.raises(ValueError, match=f"{VARIABLE} must be off, shadow or serve, got '{raw}'"):
        Settings.resolve({})


@pytest.mark.parametrize("where", ["argument", "variable"])
def test_serve_switches_serving_on_with_the_default_configuration(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "variable":
        monkeypatch.setenv(VARIABLE, " Serve ")
        found = shadow_of_instrument()
    else:
        found = shadow_of_instrument(semantic="serve")
    assert found == SemanticReuse(serve=True)
    assert (found.max_error, found.verify_share) == (0.01, 0.1)
    runtime = INSTRUMENTATION.runtime()
    assert runtime is not None
    assert runtime.near is not None
    assert runtime.serving is not None


def test_shadow_mode_serves_nothing() -> None:
    shadow_of_instrument(semantic="shadow")
    runtime = INSTRUMENTATION.runtime()
    assert runtime is not None
    assert runtime.near is not None
    assert runtime.serving is None


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [({"serve": "yes"}, TypeError, "serve"), ({"max_error": 0}, ValueError, "max_error"),
     ({"max_error": 1.0}, ValueError, "max_error"), ({"max_error": "1%"}, TypeError, "max_error"),
     ({"verify_share": -0.1}, ValueError, "verify_share"),
     ({"verify_share": 1.5}, ValueError, "verify_share")],
)  # fmt: skip
def test_a_bad_serve_setting_is_refused_naming_it(
    options: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        SemanticReuse(**options)
