"""supermemory-agent-framework 2.x (on supermemory 5.x) under ``instrument()``: no code changes.

The tools, the context provider and ``get_profile`` keep working and their repeated reads are
served from the working memory; ``add_memory`` invalidates the namespace it writes to.
"""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pytest

try:
    _MAJOR = version("supermemory-agent-framework").split(".")[0]
except PackageNotFoundError:
    _MAJOR = ""
if _MAJOR != "2":
    pytest.skip("needs supermemory-agent-framework 2.x", allow_module_level=True)

import supermemory
from supermemory_agent_framework import (
    AgentSupermemory,
    SupermemoryContextProvider,
    SupermemoryTools,
)

from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

KEY = "sk-agent"
NS = "user-1"
SEARCH = f"/ns/{NS}/search"
PROFILE = f"/ns/{NS}/profile"


@pytest.fixture
def emulator(emulator: EmulatorServer) -> EmulatorServer:
    """The shared emulator (tests/interception/conftest.py), seeded for one user."""
    emulator.seed(
        KEY,
        [
            "User likes green tea",
            {"content": "User has a peanut allergy", "static": True},
            "User is learning to play the cello",
        ],
        container_tag=NS,
    )
    return emulator


@pytest.fixture
def connection(emulator: EmulatorServer) -> AgentSupermemory:
    conn = AgentSupermemory(api_key=KEY, container_tag=NS, conversation_id="c1")
    # AgentSupermemory has no base_url: point its client at the emulator before building tools.
    conn.client = supermemory.AsyncSupermemory(api_key=KEY, base_url=emulator.base_url)
    return conn


class _Context:
    """The duck-typed session context ``before_run`` reads and extends."""

    def __init__(self, text: str) -> None:
        self.input_messages = [{"role": "user", "content": text}]
        self.instructions: list[str] = []
        self.response = None

    def extend_instructions(self, source_id: str, text: str) -> None:
        self.instructions.append(text)


async def test_search_memories_tool_called_ten_times_sends_one_search(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], connection: AgentSupermemory
) -> None:
    tools = SupermemoryTools(connection)
    outputs = [json.loads(await tools.search_memories("green tea")) for _ in range(10)]
    assert all(output["success"] for output in outputs)
    assert outputs[0]["count"] >= 1
    assert all(output == outputs[0] for output in outputs)
    assert emulator.count("POST", SEARCH) == 1


async def test_get_profile_with_query_twice_sends_one_profile_and_one_search(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], connection: AgentSupermemory
) -> None:
    tools = SupermemoryTools(connection)
    first = json.loads(await tools.get_profile("what is the user allergic to?"))
    second = json.loads(await tools.get_profile("what is the user allergic to?"))
    assert first["success"]
    assert first == second
    assert emulator.count("POST", PROFILE) == 1
    assert emulator.count("POST", SEARCH) == 1


async def test_context_provider_before_run_twice_is_served_from_memory(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], connection: AgentSupermemory
) -> None:
    provider = SupermemoryContextProvider(connection, mode="full")
    contexts = [_Context("what should I cook for the user?") for _ in range(2)]
    for context in contexts:
        await provider.before_run(agent=None, session=None, context=context, state={})
    assert contexts[0].instructions
    assert contexts[0].instructions == contexts[1].instructions
    assert emulator.count("POST", PROFILE) == 1
    assert emulator.count("POST", SEARCH) == 1


async def test_add_memory_sends_the_next_search_to_the_server(
    emulator: EmulatorServer, instrumented: WorkingMemory[Any], connection: AgentSupermemory
) -> None:
    tools = SupermemoryTools(connection)
    await tools.search_memories("green tea")
    await tools.search_memories("green tea")
    assert json.loads(await tools.add_memory("User now prefers coffee"))["success"]
    after = json.loads(await tools.search_memories("green tea"))
    assert after["success"]
    assert emulator.count("POST", SEARCH) == 2
    assert emulator.count("POST", f"/ns/{NS}/document") == 1
