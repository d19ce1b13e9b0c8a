"""Bodies of the worker processes the shared-tier tests start (importable, for ``spawn``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import redis

from wm_middleware import RedisTier

COUNTER = "test:upstream-fetches"  # no TTL on purpose: the tests delete it; never a tier key


def counted_fetch(url: str, value: Any, seconds: float) -> Any:
    """An upstream fetch that counts itself in Redis, so every process adds to one counter."""
    redis.Redis.from_url(url).incr(COUNTER)
    time.sleep(seconds)
    return value


def herd(
    url: str, key: str, callers: int, seconds: float, mode: str, barrier: Any, out: Any
) -> None:
    """``callers`` concurrent loads of ``key`` in this process; puts their outcomes on ``out``."""
    tier = RedisTier(url, lease=10.0)
    barrier.wait()
    if mode == "sync":
        outcomes: list[str] = []

        def one() -> None:
            result = tier.load(key, (), 30.0, lambda: counted_fetch(url, {"v": key}, seconds))
            assert result.value == {"v": key}
            outcomes.append(result.outcome)

        threads = [threading.Thread(target=one) for _ in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:

        async def fetch() -> Any:
            return await asyncio.to_thread(counted_fetch, url, {"v": key}, seconds)

        async def main() -> list[str]:
            results = await asyncio.gather(
                *(tier.aload(key, (), 30.0, fetch) for _ in range(callers))
            )
            assert all(r.value == {"v": key} for r in results)
            return [r.outcome for r in results]

        outcomes = asyncio.run(main())
    out.put((outcomes, tier.errors))


def hold_lease(url: str, key: str, lease: float) -> None:
    """Take the lease of ``key`` and never finish the fetch (the test kills this process)."""
    tier = RedisTier(url, lease=lease)
    tier.load(key, (), 30.0, lambda: counted_fetch(url, "never", 3600))


def listen(url: str, ready: Any, out: Any, seconds: float) -> None:
    """Bind a recording sink and put every ``drop_local`` call on ``out`` for ``seconds``."""
    tier = RedisTier(url)

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

    memory: WorkingMemory[Any] = WorkingMemory(shared=RedisTier(url, lease=10.0))
    barrier.wait()
    if mode == "sync":
        threads = [
            threading.Thread(
                target=lambda: memory.search(
                    query, lambda: counted_fetch(url, {"q": query}, seconds)
                )
            )
            for _ in range(callers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:

        async def fetch() -> Any:
            return await asyncio.to_thread(counted_fetch, url, {"q": query}, seconds)

        async def main() -> None:
            await asyncio.gather(*(memory.asearch(query, fetch) for _ in range(callers)))

        asyncio.run(main())
    out.put(memory.stats())
