"""Bodies of the worker processes the shared-tier tests start (importable, for ``spawn``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from wm_middleware import RedisTier

from .tiers import patient_tier

COUNTER = "test:upstream-fetches"  # no TTL on purpose: the tests delete it; never a tier key


def counted_fetch(url: str, value: Any, seconds: float) -> Any:
    """An upstream fetch that counts itself in Redis, so every process adds to one counter."""
    redis.Redis.from_url(url).incr(COUNTER)
    time.sleep(seconds)
    return value


def _crowd(mode: str, callers: int, call: Callable[[], Any], acall: Callable[[], Any]) -> list[Any]:
    """``callers`` concurrent calls: threads running ``call``, or tasks of one loop awaiting
    ``acall()``. Returns their results."""
    if mode == "async":

        async def main() -> list[Any]:
            return list(await asyncio.gather(*(acall() for _ in range(callers))))

        return asyncio.run(main())
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(call())) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _fetchers(url: str, value: Any, seconds: float) -> tuple[Callable[[], Any], Any]:
    async def afetch() -> Any:
        return await asyncio.to_thread(counted_fetch, url, value, seconds)

    return (lambda: counted_fetch(url, value, seconds)), afetch


def herd(
    url: str, key: str, callers: int, seconds: float, mode: str, barrier: Any, out: Any
) -> None:
    """``callers`` concurrent loads of ``key`` in this process; puts their outcomes on ``out``."""
    # op_timeout 1 s: on a busy machine ten connections may take longer than the default to open
    tier = RedisTier(url, lease=10.0, op_timeout=1.0)
    fetch, afetch = _fetchers(url, {"v": key}, seconds)
    barrier.wait()
    results = _crowd(
        mode,
        callers,
        lambda: tier.load(key, (), 30.0, fetch),
        lambda: tier.aload(key, (), 30.0, afetch),
    )
    assert all(r.value == {"v": key} for r in results)
    out.put(([r.outcome for r in results], tier.errors))


def hold_lease(url: str, key: str, lease: float) -> None:
    """Take the lease of ``key`` and never finish the fetch (the test kills this process)."""
    tier = patient_tier(url, lease=lease)
    tier.load(key, (), 30.0, lambda: counted_fetch(url, "never", 3600))


def listen(url: str, loads: Any, ready: Any, out: Any, seconds: float) -> None:
    """Load each ``(key, scopes)`` of ``loads`` (so this process holds them), bind a recording
    sink and put every ``drop_local`` call on ``out`` for ``seconds``."""
    tier = patient_tier(url)
    for key, scopes in loads:
        tier.load(key, scopes, 60.0, lambda: "held here")

    class Sink:
        def drop_local(self, *, keys: Any = (), scopes: Any = (), everything: bool = False) -> int:
            out.put((sorted(map(repr, keys)), sorted(map(repr, scopes)), everything))
            return 0

    sink = Sink()
    tier.bind(sink)
    deadline = time.monotonic() + 5
    while not tier.subscribed and time.monotonic() < deadline:
        time.sleep(0.01)
    ready.set()
    time.sleep(seconds)


def memory_herd(
    url: str, query: str, callers: int, seconds: float, mode: str, barrier: Any, out: Any
) -> None:
    """``callers`` concurrent searches through a ``WorkingMemory(shared=RedisTier)``; puts the
    memory's statistics on ``out``."""
    from wm_middleware import WorkingMemory

    memory: WorkingMemory[Any] = WorkingMemory(shared=RedisTier(url, lease=10.0, op_timeout=1.0))
    fetch, afetch = _fetchers(url, {"q": query}, seconds)
    barrier.wait()
    results = _crowd(
        mode, callers, lambda: memory.search(query, fetch), lambda: memory.asearch(query, afetch)
    )
    assert all(r == {"q": query} for r in results)
    out.put(memory.stats())
