"""A bad ``ttl`` raises the same error on a hit as on a miss (issue 17, item 4)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest

from wm_middleware import WorkingMemory

BAD_TTLS = [-1, 0, math.nan, math.inf, True, "10", -math.inf]


async def _value() -> str:
    return "fetched"


def _calls() -> dict[str, Callable[[WorkingMemory[str], Any], Any]]:
    return {
        "search": lambda wm, ttl: wm.search("q", lambda: "fetched", ttl=ttl, limit=5),
        "asearch": lambda wm, ttl: asyncio.run(wm.asearch("q", _value, ttl=ttl, limit=5)),
        "load": lambda wm, ttl: wm.load("key", lambda: "fetched", ttl=ttl),
        "aload": lambda wm, ttl: asyncio.run(wm.aload("key", _value, ttl=ttl)),
        "set": lambda wm, ttl: wm.set("q", "set", ttl=ttl, limit=5),
    }


def _error(call: Callable[[], Any]) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError)) as raised:
        call()
    return type(raised.value), str(raised.value)


@pytest.mark.parametrize("ttl", BAD_TTLS, ids=repr)
@pytest.mark.parametrize("method", list(_calls()))
def test_a_bad_ttl_raises_the_same_error_on_a_hit_as_on_a_miss(method: str, ttl: Any) -> None:
    call = _calls()[method]
    on_a_miss = _error(lambda: call(WorkingMemory(), ttl))
    cached: WorkingMemory[str] = WorkingMemory()
    cached.set("q", "cached", limit=5)
    cached.load("key", lambda: "cached")
    on_a_hit = _error(lambda: call(cached, ttl))
    assert on_a_hit == on_a_miss
    assert "ttl" in on_a_hit[1]
    assert cached.get("q", limit=5) == "cached"  # nothing was replaced


@pytest.mark.parametrize("method", list(_calls()))
def test_a_good_ttl_on_a_hit_serves_the_cached_value(method: str) -> None:
    cached: WorkingMemory[str] = WorkingMemory()
    cached.set("q", "cached", limit=5)
    cached.load("key", lambda: "cached")
    result = _calls()[method](cached, 5)
    if method != "set":
        value = getattr(result, "value", result)
        assert value == "cached"
