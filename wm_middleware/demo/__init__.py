"""The ``wm-middleware demo``: a scripted agent loop, uncached vs cached, and its report.

* :mod:`~wm_middleware.demo.script`: the seed memory set and the tool calls of each turn;
* :mod:`~wm_middleware.demo.agent`: the loop that plays them through an executor (normally
  supermemory-openai-sdk's ``SupermemoryTools``) and measures every call and turn; shared with
  ``benchmarks/bench_agent_loop.py``;
* :mod:`~wm_middleware.demo.runner`: the two runs (emulator, seeding, tracer providers);
* :mod:`~wm_middleware.demo.report` and :mod:`~wm_middleware.demo.console`: what is printed.

Only :mod:`.script` and :mod:`.agent` are imported here; the others need the ``demo`` extra and
the OpenTelemetry SDK.
"""

from __future__ import annotations

from .agent import (
    AgentRun,
    CallRecord,
    Executor,
    TurnRecord,
    percentile,
    run_agent,
    supermemory_tools_executor,
)
from .script import CONTAINER_TAG, REPEATED_QUERY, SCRIPT, SEED_MEMORIES, ToolCall, Turn, turns

__all__ = [
    "CONTAINER_TAG",
    "REPEATED_QUERY",
    "SCRIPT",
    "SEED_MEMORIES",
    "AgentRun",
    "CallRecord",
    "Executor",
    "ToolCall",
    "Turn",
    "TurnRecord",
    "percentile",
    "run_agent",
    "supermemory_tools_executor",
    "turns",
]
