"""``wrap(client)``: a cached copy of one client, without monkeypatching anything.

    python examples/explicit_wrap.py
    SUPERMEMORY_API_KEY=sm_... python examples/explicit_wrap.py

The original client stays uncached; the copy shares its connection settings and caches reads,
and its writes invalidate what they could change.

Environment: ``python3 -m pip install -e '.[demo]'`` (supermemory 3.x).
"""

from __future__ import annotations

import os
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

    with EmulatorServer(latency=0.05) as server:
        server.seed(
            "sk-example",
            ["Alex prefers Japanese food.", "Alex has a severe peanut allergy."],
            container_tag=CONTAINER_TAG,
        )
        print(f"(no SUPERMEMORY_API_KEY: using the emulator at {server.base_url})")
        yield "sk-example", server.base_url


def main() -> None:
    with supermemory_target() as (api_key, base_url):
        client = supermemory.Supermemory(api_key=api_key, base_url=base_url)
        cached = wm_middleware.wrap(client, ttl=30.0)

        def search() -> int:
            return len(cached.search.memories(q="food", container_tag=CONTAINER_TAG).results)

        print(f"search: {search()} results (upstream)")
        print(f"search: {search()} results (from working memory)")
        cached.add(content="Alex now also likes Ethiopian food.", container_tag=CONTAINER_TAG)
        print(f"search after add: {search()} results (upstream again: the add invalidated it)")
        client.search.memories(q="food", container_tag=CONTAINER_TAG)  # the original: uncached
        print(f"wrapped client: {cached.working_memory.stats()}")


if __name__ == "__main__":
    main()
