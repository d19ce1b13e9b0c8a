"""The ``wm-middleware demo``: a scripted agent loop, uncached vs cached, and its report.

* :mod:`~wm_middleware.demo.script`: the seed memory set and the tool calls of each turn;
* :mod:`~wm_middleware.demo.agent`: the loop that plays them through an executor (normally
  supermemory-openai-sdk's ``SupermemoryTools``) and measures every call and turn; shared with
  ``benchmarks/bench_agent_loop.py``;
* :mod:`~wm_middleware.demo.runner`: the two runs (emulator, seeding, tracer providers);
* :mod:`~wm_middleware.demo.fleet`: ``--workers N``, the loop in N processes with a shared tier;
* :mod:`~wm_middleware.demo.report`, :mod:`~wm_middleware.demo.console` and
  :mod:`~wm_middleware.demo.html`: what is printed and written;
* :mod:`~wm_middleware.demo.cli`: the command's options and what runs it.

The demo is a user of the public API: no module here imports a private module of the package
(``tests/demo/test_public_api.py`` checks it). The names below are loaded on first use, so that
the command line answers ``--help`` without importing OpenTelemetry; runner, report, console,
fleet and html need the ``demo`` extra.
"""

from __future__ import annotations

import importlib as _importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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

# Each name -> its module: the script's data, else the agent loop's.
_SCRIPT = frozenset(
    ("CONTAINER_TAG", "REPEATED_QUERY", "SCRIPT", "SEED_MEMORIES", "ToolCall", "Turn", "turns")
)
_LAZY = {name: ".script" if name in _SCRIPT else ".agent" for name in __all__}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wm_middleware.demo' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
