"""What the framework examples share: the scripted conversation and the emulator it runs against.

Not an example of its own. ``langgraph_agent.py``, ``pydantic_ai_agent.py`` and
``openai_agents.py`` each hold the conversation twice with :func:`against_the_emulator`:
uncached, then under ``wm_middleware.instrument()``. Each time a fresh emulator is seeded with
:data:`MEMORIES`; after the run it says how many upstream requests it answered and in which turn
a search first returned :data:`NEW_MEMORY`, written in turn 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import wm_middleware
from wm_middleware.emulator import EmulatorServer

API_KEY = "sk-example"
CONTAINER_TAG = "user-alex"
MEMORIES = [
    {"content": "Alex has a severe peanut allergy.", "static": True},  # a profile fact
    "Alex likes Japanese food.",
]
NEW_MEMORY = "Alex eats vegetarian food only, since this week."
QUERY = "what food Alex eats"  # what every search of the conversation asks
REMEMBER = "Please remember: "  # a turn starting so asks the agent to add the rest
TURNS = [
    "What should I cook tonight?",
    f"{REMEMBER}{NEW_MEMORY}",
    "What should I cook tonight?",
    "What should I cook tonight?",
    "And for lunch tomorrow?",
]
# Seconds between turns: the user reading and typing. Further apart than the 0.75 s a copy fetched
# while a write is being indexed is served (three quarters of settle_interval), so the cached agent
# sees the new memory in the same turn as the uncached one; turns closer than that see it at most
# one turn later (docs/freshness.md).
PAUSE = 0.8
INDEXING_DELAY = 1.0  # seconds before the emulator returns a new memory from a search


class Run:
    """One holding of the conversation: where the emulator is, and what the agent saw."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.seen: int | None = None  # the first turn whose searches returned NEW_MEMORY

    def saw(self, turn: int, found: Iterable[str]) -> None:
        """Record what the searches of ``turn`` (1-based) returned."""
        if self.seen is None and any(NEW_MEMORY in text for text in found):
            self.seen = turn


def to_remember(question: str) -> str | None:
    """What a turn asks the agent to remember, when it asks."""
    return question.removeprefix(REMEMBER) if question.startswith(REMEMBER) else None


def header() -> None:
    print(f"(using the emulator: {INDEXING_DELAY:g} s indexing delay, {len(TURNS)} turns)")


@contextmanager
def against_the_emulator(*, cached: bool) -> Iterator[Run]:
    """A fresh emulator (20 ms a request), this process under ``instrument()`` when ``cached``;
    prints the run's upstream requests, and the cached run's reads, when the block ends."""
    with EmulatorServer(latency=0.02, indexing_delay=INDEXING_DELAY) as server:
        server.seed(API_KEY, MEMORIES, container_tag=CONTAINER_TAG)
        memory = wm_middleware.instrument() if cached else None
        run = Run(server.base_url)
        try:
            yield run
        finally:
            if memory is not None:
                wm_middleware.uninstrument()
        label = "cached" if cached else "uncached"
        print(
            f"{label}: {server.count()} upstream requests; new memory first seen in turn {run.seen}"
        )
        if memory is not None:
            stats = memory.stats()
            print(f"  {stats.hits} hits, {stats.misses} misses, {stats.coalesced} coalesced")
