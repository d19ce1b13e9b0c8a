"""``copy``: whether a caller's mutation of its result can reach the cache (issue 19, item 7)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from wm_middleware import WorkingMemory

from .conftest import Held, running, wait_for


def results() -> dict[str, Any]:
    return {"results": [{"memory": "likes tea"}], "total": 1}


def test_by_default_every_caller_gets_the_stored_object_itself() -> None:
    wm: WorkingMemory[dict[str, Any]] = WorkingMemory()
    assert wm.copy is False
    first = wm.search("q", results)
    first["results"].append({"memory": "added by a caller"})
    again = wm.search("q", results)
    assert again is first  # documented: no isolation unless copy=True
    assert len(again["results"]) == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_with_copy_no_mutation_reaches_the_cache(mode: str) -> None:
    wm: WorkingMemory[dict[str, Any]] = WorkingMemory(copy=True)
    assert wm.copy is True

    def search() -> dict[str, Any]:
        if mode == "sync":
            return wm.search("q", results, limit=5)

        async def fetch() -> dict[str, Any]:
            return results()

        return asyncio.run(wm.asearch("q", fetch, limit=5))

    first = search()  # the miss
    first["results"].clear()
    second = search()  # a hit
    second["total"] = 99
    third = search()
    assert third == results()
    assert len({id(first), id(second), id(third)}) == 3


def test_with_copy_set_get_and_load_copy_too() -> None:
    wm: WorkingMemory[Any] = WorkingMemory(copy=True)
    value = {"tags": ["a"]}
    wm.set("q", value)
    value["tags"].append("changed after set")
    got = wm.get("q")
    assert got == {"tags": ["a"]}
    got["tags"].append("changed after get")
    loaded = wm.load("key", lambda: [1, 2])
    loaded.value.append(3)
    assert wm.get("q") == {"tags": ["a"]}
    assert wm.load("key", lambda: [0]).value == [1, 2]
    assert wm.lookup("key") == [1, 2]


def test_with_copy_callers_sharing_one_fetch_each_get_their_own_object() -> None:
    wm: WorkingMemory[Any] = WorkingMemory(copy=True)
    fetch = Held(results())
    got: list[dict[str, Any]] = []
    with running(*[lambda: got.append(wm.search("q", fetch))] * 3):
        wait_for(lambda: wm.stats().lookups == 3, "callers never joined")
        fetch.release()
    assert wm.stats().coalesced == 2
    assert len({id(value) for value in got}) == 3
    got[0]["results"].clear()
    assert got[1] == got[2] == wm.search("q", fetch) == results()


def test_copy_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="copy must be a bool"):
        WorkingMemory(copy="yes")  # type: ignore[arg-type]


def test_constructor_options_are_keyword_only() -> None:
    with pytest.raises(TypeError, match="positional"):
        WorkingMemory(100, 60.0)  # type: ignore[misc]
