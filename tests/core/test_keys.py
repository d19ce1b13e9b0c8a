"""What makes two lookups the same entry, and what keeps them apart."""

from __future__ import annotations

import pytest

from wm_middleware import WorkingMemory

from .conftest import FakeClock


@pytest.fixture
def wm(clock: FakeClock) -> WorkingMemory[str]:
    return WorkingMemory(clock=clock)


@pytest.mark.parametrize(
    "variant", ["user prefs", "  user prefs  ", "user   prefs", "user\t\nprefs"]
)
def test_whitespace_is_normalised(wm: WorkingMemory[str], variant: str) -> None:
    wm.set("user prefs", "v")
    assert wm.get(variant) == "v"


def test_case_is_kept(wm: WorkingMemory[str]) -> None:
    wm.set("User Prefs", "v")
    assert wm.get("user prefs") is None


def test_params_are_part_of_the_key_and_order_independent(wm: WorkingMemory[str]) -> None:
    wm.set("q", "five", limit=5, container_tags=["user-1"])
    assert wm.get("q", container_tags=["user-1"], limit=5) == "five"
    assert wm.get("q", limit=5) is None
    assert wm.get("q", limit=6, container_tags=["user-1"]) is None
    assert wm.get("q", limit=5, container_tags=["user-2"]) is None
    assert wm.get("q") is None


def test_nested_dicts_are_order_independent(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", filters={"AND": [{"key": "a", "value": "1"}], "x": {"b": 2, "a": 1}})
    assert wm.get("q", filters={"x": {"a": 1, "b": 2}, "AND": [{"value": "1", "key": "a"}]}) == "v"


def test_list_order_matters(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", container_tags=["a", "b"])
    assert wm.get("q", container_tags=["b", "a"]) is None
    assert wm.get("q", container_tags=("a", "b")) == "v"  # a tuple is the same JSON as a list


def test_true_is_not_one(wm: WorkingMemory[str]) -> None:
    wm.set("q", "bool", rerank=True)
    assert wm.get("q", rerank=1) is None
    assert wm.get("q", rerank=True) == "bool"


def test_set_params_are_order_independent(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", include={"documents", "summaries"})
    assert wm.get("q", include={"summaries", "documents"}) == "v"


def test_unhashable_parameter_is_refused_clearly(wm: WorkingMemory[str]) -> None:
    class Opaque:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="JSON-like"):
        wm.get("q", thing=Opaque())


def test_hashable_custom_values_are_kept_apart_by_type(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", mode=frozenset({1}))
    assert wm.get("q", mode=frozenset({1})) == "v"
    assert wm.get("q", mode="x") is None
