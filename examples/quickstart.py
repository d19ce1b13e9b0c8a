"""Quickstart: one ``instrument()`` call, the same search twice, the cache statistics.

    python examples/quickstart.py                        # against a local emulator
    SUPERMEMORY_API_KEY=sm_... python examples/quickstart.py   # against the real API

Environment: ``python3 -m pip install -e '.[demo]'`` (supermemory 3.x).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import supermemory

import wm_middleware

CONTAINER_TAG = "user-alex"


@contextmanager
def supermemory_target() -> Iterator[tuple[str, str | None]]:
    """(api_key, base_url): the real API when SUPERMEMORY_API_KEY is set, else an emulator."""
    api_key = os.environ.get("SUPERMEMORY_API_KEY")
    if api_key:
        yield api_key, os.environ.get("SUPERMEMORY_BASE_URL")
        return
    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer(latency=0.1) as server:  # 100 ms, like a real round trip
        server.seed(
            "sk-example", ["Alex has a severe peanut allergy."], container_tag=CONTAINER_TAG
        )
        print(f"(no SUPERMEMORY_API_KEY: using the emulator at {server.base_url})")
        yield "sk-example", server.base_url


def main() -> None:
    with supermemory_target() as (api_key, base_url):
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
