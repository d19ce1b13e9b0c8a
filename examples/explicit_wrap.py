"""``wrap(client)``: a cached copy of one client, without monkeypatching anything.

    python examples/explicit_wrap.py
    SUPERMEMORY_API_KEY=sm_... python examples/explicit_wrap.py

The original client stays uncached; the copy shares its connection settings and caches reads,
and its writes invalidate what they could change.

Environment: ``python3 -m pip install -e '.[demo]'`` (supermemory 3.x).
"""

from __future__ import annotations

import supermemory

import wm_middleware
from wm_middleware.emulator import supermemory_target

CONTAINER_TAG = "user-alex"
MEMORIES = ["Alex prefers Japanese food.", "Alex has a severe peanut allergy."]


def main() -> None:
    # The real API with SUPERMEMORY_API_KEY, else an emulator seeded with MEMORIES.
    with supermemory_target(MEMORIES, container_tag=CONTAINER_TAG) as (api_key, base_url):
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
