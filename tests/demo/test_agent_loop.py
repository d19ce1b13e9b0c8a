"""The scripted agent loop shared by the demo and the benchmark."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from wm_middleware.demo import REPEATED_QUERY, SCRIPT, percentile, run_agent, turns


def test_turns_cycle_through_the_script() -> None:
    assert turns(len(SCRIPT) + 1) == (*SCRIPT, SCRIPT[0])
    with pytest.raises(ValueError, match="turns must be >= 1"):
        turns(0)


def test_the_first_turn_asks_the_repeated_query_ten_times_and_the_second_writes() -> None:
    first, second = SCRIPT[0], SCRIPT[1]

    assert sum(1 for call in first.calls if call.query == REPEATED_QUERY) == 10
    assert not first.writes
    assert second.writes


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0], 0.95) == pytest.approx(1.95)


async def test_calls_of_a_step_run_concurrently_and_steps_in_order() -> None:
    running = peak = 0

    async def execute(tool_call: dict[str, Any]) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return json.dumps({"success": True})

    run = await run_agent(turns(1), execute)

    assert peak == max(len(step) for step in SCRIPT[0].steps)
    assert len(run.calls) == len(SCRIPT[0].calls)
    steps = [call.step for call in sorted(run.calls, key=lambda c: c.start)]
    assert steps == sorted(steps)
    assert [t.index for t in run.turns] == [1]
    assert run.errors == []


async def test_a_failed_tool_result_is_recorded_as_an_error() -> None:
    async def execute(tool_call: dict[str, Any]) -> str:
        return json.dumps({"success": False, "error": "Memory search failed: boom"})

    run = await run_agent(turns(1), execute)

    assert run.errors
    assert run.errors[0].error == "Memory search failed: boom"
