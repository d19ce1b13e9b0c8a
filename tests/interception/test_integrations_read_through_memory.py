"""Integrations on supermemory 3.x behind ``instrument()``: agent-framework 1.x, pipecat, cartesia.

Each integration is driven through the entry points it uses in production (tools, context
provider hooks, ``_retrieve_memories``/``_store_messages``) without an LLM, against the emulator
over HTTP. The assertions are on the requests the emulator received and on the values the
integration hands back, compared with what the same call returns without ``instrument()``.

Integrations swallow errors (tools answer ``success: false``, the context provider injects
nothing), so a read that silently failed would still "return": every read here also checks that
the seeded memory came back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ..conftest import SDK_MAJOR, answer_of, until

if SDK_MAJOR != "3":
    pytest.skip("needs supermemory 3.x", allow_module_level=True)

supermemory = pytest.importorskip("supermemory")
agent_framework = pytest.importorskip("supermemory_agent_framework")
supermemory_pipecat = pytest.importorskip("supermemory_pipecat")
supermemory_cartesia = pytest.importorskip("supermemory_cartesia")

from supermemory._models import BaseModel  # noqa: E402

from wm_middleware import WorkingMemory  # noqa: E402
from wm_middleware.emulator import EmulatorServer  # noqa: E402

from .conftest import instrumentation  # noqa: E402

KEY = "sk-integrations"
TAG = "user-1"
EXTRA_TAG = "org-a"  # cartesia's additional container tag
QUERY = "green tea"
SEEDED = "User likes green tea"
STATIC = "User has a peanut allergy"
NEW_FACT = "I also like jasmine green tea"

SEARCH = "/v4/search"
PROFILE = "/v4/profile"
ADD = "/v3/documents"

Call = Callable[[], Awaitable[Any]]


# -- fixtures and helpers -------------------------------------------------------------------------
@pytest.fixture
def server(emulator: EmulatorServer) -> EmulatorServer:
    """The emulator with two memories of ``TAG``: one dynamic, one static."""
    emulator.seed(
        KEY, [{"content": SEEDED}, {"content": STATIC, "static": True}], container_tag=TAG
    )
    return emulator


def plain(value: Any) -> Any:
    """``value`` as comparable JSON data; SDK models keep their class name.

    Tool results (JSON text) are parsed and must report ``success``. Two answers fetched apart
    are compared through ``answer_of`` too (it drops the per-request fields).
    """
    if isinstance(value, BaseModel):
        return {"__model__": type(value).__qualname__, **plain(value.model_dump(mode="json"))}
    if isinstance(value, str) and value.startswith("{"):
        parsed = json.loads(value)
        assert parsed.get("success") is True, parsed
        return plain(parsed)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def text_of(value: Any) -> str:
    return json.dumps(plain(value))


# ``until(condition, what)`` is tests/conftest.py's.


class SessionContext:
    """The part of agent_framework's ``SessionContext`` the Supermemory hooks use."""

    def __init__(self, messages: list[dict[str, str]]) -> None:
        self.input_messages = messages
        self.response = None
        self.instructions: list[str] = []

    def extend_instructions(self, source_id: str, text: str) -> None:
        self.instructions.append(text)


# -- the integrations, built against a server ------------------------------------------------------
def connection(base_url: str) -> Any:
    """An ``AgentSupermemory`` pointed at ``base_url``: it has no ``base_url`` option of its own.

    Its client must be replaced before tools or providers are built: they copy it.
    """
    conn = agent_framework.AgentSupermemory(api_key=KEY, container_tag=TAG, conversation_id="c1")
    conn.client = supermemory.AsyncSupermemory(api_key=KEY, base_url=base_url)
    return conn


def tools(base_url: str) -> Any:
    return agent_framework.SupermemoryTools(connection(base_url))


def context_provider(base_url: str, **options: Any) -> Any:
    return agent_framework.SupermemoryContextProvider(connection(base_url), mode="full", **options)


async def before_run(provider: Any, messages: list[dict[str, str]]) -> list[str]:
    """The instructions ``before_run`` injects for a turn ending with ``messages``."""
    context = SessionContext(messages)
    await provider.before_run(agent=None, session=None, context=context, state={})
    return context.instructions


def pipecat(base_url: str) -> Any:
    return supermemory_pipecat.SupermemoryPipecatService(
        api_key=KEY, user_id=TAG, session_id="s1", base_url=base_url
    )


def cartesia(base_url: str) -> Any:
    return supermemory_cartesia.SupermemoryCartesiaAgent(
        agent=object(),
        api_key=KEY,
        container_tag=TAG,
        custom_id="call-1",
        container_tags=[EXTRA_TAG],
        base_url=base_url,
    )


@dataclass(frozen=True)
class Reader:
    """One read path of an integration: the emulator path it reaches and how to call it."""

    path: str
    repeats: int  # how often a turn plausibly repeats it
    integration: Callable[[str], Any]  # base URL -> the integration object, built once
    read: Callable[[Any], Awaitable[Any]]  # the read, of that object

    def build(self, base_url: str) -> Call:
        """The read of an integration built against ``base_url``."""
        built = self.integration(base_url)
        return lambda: self.read(built)


READERS = {
    "agent_framework.search_memories": Reader(
        SEARCH, 10, tools, lambda built: built.search_memories(QUERY)
    ),
    "agent_framework.get_profile": Reader(
        PROFILE, 2, tools, lambda built: built.get_profile(QUERY)
    ),
    "agent_framework.before_run": Reader(
        PROFILE,
        2,
        context_provider,
        lambda provider: before_run(provider, [{"role": "user", "content": QUERY}]),
    ),
    "pipecat._retrieve_memories": Reader(
        PROFILE, 5, pipecat, lambda service: service._retrieve_memories(QUERY)
    ),
    "cartesia._retrieve_memories": Reader(
        PROFILE, 5, cartesia, lambda agent: agent._retrieve_memories(QUERY)
    ),
}


@dataclass(frozen=True)
class Writer:
    """A write of an integration followed by its read, and the tags the write must name."""

    read_path: str
    tags: dict[str, Any]  # tag fields of the POST /v3/documents body
    build: Callable[[str], tuple[Call, Call]]  # -> (read, write)


def _add_memory(base_url: str) -> tuple[Call, Call]:
    built = tools(base_url)
    return (lambda: built.search_memories(QUERY)), (lambda: built.add_memory(NEW_FACT))


def _after_run(base_url: str) -> tuple[Call, Call]:
    provider = context_provider(base_url, store_conversations=True)
    turn = [{"role": "user", "content": NEW_FACT}]

    async def write() -> None:
        context = SessionContext(turn)
        await provider.after_run(agent=None, session=None, context=context, state={})

    return (lambda: before_run(provider, turn)), write


def _pipecat_store(base_url: str) -> tuple[Call, Call]:
    service = pipecat(base_url)
    return (
        lambda: service._retrieve_memories(QUERY),
        lambda: service._store_messages([{"role": "user", "content": NEW_FACT}]),
    )


def _cartesia_store(base_url: str) -> tuple[Call, Call]:
    agent = cartesia(base_url)
    return (
        lambda: agent._retrieve_memories(QUERY),
        lambda: agent._store_messages([{"role": "user", "content": NEW_FACT}]),
    )


WRITERS = {
    "agent_framework.add_memory": Writer(SEARCH, {"containerTag": TAG}, _add_memory),
    "agent_framework.after_run": Writer(PROFILE, {"containerTag": TAG}, _after_run),
    "pipecat._store_messages": Writer(PROFILE, {"containerTags": [TAG]}, _pipecat_store),
    "cartesia._store_messages": Writer(
        PROFILE, {"containerTags": [TAG, EXTRA_TAG]}, _cartesia_store
    ),
}


@pytest.fixture(params=list(READERS))
def reader(request: pytest.FixtureRequest) -> Reader:
    return READERS[request.param]


@pytest.fixture(params=list(WRITERS))
def writer(request: pytest.FixtureRequest) -> Writer:
    return WRITERS[request.param]


# -- every integration ---------------------------------------------------------------------------
async def test_repeated_read_reaches_the_server_once(
    reader: Reader, server: EmulatorServer, instrumented: WorkingMemory[Any]
) -> None:
    read = reader.build(server.base_url)

    results = [plain(await read()) for _ in range(reader.repeats)]

    assert server.count("POST", reader.path) == 1
    assert server.count() == 1
    assert all(result == results[0] for result in results)
    assert SEEDED in json.dumps(results[0])
    stats = instrumented.stats()
    assert (stats.misses, stats.hits) == (1, reader.repeats - 1)


async def test_instrumented_read_returns_what_the_plain_read_returns(
    reader: Reader, server: EmulatorServer
) -> None:
    # One integration object throughout: built before instrument(), it is intercepted too.
    read = reader.build(server.base_url)
    uncached = await read()
    with instrumentation():
        missed = await read()
        hit = await read()

    assert server.count("POST", reader.path) == 2
    assert SEEDED in text_of(uncached)
    assert answer_of(plain(missed)) == answer_of(plain(uncached))
    assert plain(hit) == plain(missed)


async def test_hit_is_isolated_from_what_a_caller_did_to_its_result(
    reader: Reader, server: EmulatorServer, instrumented: WorkingMemory[Any]
) -> None:
    read = reader.build(server.base_url)
    first = await read()
    expected = plain(first)
    _tamper(first)

    assert plain(await read()) == expected
    assert server.count("POST", reader.path) == 1


def _tamper(value: Any) -> None:
    """Mutate every mutable container and SDK model reachable from ``value``."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            current = getattr(value, name)
            if isinstance(current, str):
                setattr(value, name, "tampered")
            else:
                _tamper(current)
    elif isinstance(value, dict):
        for item in value.values():
            _tamper(item)
        value["tampered"] = True
    elif isinstance(value, list):
        for item in value:
            _tamper(item)
        value.append("tampered")


async def test_write_then_read_reaches_the_server_and_sees_the_write(
    writer: Writer, server: EmulatorServer, instrumented: WorkingMemory[Any]
) -> None:
    read, write = writer.build(server.base_url)
    before = await read()
    await read()
    assert server.count("POST", writer.read_path) == 1

    await write()
    after = await read()

    assert server.count("POST", ADD) == 1
    sent = server.last_request("POST", ADD)
    assert sent is not None
    assert isinstance(sent.json, dict)
    assert {name: sent.json.get(name) for name in writer.tags} == writer.tags
    assert server.count("POST", writer.read_path) == 2
    assert "jasmine" not in text_of(before)
    assert "jasmine" in text_of(after)


# -- agent-framework -----------------------------------------------------------------------------
async def test_context_provider_injects_the_same_instructions_for_the_same_last_user_message(
    server: EmulatorServer, instrumented: WorkingMemory[Any]
) -> None:
    provider = context_provider(server.base_url)
    first_turn = [{"role": "user", "content": QUERY}]
    later_turn = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi, how can I help?"},
        {"role": "user", "content": QUERY},
    ]

    first = await before_run(provider, first_turn)
    second = await before_run(provider, later_turn)

    assert server.count("POST", PROFILE) == 1
    assert server.count() == 1
    assert len(first) == 1
    assert second == first
    assert SEEDED in first[0]
    assert STATIC in first[0]


# -- cartesia: a waiter leaving must not cancel the fetch the others share ---------------------
@pytest.mark.parametrize(
    ("leaver", "raised"),
    [("first caller cancelled", asyncio.CancelledError), ("late caller timed out", TimeoutError)],
)
async def test_caller_leaving_mid_fetch_does_not_cancel_the_shared_fetch(
    leaver: str,
    raised: type[BaseException],
    server: EmulatorServer,
    instrumented: WorkingMemory[Any],
) -> None:
    agent = cartesia(server.base_url)
    others = 5
    # Held until released below; bounded below cartesia's own 10 s timeout.
    server.hang_next(1, seconds=8.0, path=PROFILE, method="POST")
    first = asyncio.create_task(agent._retrieve_memories(QUERY))
    waiting = [first]
    try:
        await until(lambda: server.count("POST", PROFILE) == 1, "the first request is held")
        waiting += [asyncio.create_task(agent._retrieve_memories(QUERY)) for _ in range(others)]
        await until(lambda: instrumented.stats().coalesced == others, "the others joined it")

        if leaver == "first caller cancelled":
            waiting.remove(first)
            first.cancel()
            leaving = first
        else:
            leaving = asyncio.create_task(
                asyncio.wait_for(agent._retrieve_memories(QUERY), timeout=0.05)
            )
        with pytest.raises(raised):
            await leaving

        assert instrumented.stats().inflight == 1  # the shared fetch still runs
        assert not any(task.done() for task in waiting)
    finally:
        server.stopping.set()  # releases the held request (the server keeps serving)
        outcomes = await asyncio.gather(*waiting, return_exceptions=True)
        server.stopping.clear()

    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert all(plain(o) == plain(outcomes[0]) for o in outcomes)
    assert SEEDED in text_of(outcomes[0])
    assert server.count("POST", PROFILE) == 1
    stats = instrumented.stats()
    joined = others if leaver == "first caller cancelled" else others + 1
    assert (stats.misses, stats.coalesced, stats.inflight, stats.size) == (1, joined, 0, 1)

    assert plain(await agent._retrieve_memories(QUERY)) == plain(outcomes[0])
    assert server.count("POST", PROFILE) == 1
    assert instrumented.stats().hits == 1
