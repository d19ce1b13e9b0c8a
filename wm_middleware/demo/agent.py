"""The scripted agent loop shared by ``wm-middleware demo`` and ``benchmarks/bench_agent_loop.py``.

There is no model: each turn's tool calls come from :mod:`wm_middleware.demo.script`, in the JSON
shape of OpenAI's ``tool_calls``, and an :data:`Executor` runs them, normally
``SupermemoryTools.execute_tool_call`` from supermemory-openai-sdk (see
:func:`supermemory_tools_executor`). The loop times every call and every turn, and traces them
(``invoke_agent`` per turn, ``execute_tool`` per call) so that the working memory's own spans
nest under the call that caused them.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span, SpanKind, Tracer

from ..semconv import CAPTURE_CONTENT_ENV, OPERATION_NAME
from .script import Turn

__all__ = [
    "AgentRun",
    "CallRecord",
    "Executor",
    "TurnRecord",
    "percentile",
    "run_agent",
    "supermemory_tools_executor",
]

Executor = Callable[[dict[str, Any]], Awaitable[str]]
"""Runs one tool call (OpenAI ``tool_calls[i]`` JSON) and returns the tool message content."""

# Span and attribute names of the agent's own spans (GenAI semantic conventions where they exist).
TURN_SPAN = "invoke_agent"
TOOL_SPAN = "execute_tool"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
AGENT_NAME = "gen_ai.agent.name"
TURN_INDEX = "demo.turn.index"
TURN_TITLE = "demo.turn.title"
# The search text of a call: exported only with content capture on, like the library's own
# gen_ai.memory.query.text (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true).
QUERY = "demo.query"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One executed tool call: when it started (seconds from the run's start) and how long."""

    turn: int
    step: int
    name: str
    query: str | None
    start: float
    seconds: float
    ok: bool
    error: str | None = None
    call_id: str = ""  # the tool call's id, also on its execute_tool span (gen_ai.tool.call.id)
    result: str = ""  # the tool message content the call returned ("" when it raised)


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn: wall time and upstream requests (``None`` when not counted)."""

    index: int
    title: str
    seconds: float
    upstream: int | None


@dataclass(slots=True)
class AgentRun:
    """Everything the loop measured in one run."""

    calls: list[CallRecord] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    seconds: float = 0.0  # the turns' wall time, the pauses between them left out

    @property
    def searches(self) -> list[CallRecord]:
        return [c for c in self.calls if c.name == "search_memories"]

    @property
    def errors(self) -> list[CallRecord]:
        return [c for c in self.calls if not c.ok]

    def search_latency(self, q: float) -> float:
        """The ``q``-quantile (0..1) of per-search latency, in seconds."""
        return percentile([c.seconds for c in self.searches], q)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation between closest ranks; 0.0 if empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def capture_content() -> bool:
    """Whether the application opted in to query text on spans, as the library reads it
    (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


def supermemory_tools_executor(tools: Any) -> Executor:
    """Run calls with ``SupermemoryTools.execute_tool_call`` (supermemory-openai-sdk).

    The JSON is turned into the ``ChatCompletionMessageToolCall`` model the SDK expects, as an
    application does with the ``tool_calls`` of a chat completion.
    """
    from openai.types.chat import ChatCompletionMessageToolCall

    async def execute(tool_call: dict[str, Any]) -> str:
        call = ChatCompletionMessageToolCall.model_validate(tool_call)
        result: str = await tools.execute_tool_call(call)
        return result

    return execute


def _outcome(content: Any) -> tuple[bool, str | None]:
    """Whether a tool result reports success (the SDK's tools never raise; they say so)."""
    try:
        data = json.loads(content)
    except (TypeError, ValueError):
        return False, "tool returned invalid JSON"
    if isinstance(data, dict) and data.get("success") is False:
        return False, str(data.get("error", "tool failed"))
    return True, None


async def run_agent(
    script: Sequence[Turn],
    execute: Executor,
    *,
    tracer: Tracer | None = None,
    upstream: Callable[[], int] | None = None,
    on_call: Callable[[CallRecord], None] | None = None,
    on_turn: Callable[[TurnRecord], None] | None = None,
    agent_name: str = "memory-demo",
    pause: float = 0.0,
) -> AgentRun:
    """Play ``script``: steps one after another, the calls of a step concurrently.

    Args:
        execute: runs one tool call.
        tracer: traces turns and calls (the working memory's spans become their children).
        upstream: returns the number of upstream requests so far, for a per-turn count.
        on_call, on_turn: progress callbacks.
        pause: seconds between turns (the model writing its answer and the user the next
            message); left out of every wall time the run reports.
    """
    agent_loop = _AgentLoop(execute, tracer, upstream, on_call, on_turn, agent_name)
    paused = 0.0
    for index, turn in enumerate(script, start=1):
        if pause > 0 and index > 1:
            slept = time.perf_counter()
            await asyncio.sleep(pause)
            paused += time.perf_counter() - slept
        await agent_loop.turn(index, turn)
    agent_loop.run.seconds = time.perf_counter() - agent_loop.origin - paused
    return agent_loop.run


@dataclass
class _AgentLoop:
    """One run of :func:`run_agent`: what it was given, and what it has measured so far."""

    execute: Executor
    tracer: Tracer | None
    upstream: Callable[[], int] | None
    on_call: Callable[[CallRecord], None] | None
    on_turn: Callable[[TurnRecord], None] | None
    agent_name: str
    run: AgentRun = field(default_factory=AgentRun)
    origin: float = field(default_factory=time.perf_counter)  # call starts count from here
    capture: bool = field(default_factory=capture_content)
    calls_made: int = 0  # numbers the call ids: call_<turn>_<n>, n counted over the whole run

    def span(self, name: str, attributes: dict[str, Any]) -> AbstractContextManager[Any]:
        if self.tracer is None:
            return nullcontext()
        return self.tracer.start_as_current_span(
            name, kind=SpanKind.INTERNAL, attributes=attributes
        )

    def upstream_count(self) -> int | None:
        return self.upstream() if self.upstream is not None else None

    async def turn(self, index: int, turn: Turn) -> None:
        """One turn, in an ``invoke_agent`` span: its steps in order, each step's calls at once."""
        before = self.upstream_count()
        attributes = {
            OPERATION_NAME: TURN_SPAN,
            AGENT_NAME: self.agent_name,
            TURN_INDEX: index,
            TURN_TITLE: turn.title,
        }
        with self.span(f"{TURN_SPAN} {self.agent_name}", attributes) as turn_span:
            start = time.perf_counter()
            for step_number, step in enumerate(turn.steps, start=1):
                calls = []
                for tool_call in step:
                    self.calls_made += 1
                    payload = tool_call.openai_json(f"call_{index}_{self.calls_made}")
                    calls.append(self.call(index, step_number, payload))
                await asyncio.gather(*calls)
            seconds = time.perf_counter() - start
            if isinstance(turn_span, Span):
                turn_span.set_attribute("demo.turn.calls", len(turn.calls))
        after = self.upstream_count()
        record = TurnRecord(
            index=index,
            title=turn.title,
            seconds=seconds,
            upstream=None if before is None or after is None else after - before,
        )
        self.run.turns.append(record)
        if self.on_turn is not None:
            self.on_turn(record)

    async def call(self, turn: int, step: int, tool_call: dict[str, Any]) -> None:
        """One tool call, in an ``execute_tool`` span, timed; an executor that raises is
        reported in the record, not fatal."""
        function = tool_call["function"]
        query = json.loads(function["arguments"]).get("information_to_get")
        attributes = {
            OPERATION_NAME: TOOL_SPAN,
            TOOL_NAME: function["name"],
            TOOL_CALL_ID: tool_call["id"],
        }
        if self.capture and isinstance(query, str):
            attributes[QUERY] = query
        with self.span(f"{TOOL_SPAN} {function['name']}", attributes):
            start = time.perf_counter()
            content: Any = ""
            try:
                content = await self.execute(tool_call)
                ok, error = _outcome(content)
            except Exception as exc:
                ok, error = False, f"{type(exc).__name__}: {exc}"
            end = time.perf_counter()
        record = CallRecord(
            turn=turn,
            step=step,
            name=function["name"],
            query=query if isinstance(query, str) else None,
            start=start - self.origin,
            seconds=end - start,
            ok=ok,
            error=error,
            call_id=tool_call["id"],
            result=content if isinstance(content, str) else "",
        )
        self.run.calls.append(record)
        if self.on_call is not None:
            self.on_call(record)
