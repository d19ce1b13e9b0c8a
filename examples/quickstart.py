"""Quickstart: one ``instrument()`` call, the same search twice, the cache statistics.

    python examples/quickstart.py                        # against a local emulator
    SUPERMEMORY_API_KEY=sm_... python examples/quickstart.py   # against the real API

Environment: ``python3 -m pip install -e '.[demo]'`` (supermemory 3.x).
"""

from __future__ import annotations

import time

import supermemory

import wm_middleware
from wm_middleware.emulator import supermemory_target

CONTAINER_TAG = "user-alex"
MEMORIES = ["Alex has a severe peanut allergy."]


def main() -> None:
    # The real API with SUPERMEMORY_API_KEY, else an emulator (100 ms, like a real round trip).
    target = supermemory_target(MEMORIES, container_tag=CONTAINER_TAG, latency=0.1)
    with target as (api_key, base_url):
        memory = wm_middleware.instrument()  # patches the supermemory client classes
        try:
            client = supermemory.Supermemory(api_key=api_key, base_url=base_url)
            for attempt in ("first", "second"):
                start = time.perf_counter()
                response = client.search.memories(q="peanut allergy", container_tag=CONTAINER_TAG)
                elapsed = (time.perf_counter() - start) * 1000
                print(f"{attempt} search: {len(response.results)} results in {elapsed:.1f} ms")
            print(memory.stats())  # CacheStats(hits=1, misses=1, ...)
        finally:
            wm_middleware.uninstrument()


if __name__ == "__main__":
    main()
