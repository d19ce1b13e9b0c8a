"""Bad input is refused at the boundary with a clear error."""

from __future__ import annotations

import math
from typing import Any

import pytest

from wm_middleware import WorkingMemory


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_entries": 0}, ValueError, "max_entries must be >= 1"),
        ({"max_entries": -5}, ValueError, "max_entries must be >= 1"),
        ({"max_entries": 2.5}, TypeError, "max_entries must be an int"),
        ({"max_entries": "100"}, TypeError, "max_entries must be an int"),
        ({"max_entries": True}, TypeError, "max_entries must be an int"),
        ({"ttl": 0}, ValueError, "ttl must be a finite number of seconds > 0"),
        ({"ttl": -1.0}, ValueError, "ttl must be a finite"),
        ({"ttl": math.nan}, ValueError, "ttl must be a finite"),
        ({"ttl": math.inf}, ValueError, "ttl must be a finite"),
        ({"ttl": "60"}, TypeError, "ttl must be a number of seconds"),
        ({"ttl": None}, TypeError, "ttl must be a number of seconds"),
        ({"refresh_after": 60.0}, ValueError, "refresh_after must be below ttl"),
        ({"refresh_after": 90.0}, ValueError, "refresh_after must be below ttl"),
        ({"refresh_after": 0}, ValueError, "refresh_after must be a finite"),
        ({"refresh_after": math.nan}, ValueError, "refresh_after must be a finite"),
        ({"clock": 5}, TypeError, "clock must be callable"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        WorkingMemory(**kwargs)


def test_good_constructor_arguments_are_kept() -> None:
    wm: WorkingMemory[str] = WorkingMemory(max_entries=7, ttl=30, refresh_after=5)
    assert (wm.max_entries, wm.ttl, wm.refresh_after) == (7, 30.0, 5.0)
    assert "max_entries=7" in repr(wm)


@pytest.mark.parametrize("query", [None, 42, b"bytes", ["q"]])
def test_a_query_that_is_not_a_str_is_refused(query: Any) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    with pytest.raises(TypeError, match="query must be a str"):
        wm.search(query, lambda: "v")
    with pytest.raises(TypeError, match="query must be a str"):
        wm.get(query)
    with pytest.raises(TypeError, match="query must be a str"):
        wm.set(query, "v")


@pytest.mark.parametrize("fetch", [None, "not callable", 3])
def test_a_fetch_that_is_not_callable_is_refused(fetch: Any) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    with pytest.raises(TypeError, match="fetch must be callable"):
        wm.search("q", fetch)
    wm.set("q", "cached")
    with pytest.raises(TypeError, match="fetch must be callable"):
        wm.search("q", fetch)  # even when the answer is cached


async def test_asearch_refuses_the_same_bad_input() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    with pytest.raises(TypeError, match="fetch must be callable"):
        await wm.asearch("q", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="query must be a str"):
        await wm.asearch(1, lambda: None)  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, "1"])
def test_bad_per_call_ttl_is_refused(ttl: Any) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    with pytest.raises((TypeError, ValueError), match="ttl"):
        wm.search("q", lambda: "v", ttl=ttl)
    with pytest.raises((TypeError, ValueError), match="ttl"):
        wm.set("q", "v", ttl=ttl)


def test_invalidate_with_params_but_no_query_is_refused() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    with pytest.raises(TypeError, match="needs a query"):
        wm.invalidate(limit=5)
