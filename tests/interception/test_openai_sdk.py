"""supermemory-openai-sdk: the tools (SDK 3.x underneath) and the middleware's profile search.

The tools go through the SDK, so the sdk3 adapter caches them; the middleware's profile search
uses aiohttp (or ``requests``) and is cached by the openai_middleware adapter. Assertions are on
the requests the emulator saw.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("supermemory_openai", reason="needs supermemory-openai-sdk (supermemory 3.x)")

import httpx
import supermemory
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageToolCall
from supermemory_openai import (
    OpenAIMiddlewareOptions,
    SupermemoryTools,
    execute_memory_tool_calls,
    middleware,
    with_supermemory,
)
from supermemory_openai.exceptions import SupermemoryAPIError
from supermemory_openai.utils import create_logger

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

KEY = "test-key"
TAG = "user-1"
PROFILE = "/v4/profile"


@pytest.fixture
def server(emulator: EmulatorServer) -> EmulatorServer:
    emulator.seed(
        KEY,
        [
            {"content": "User is called Ada", "static": True},
            "User drinks green tea every morning",
            "User lives in Lyon",
        ],
        container_tag=TAG,
    )
    return emulator


def _tools(server: EmulatorServer) -> SupermemoryTools:
    return SupermemoryTools(KEY, {"base_url": server.base_url, "container_tags": [TAG]})


def _profile_search(server: EmulatorServer, query: str = "what does the user drink") -> Any:
    # Looked up on the module at call time, as ``add_system_prompt`` does.
    return middleware.supermemory_profile_search(TAG, query, KEY, server.base_url)


# -- SupermemoryTools ------------------------------------------------------------------------------
async def test_search_memories_reaches_the_server_once_with_uncached_results(
    server: EmulatorServer,
) -> None:
    uncached = await _tools(server).search_memories("tea")
    server.reset_counts()
    wm_middleware.instrument()
    try:
        tools = _tools(server)
        results = [await tools.search_memories("tea") for _ in range(10)]
    finally:
        wm_middleware.uninstrument()
    assert server.count("POST", "/v4/search") == 1
    assert uncached["success"]
    assert uncached["results"]
    assert all(result == uncached for result in results)
    # The Stainless alias duplication survives the cache: both spellings, as without it.
    assert {"updated_at", "updatedAt"} <= set(results[-1]["results"][0])


async def test_add_memory_makes_the_next_search_reach_the_server(
    instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    tools = _tools(server)
    await tools.search_memories("tea")
    assert (await tools.add_memory("User switched to coffee"))["success"]
    await tools.search_memories("tea")
    assert server.count("POST", "/v3/documents") == 1
    assert server.count("POST", "/v4/search") == 2


async def test_execute_memory_tool_calls_with_a_new_client_per_call_still_hits(
    instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    call = ChatCompletionMessageToolCall(
        id="call-1",
        type="function",
        function={
            "name": "search_memories",
            "arguments": json.dumps({"information_to_get": "tea"}),
        },
    )
    config = {"base_url": server.base_url, "container_tags": [TAG]}
    first = await execute_memory_tool_calls(KEY, [call], config)  # type: ignore[arg-type]
    second = await execute_memory_tool_calls(KEY, [call], config)  # type: ignore[arg-type]
    assert server.count("POST", "/v4/search") == 1
    assert first == second
    assert json.loads(second[0]["content"])["success"]


# -- middleware profile search ---------------------------------------------------------------------
@pytest.fixture(params=["aiohttp", "requests"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which HTTP library the profile search uses: ``import aiohttp`` fails for "requests"."""
    if request.param == "aiohttp":
        pytest.importorskip("aiohttp", reason="needs aiohttp (the test extra installs it)")
    else:
        monkeypatch.setitem(sys.modules, "aiohttp", None)
    return str(request.param)


def test_the_test_extra_installs_the_aiohttp_the_profile_search_cases_use() -> None:
    """A clean ``pip install -e '.[test,demo]'`` runs the aiohttp case instead of skipping it."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    test_extra = pyproject["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"aiohttp\b", requirement) for requirement in test_extra), test_extra


async def test_profile_search_reaches_the_server_once(
    transport: str, instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    results = [await _profile_search(server) for _ in range(10)]
    assert server.count("POST", PROFILE) == 1
    assert all(isinstance(r, middleware.SupermemoryProfileSearch) for r in results)
    assert results[0].profile["static"] == ["User is called Ada"]
    assert all(vars(r) == vars(results[0]) for r in results)
    user_agent = server.last_request("POST", PROFILE).headers.get("user-agent", "")  # type: ignore[union-attr]
    assert ("aiohttp" if transport == "aiohttp" else "python-requests") in user_agent.lower()


async def test_profile_search_results_are_fresh_per_caller(
    instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    first = await _profile_search(server)
    expected = json.dumps(vars(first), sort_keys=True)
    first.profile["static"].append("poisoned")
    first.search_results.clear()
    second = await _profile_search(server)
    assert second is not first
    assert json.dumps(vars(second), sort_keys=True) == expected
    assert server.count("POST", PROFILE) == 1


@pytest.mark.parametrize(
    "other",
    [
        pytest.param((TAG, "where does the user live", KEY), id="query"),
        pytest.param(("user-2", "what does the user drink", KEY), id="tag"),
        pytest.param((TAG, "what does the user drink", "other-key"), id="api-key"),
    ],
)
async def test_profile_search_key_holds_tag_query_and_tenant(
    instrumented: WorkingMemory[Any], server: EmulatorServer, other: tuple[str, str, str]
) -> None:
    await _profile_search(server)
    tag, query, key = other
    for _ in range(2):
        await middleware.supermemory_profile_search(tag, query, key, server.base_url)
    assert server.count("POST", PROFILE) == 2


async def test_profile_search_errors_reach_the_caller_and_are_not_cached(
    transport: str, instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    server.fail_next(1, 500, path=PROFILE)
    with pytest.raises(SupermemoryAPIError) as raised:
        await _profile_search(server)
    assert raised.value.status_code == 500
    assert (await _profile_search(server)).profile["static"] == ["User is called Ada"]
    assert server.count("POST", PROFILE) == 2


async def test_middleware_write_invalidates_the_profile_search(
    instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    logger = create_logger(False)
    messages: list[Any] = [{"role": "user", "content": "what does the user drink"}]
    client = supermemory.Supermemory(api_key=KEY, base_url=server.base_url)
    for _ in range(3):
        await middleware.add_system_prompt(messages, TAG, logger, "full", KEY, server.base_url)
    await middleware.add_memory_tool(client, TAG, "User switched to coffee", "conv-1", logger)
    prompted = await middleware.add_system_prompt(
        messages, TAG, logger, "full", KEY, server.base_url
    )
    assert server.count("POST", "/v3/documents") == 1
    assert server.count("POST", PROFILE) == 2
    assert "Ada" in json.dumps(prompted)


def test_add_system_prompt_under_asyncio_run_per_call_hits_across_loops(
    instrumented: WorkingMemory[Any], server: EmulatorServer
) -> None:
    logger = create_logger(False)
    messages: list[Any] = [{"role": "user", "content": "what does the user drink"}]
    prompts = [
        asyncio.run(
            middleware.add_system_prompt(messages, TAG, logger, "full", KEY, server.base_url)
        )
        for _ in range(5)
    ]
    assert server.count("POST", PROFILE) == 1
    assert all(prompt == prompts[0] for prompt in prompts)


# -- with_supermemory(OpenAI(...)), sync ---------------------------------------------------------
def _chat_completion(request: httpx.Request) -> httpx.Response:
    """OpenAI's side only (not Supermemory): an in-process chat-completions answer."""
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Green tea."},
                }
            ],
        },
    )


@pytest.fixture
def openai_client() -> Iterator[OpenAI]:
    with httpx.Client(transport=httpx.MockTransport(_chat_completion)) as http_client:
        yield OpenAI(api_key="x", base_url="http://openai.test/v1", http_client=http_client)


@pytest.mark.parametrize(("add_memory", "profile_requests"), [("never", 1), ("always", 3)])
def test_with_supermemory_sync_create_reads_once_unless_it_writes(
    instrumented: WorkingMemory[Any],
    server: EmulatorServer,
    openai_client: OpenAI,
    add_memory: str,
    profile_requests: int,
) -> None:
    options = OpenAIMiddlewareOptions(
        container_tag=TAG,
        custom_id="conv-1",
        mode="full",
        add_memory=add_memory,  # type: ignore[arg-type]
        api_key=KEY,
        base_url=server.base_url,
    )
    wrapped = with_supermemory(openai_client, options)
    for _ in range(3):
        answer = wrapped.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "what does the user drink"}]
        )
        assert answer.choices[0].message.content == "Green tea."
    # "always" adds the conversation before each read: every add invalidates the profile.
    assert server.count("POST", "/v3/documents") == (3 if add_memory == "always" else 0)
    assert server.count("POST", PROFILE) == profile_requests
