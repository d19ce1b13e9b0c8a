"""pydantic-ai: a tool that searches Supermemory, traced with the OpenTelemetry SDK.

    python examples/pydantic_ai_agent.py

An agent with two tools, ``search_memories`` and ``add_memory``, driven by pydantic-ai's
``FunctionModel`` (a scripted model: no account, no network). Each turn the model calls
``search_memories`` twice in parallel with the same query, then answers; in turn 2 it adds what
the user asked to remember. The conversation runs twice against the bundled emulator, uncached
and then under ``wm_middleware.instrument()``, with the application's tracing (the OpenTelemetry
SDK, ``Agent.instrument_all()``) on both times: the middleware's ``search_memory`` spans are
children of pydantic-ai's ``execute_tool`` spans, and the first turn's trace is printed as a tree.

Environment: the supermemory 5.x one, ``.venv5`` (see the README), with this example's extra:
``.venv5/bin/python -m pip install -e '.[pydantic-ai]'``, then
``.venv5/bin/python examples/pydantic_ai_agent.py``.
With logfire, ``logfire.configure()`` and ``logfire.instrument_pydantic_ai()`` take the
place of the tracer provider below.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import _conversation as script
import supermemory
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


@dataclass
class Memory:
    """The agent's dependencies: the Supermemory client and what its searches returned."""

    client: supermemory.AsyncSupermemory
    found: list[str] = field(default_factory=list)


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """What an LLM would do: search twice in parallel (diet, allergies), then answer."""
    request = messages[-1]
    assert isinstance(request, ModelRequest)
    if any(part.part_kind == "tool-return" for part in request.parts):
        return ModelResponse(parts=[TextPart("A peanut-free noodle bowl.")])
    content = script.to_remember(str(request.parts[-1].content))
    if content is not None:
        return ModelResponse(parts=[ToolCallPart("add_memory", {"content": content})])
    search = [ToolCallPart("search_memories", {"query": script.QUERY}) for _ in range(2)]
    return ModelResponse(parts=search)


agent = Agent(FunctionModel(scripted_model), deps_type=Memory)
Agent.instrument_all()  # spans for every agent run, model request and tool call


@agent.tool
async def search_memories(ctx: RunContext[Memory], query: str) -> list[str]:
    """Search the user's memories."""
    response = await ctx.deps.client.search(script.CONTAINER_TAG, query=query)
    found = [result.memory or "" for result in response.results]
    ctx.deps.found.extend(found)
    return found


@agent.tool
async def add_memory(ctx: RunContext[Memory], content: str) -> str:
    """Remember something about the user."""
    await ctx.deps.client.add(script.CONTAINER_TAG, content=content)
    return "saved"


async def converse(run: script.Run) -> None:
    deps = Memory(supermemory.AsyncSupermemory(api_key=script.API_KEY, base_url=run.base_url))
    for number, question in enumerate(script.TURNS, start=1):
        await agent.run(question, deps=deps)
        run.saw(number, deps.found)
        deps.found.clear()
        await asyncio.sleep(script.PAUSE)


def print_tree(spans: list[ReadableSpan]) -> None:
    """The spans of one trace, each under its parent."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda span: span.start_time or 0):
        parent = span.parent.span_id if span.parent else None
        children.setdefault(parent, []).append(span)

    def show(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            result = (span.attributes or {}).get("wm.cache.result")
            print(f"{'  ' * depth}{span.name}" + (f" ({result})" if result else ""))
            assert span.context is not None
            show(span.context.span_id, depth + 1)

    show(None, 1)


def main() -> None:
    spans = InMemorySpanExporter()  # the application's tracing: any SDK exporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    script.header()
    with script.against_the_emulator(cached=False) as run:
        asyncio.run(converse(run))
    spans.clear()
    with script.against_the_emulator(cached=True) as run:
        asyncio.run(converse(run))
    finished = spans.get_finished_spans()
    first = min((span for span in finished if span.parent is None), key=lambda s: s.start_time or 0)
    assert first.context is not None
    print("the first turn's trace, cached:")
    print_tree([span for span in finished if span.context.trace_id == first.context.trace_id])


if __name__ == "__main__":
    main()
