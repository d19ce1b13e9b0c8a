"""supermemory-openai-sdk memory tools in a function-calling loop, cached by ``instrument()``.

    python examples/openai_tools.py
    SUPERMEMORY_API_KEY=sm_... python examples/openai_tools.py

No LLM is called: the assistant messages below are what a model returns (``tool_calls`` in
OpenAI's JSON shape), and ``SupermemoryTools.execute_tool_call`` runs them as an application
would. Parallel tool calls asking the same question share one upstream request; the repeated
question in the next message is a hit; ``add_memory`` invalidates the user's container tag.

Environment: ``python3 -m pip install -e '.[demo]'`` (supermemory 3.x, supermemory-openai-sdk).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from openai.types.chat import ChatCompletionMessageToolCall
from supermemory_openai import SupermemoryTools

import wm_middleware
from wm_middleware.emulator import supermemory_target

CONTAINER_TAG = "user-alex"
MEMORIES = [
    "Alex has a severe peanut allergy.",
    "Alex's favorite cuisines are Japanese and Ethiopian.",
]


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


# What the model answers, message by message (each message's calls run in parallel).
ASSISTANT_MESSAGES = [
    [
        tool_call("call_1", "search_memories", information_to_get="peanut allergy"),
        tool_call("call_2", "search_memories", information_to_get="favorite cuisines"),
        tool_call("call_3", "search_memories", information_to_get="peanut allergy"),
    ],
    [tool_call("call_4", "search_memories", information_to_get="peanut allergy")],
    [tool_call("call_5", "add_memory", memory="Alex booked Sakura for Friday at 19:30.")],
    [tool_call("call_6", "search_memories", information_to_get="peanut allergy")],
]


async def run(api_key: str, base_url: str | None) -> None:
    config: dict[str, Any] = {"container_tags": [CONTAINER_TAG]}
    if base_url:
        config["base_url"] = base_url
    tools = SupermemoryTools(api_key, config)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan Friday dinner for me."}]
    for calls in ASSISTANT_MESSAGES:
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        results = await asyncio.gather(
            *(
                tools.execute_tool_call(ChatCompletionMessageToolCall.model_validate(call))
                for call in calls
            )
        )
        for call, content in zip(calls, results, strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
            result = json.loads(content)
            arguments = json.loads(call["function"]["arguments"])
            detail = f"{result.get('count')} results" if "count" in result else "stored"
            print(f"{call['id']}: {call['function']['name']}({arguments}) -> {detail}")
    await tools.client.close()
    # ``messages`` would now go back to the model for its next answer.


def main() -> None:
    # The real API with SUPERMEMORY_API_KEY, else an emulator seeded with MEMORIES.
    with supermemory_target(MEMORIES, container_tag=CONTAINER_TAG) as (api_key, base_url):
        memory = wm_middleware.instrument()
        try:
            asyncio.run(run(api_key, base_url))
            print(memory.stats())  # 1 coalesced, 1 hit, the add invalidated, 1 miss again
        finally:
            wm_middleware.uninstrument()


if __name__ == "__main__":
    main()
