"""OpenAI Agents SDK: a ``function_tool`` that searches Supermemory, with a scripted model.

    python examples/openai_agents.py

An agent with two function tools, ``search_memories`` and ``add_memory``, driven by a scripted
``Model`` (an implementation of the SDK's model interface that returns the tool calls an LLM
would make: no account, no network). Each turn the model calls ``search_memories`` twice in
parallel with the same query, then answers; in turn 2 it adds what the user asked to remember.
The conversation runs twice against the bundled emulator, uncached and then under
``wm_middleware.instrument()``. The SDK's own tracing stays on: a trace processor of the
application's (here one that keeps the spans in a list, in place of the default exporter to
OpenAI) receives the agent, model and function spans of every turn, cached or not.

Environment: the supermemory 5.x one, ``.venv5`` (see the README), with this example's extra:
``.venv5/bin/python -m pip install -e '.[openai-agents]'``, then
``.venv5/bin/python examples/openai_agents.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import _conversation as script
import supermemory
from agents import (
    Agent,
    Model,
    ModelResponse,
    RunContextWrapper,
    Runner,
    Usage,
    function_tool,
    set_trace_processors,
)
from agents.tracing import Span, Trace, TracingProcessor
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

ANSWER = "A peanut-free noodle bowl."


@dataclass
class Memory:
    """The run's context: the Supermemory client and what its searches returned."""

    client: supermemory.AsyncSupermemory
    found: list[str] = field(default_factory=list)


@function_tool
async def search_memories(ctx: RunContextWrapper[Memory], query: str) -> list[str]:
    """Search the user's memories."""
    response = await ctx.context.client.search(script.CONTAINER_TAG, query=query)
    found = [result.memory or "" for result in response.results]
    ctx.context.found.extend(found)
    return found


@function_tool
async def add_memory(ctx: RunContextWrapper[Memory], content: str) -> str:
    """Remember something about the user."""
    await ctx.context.client.add(script.CONTAINER_TAG, content=content)
    return "saved"


def _message(text: str) -> ResponseOutputMessage:
    content = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(
        type="message", id="answer", role="assistant", status="completed", content=[content]
    )


class ScriptedModel(Model):
    """What an LLM would do: search twice in parallel (diet, allergies), then answer."""

    calls = itertools.count()

    def _call(self, name: str, arguments: dict[str, str]) -> ResponseFunctionToolCall:
        call = f"call_{next(self.calls)}"
        return ResponseFunctionToolCall(
            type="function_call", id=call, call_id=call, name=name, arguments=json.dumps(arguments)
        )

    async def get_response(self, system_instructions: Any, input: Any, *_: Any, **__: Any) -> Any:
        items = [{"content": input}] if isinstance(input, str) else input
        if any(item.get("type") == "function_call_output" for item in items):
            return ModelResponse(output=[_message(ANSWER)], usage=Usage(), response_id=None)
        content = script.to_remember(str(items[-1]["content"]))
        if content is not None:
            calls = [self._call("add_memory", {"content": content})]
        else:
            calls = [self._call("search_memories", {"query": script.QUERY}) for _ in range(2)]
        return ModelResponse(output=calls, usage=Usage(), response_id=None)

    def stream_response(self, *_: Any, **__: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the example runs without streaming")


class KeptSpans(TracingProcessor):
    """The application's trace processor: keeps the name of every finished span."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        data = span.span_data
        self.names.append(f"{data.type} {getattr(data, 'name', '')}".strip())

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


agent = Agent(name="cook", model=ScriptedModel(), tools=[search_memories, add_memory])


async def converse(run: script.Run) -> None:
    deps = Memory(supermemory.AsyncSupermemory(api_key=script.API_KEY, base_url=run.base_url))
    for number, question in enumerate(script.TURNS, start=1):
        await Runner.run(agent, question, context=deps)
        run.saw(number, deps.found)
        deps.found.clear()
        await asyncio.sleep(script.PAUSE)


def main() -> None:
    kept = KeptSpans()
    set_trace_processors([kept])  # the application's tracing, in place of the export to OpenAI
    script.header()
    with script.against_the_emulator(cached=False) as run:
        asyncio.run(converse(run))
    uncached_spans, kept.names = kept.names, []
    with script.against_the_emulator(cached=True) as run:
        asyncio.run(converse(run))
    for label, names in (("uncached", uncached_spans), ("cached", kept.names)):
        counts = ", ".join(f"{names.count(name)} {name}" for name in sorted(set(names)))
        print(f"the Agents SDK's own trace spans, {label}: {counts}")


if __name__ == "__main__":
    main()
