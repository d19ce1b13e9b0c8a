"""Microsoft Agent Framework memory (supermemory-agent-framework 2.x on supermemory 5.x), cached.

    python examples/agent_framework.py
    SUPERMEMORY_API_KEY=sm_... python examples/agent_framework.py

Drives the integration's tools and context provider as an agent run would, without an LLM:
the provider's ``before_run`` fetches the profile and a search concurrently on every turn, and
the tools search again. With ``instrument()`` the repeats are served from working memory.

Environment: supermemory 5.x and supermemory-agent-framework 2.x, which cannot share one with the
demo's 3.x: ``python3 -m venv .venv5 && .venv5/bin/pip install -e '.[agent-framework]'``, then
``.venv5/bin/python examples/agent_framework.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

# This file shares its name with the ``agent_framework`` package: take its directory (which
# Python puts first on the path when running ``python examples/agent_framework.py``) off the path.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _here]

import supermemory  # noqa: E402
from supermemory_agent_framework import (  # noqa: E402
    AgentSupermemory,
    SupermemoryContextProvider,
    SupermemoryTools,
)

import wm_middleware  # noqa: E402
from wm_middleware.emulator import supermemory_target  # noqa: E402

CONTAINER_TAG = "user-alex"
MEMORIES = [
    {"content": "Alex has a severe peanut allergy.", "static": True},  # a static profile fact
    "Alex's favorite cuisines are Japanese and Ethiopian.",
]


class TurnContext:
    """The part of agent-framework's ``SessionContext`` the provider uses."""

    def __init__(self, user_message: str) -> None:
        self.input_messages = [{"role": "user", "content": user_message}]
        self.instructions: list[str] = []
        self.response: Any = None

    def extend_instructions(self, source_id: str, text: str) -> None:
        self.instructions.append(text)


async def run(api_key: str, base_url: str | None) -> None:
    connection = AgentSupermemory(
        api_key=api_key, container_tag=CONTAINER_TAG, conversation_id="example"
    )
    if base_url:  # AgentSupermemory has no base_url option; the tools copy this client
        connection.client = supermemory.AsyncSupermemory(api_key=api_key, base_url=base_url)
    tools = SupermemoryTools(connection)
    provider = SupermemoryContextProvider(connection, mode="full")
    for turn, question in enumerate(["What can I eat?", "What can I eat?"], start=1):
        context = TurnContext(question)
        await provider.before_run(agent=None, session=None, context=context, state={})
        found = json.loads(await tools.search_memories("peanut allergy"))
        print(
            f"turn {turn}: context {sum(len(text) for text in context.instructions)} chars, "
            f"search_memories -> {len(found.get('results', []))} results"
        )


def main() -> None:
    # The real API with SUPERMEMORY_API_KEY, else an emulator seeded with MEMORIES.
    with supermemory_target(MEMORIES, container_tag=CONTAINER_TAG) as (api_key, base_url):
        memory = wm_middleware.instrument()
        try:
            asyncio.run(run(api_key, base_url))
            print(memory.stats())  # the second turn is served from working memory
        finally:
            wm_middleware.uninstrument()


if __name__ == "__main__":
    main()
