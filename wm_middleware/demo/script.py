"""The demo's data: a small, realistic memory set and the tool calls a scripted LLM makes.

The script is what an assistant model does in practice while helping one user over a few turns:
it issues several ``search_memories`` calls in parallel (one assistant message with many tool
calls, sometimes the same question twice), re-checks the same fact step after step (a ReAct loop
vetting candidates one by one), and writes a new memory in the middle of the conversation, which
must make later reads fresh again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTAINER_TAG",
    "DEMO_API_KEY",
    "NEW_MEMORY",
    "NEW_MEMORY_MARK",
    "REPEATED_QUERY",
    "SCRIPT",
    "SEED_MEMORIES",
    "ToolCall",
    "Turn",
    "turns",
]

CONTAINER_TAG = "user-alex"
DEMO_API_KEY = "sk-wm-demo"  # the emulator's tenant for the demo's memories

SEED_MEMORIES: tuple[dict[str, Any], ...] = (
    {"content": "Alex has a severe peanut allergy and carries an EpiPen.", "static": True},
    {"content": "Sam, Alex's partner, is lactose intolerant and avoids dairy.", "static": True},
    {"content": "Alex lives in Lisbon; time zone Europe/Lisbon.", "static": True},
    {"content": "Alex is vegetarian on weekdays and eats fish on weekends."},
    {"content": "Alex's favorite cuisines are Japanese and Ethiopian; dislikes very spicy food."},
    {"content": "Alex prefers quiet restaurants with a window table."},
    {"content": "Alex leads Project Atlas, moving billing to event-driven services."},
    {"content": "Project Atlas deadline is the end of Q3; the team uses Kafka and PostgreSQL."},
    {"content": "Alex's manager is Priya; weekly one-on-one meetings on Tuesdays at 10:00."},
    {"content": "Alex prefers concise answers with Python code examples."},
    {"content": "Alex prefers morning meetings and no meetings after 17:00."},
    {"content": "Alex runs a 10k every Saturday morning along the river."},
)

# The query the repeated-query turn asks ten times.
REPEATED_QUERY = "peanut allergy"

# The memory the new-memory turn writes, and a word of it no seeded memory has: a search result
# that contains the word shows the new memory (the real API may rephrase the rest).
NEW_MEMORY = "Friday dinner booking: Sakura (Japanese, nut-free kitchen) at 19:30 with Sam."
NEW_MEMORY_MARK = "Sakura"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call in an assistant message: a tool name and its JSON arguments."""

    name: str
    arguments: dict[str, Any]

    @property
    def query(self) -> str | None:
        """The search text of a ``search_memories`` call."""
        value = self.arguments.get("information_to_get")
        return value if isinstance(value, str) else None

    def openai_json(self, call_id: str) -> dict[str, Any]:
        """The call in OpenAI's ``tool_calls[i]`` shape (arguments are a JSON string)."""
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass(frozen=True, slots=True)
class Turn:
    """A user message and the assistant's tool-call steps.

    Each step is one assistant message: its calls run concurrently (parallel tool calls); the
    steps run one after another, as the model waits for tool results before its next message.
    """

    title: str
    user: str
    steps: tuple[tuple[ToolCall, ...], ...]

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(call for step in self.steps for call in step)

    @property
    def writes(self) -> bool:
        return any(call.name == "add_memory" for call in self.calls)


def _search(query: str) -> ToolCall:
    return ToolCall("search_memories", {"information_to_get": query, "limit": 5})


def _add(memory: str) -> ToolCall:
    return ToolCall("add_memory", {"memory": memory})


SCRIPT: tuple[Turn, ...] = (
    Turn(
        title="repeated query",
        user="Which of these eight restaurants can Sam and I go to on Friday?",
        steps=(
            (_search(REPEATED_QUERY), _search("favorite cuisines"), _search(REPEATED_QUERY)),
            # Vetting the candidates one at a time, re-checking the allergy for each.
            *(((_search(REPEATED_QUERY),),) * 8),
        ),
    ),
    Turn(
        title="new memory",
        user="Book Sakura for Friday and remember it.",
        steps=(
            (_search("Friday dinner booking"), _search(REPEATED_QUERY), _search("lactose dairy")),
            (_add(NEW_MEMORY),),
            (
                _search("Friday dinner booking"),
                _search("favorite cuisines"),
                _search("Friday dinner booking"),
            ),
            (_search("Friday dinner booking"),),
            (_search(REPEATED_QUERY),),
        ),
    ),
    Turn(
        title="project",
        user="Where are we on Project Atlas, and when can I talk to Priya?",
        steps=(
            (_search("Project Atlas"), _search("meetings"), _search("Project Atlas")),
            (_search("Project Atlas deadline"),),
            (_search("Project Atlas"),),
            (_search("meetings"), _search("Python code examples")),
        ),
    ),
    Turn(
        title="weekend",
        user="Plan my Saturday around the run and a dinner with Sam.",
        steps=(
            (_search("Saturday run"), _search(REPEATED_QUERY), _search("Friday dinner booking")),
            (_search("weekends fish"), _search("lactose dairy")),
            (_search("Saturday run"),),
            (_search(REPEATED_QUERY),),
        ),
    ),
)


def turns(count: int) -> tuple[Turn, ...]:
    """The first ``count`` turns of the script, cycling through it when ``count`` is larger."""
    if count < 1:
        raise ValueError(f"turns must be >= 1, got {count}")
    return tuple(SCRIPT[i % len(SCRIPT)] for i in range(count))
