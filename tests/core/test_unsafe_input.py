"""Input that must be refused at the boundary with a clear error, caching nothing."""

from __future__ import annotations

import asyncio
import functools
import gc
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest

from wm_middleware import WorkingMemory


async def async_fetch() -> str:
    return "coroutine result"


class AsyncCallable:
    async def __call__(self) -> str:
        return "coroutine result"


@pytest.mark.parametrize(
    "fetch",
    [
        async_fetch,
        functools.partial(async_fetch),
        lambda: async_fetch(),
        AsyncCallable(),
        lambda: asyncio.sleep(0),
    ],
    ids=["async def", "partial", "lambda returning a coroutine", "async __call__", "awaitable"],
)
def test_sync_search_refuses_an_async_fetch_and_caches_nothing(fetch: Any) -> None:
    wm: WorkingMemory[Any] = WorkingMemory()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited" either
        with pytest.raises(TypeError, match="asearch"):
            wm.search("q", fetch)
        with pytest.raises(TypeError, match="asearch"):
            wm.search("q", fetch)  # the second caller is refused the same way
        gc.collect()
    assert not wm.has("q")
    stats = wm.stats()
    assert (stats.size, stats.inflight) == (0, 0)
    assert wm.search("q", lambda: "sync") == "sync"


@pytest.mark.parametrize("shape", ["list", "dict"])
def test_self_referential_params_are_refused_without_recursion_error(shape: str) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    value: Any
    if shape == "list":
        value = []
        value.append(value)
    else:
        value = {}
        value["self"] = value
    with pytest.raises(ValueError, match="nest deeper"):
        wm.search("q", lambda: "v", filters=value)
    with pytest.raises(ValueError, match="nest deeper"):
        wm.set("q", "v", filters=value)


@pytest.mark.parametrize("depth", [100, 100_000])
def test_very_deep_params_are_refused_without_recursion_error(depth: int) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    value: Any = "leaf"
    for _ in range(depth):
        value = [value, 1]
    with pytest.raises(ValueError, match="nest deeper"):
        wm.search("q", lambda: "v", filters=value)


def test_params_nested_a_few_levels_are_fine() -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    filters = {"AND": [{"key": "k", "value": "v"}, {"OR": [{"key": "x", "value": [1, 2]}]}]}
    assert wm.search("q", lambda: "v", filters=filters) == "v"
    assert wm.get("q", filters=filters) == "v"


def _held_bytes(build: Any) -> int:
    """Bytes still allocated after ``build()`` ran and everything it returned was dropped:
    those allocated by this file's code or the package's (not by a background thread that an
    earlier test of this worker left running, a subscriber or a refresh, say)."""
    import wm_middleware

    mine = [
        tracemalloc.Filter(True, __file__),
        tracemalloc.Filter(True, str(Path(wm_middleware.__file__).parent / "*")),
    ]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(mine)
        build()
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(mine)
    finally:
        tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


@pytest.mark.parametrize("size", [256 * 1024, 1000], ids=["256 KiB queries", "1,000-char queries"])
def test_query_text_is_not_kept_alive_after_its_cache_is_cleared(size: int) -> None:
    keep: list[WorkingMemory[int]] = []

    def build() -> None:
        wm: WorkingMemory[int] = WorkingMemory()
        for i in range(200):
            wm.search(f"{i:04d}" + "x" * size, lambda i=i: i, limit=5)  # type: ignore[misc]
            wm.search(f"{i:04d}" + "y" * size, lambda i=i: i)  # type: ignore[misc]
        wm.clear()
        keep.append(wm)  # the cache still exists; its queries must not

    assert _held_bytes(build) < 200 * size // 4


def test_query_text_is_not_kept_alive_after_its_cache_is_gone() -> None:
    def build() -> None:
        wm: WorkingMemory[int] = WorkingMemory()
        for i in range(200):
            wm.search(f"{i:04d}" + "x" * 1000, lambda i=i: i, container_tags=["t"])  # type: ignore[misc]
        del wm

    assert _held_bytes(build) < 50_000
