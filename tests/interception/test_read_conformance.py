"""A cached read behaves exactly like the SDK's own call: the SDK's client tests, aimed at reads.

Written the way the SDK's ``tests/test_client.py`` is (retries and the retry-count header,
retries running out, retry-after, timeouts, connection errors, validation, per-call options, raw
and streaming responses), but aimed at every route the working memory caches, of the installed
generation (3.x: ``search.memories``, ``search.execute``, ``search.documents``, ``profile``,
``documents.list``; 5.x: ``search``, ``profile``, ``list``), sync and async. Each scenario runs
twice against a scripted server in front of the emulator (:mod:`._scripted`): plain, then under
``instrument()``; the caller's outcome and the requests upstream saw must be the same.

Then what only concurrency shows: callers with different options at once (threads and tasks),
each getting the outcome its own options give it; a cancelled caller. The one-caller scenarios
run on trio too, and concurrent trio callers share one request.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import anyio
import pytest
import trio

from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

from ..conftest import until
from ._scripted import Answer, ScriptedServer
from .conftest import KEY, QUERY, TAG, Generation, done, instrumentation, make_client

MAJOR = version("supermemory").split(".")[0]
FAST = {"retry-after-ms": "1"}  # both SDKs honour it: retries without a back-off wait
# Invalid for every cached model of 3.x when validated strictly.
INVALID = {"results": "oops", "profile": "oops", "memories": "oops", "timing": "x", "total": 0}

# A loose (default) client takes it for every cached model, at once: no forwarding under a short
# timeout that a loaded machine could miss.
ANY_BODY = {"results": [], "timing": 1, "total": 0, "memories": [], "profile": {}}

Call = Callable[..., Any]


def _reads() -> dict[str, tuple[str, Call]]:
    """Every cached read of the installed generation: (path part, call(client, **options))."""
    if MAJOR == "3":
        return {
            "search.memories": (
                "/v4/search",
                lambda c, **o: c.search.memories(q=QUERY, container_tag=TAG, **o),
            ),
            "search.execute": (
                "/v3/search",
                lambda c, **o: c.search.execute(q=QUERY, container_tags=[TAG], **o),
            ),
            "search.documents": (
                "/v3/search",
                lambda c, **o: c.search.documents(q=QUERY, container_tags=[TAG], **o),
            ),
            "profile": ("/v4/profile", lambda c, **o: c.profile(container_tag=TAG, q=QUERY, **o)),
            "documents.list": (
                "/v3/documents/list",
                lambda c, **o: c.documents.list(container_tags=[TAG], **o),
            ),
        }
    return {
        "search": ("/search", lambda c, **o: c.search(TAG, query=QUERY, **o)),
        "profile": ("/profile", lambda c, **o: c.profile(TAG, **o)),
        "list": ("/list/", lambda c, **o: c.list(TAG, "memories", limit=10, **o)),
    }


READS = _reads()

# A client timeout that no loopback answer comes near, however loaded the machine, and an answer
# later than it by more than any pause of the client (so the client always gives up first). A
# request the client gave up on still reaches the server: ``_run`` waits for it.
IMPATIENT = 1.0
TOO_LATE = IMPATIENT + 4.0
SLOW = 1.5  # an answer slow enough that a second caller starts while it is awaited
CALLERS = 4  # concurrent callers of one read


@pytest.fixture(scope="module")
def _scripted(emulator_server: EmulatorServer) -> Iterator[ScriptedServer]:
    with ScriptedServer(emulator_server.base_url) as server:
        yield server


@pytest.fixture
def upstream(emulator: EmulatorServer, _scripted: ScriptedServer) -> ScriptedServer:
    """The scripted server, empty script, in front of a seeded emulator."""
    emulator.seed(KEY, ["User likes green tea", "User drinks coffee"], container_tag=TAG)
    _scripted.reset()
    return _scripted


pytestmark = pytest.mark.usefixtures("fast_retries")


@pytest.fixture(params=list(READS))
def read(request: pytest.FixtureRequest) -> str:
    """Each test using it runs once per cached read of :data:`READS`."""
    return str(request.param)


def summary(result: Any) -> tuple[str, str]:
    """What a caller saw: ``("raised", error type)`` or ``("returned", value type)``."""
    kind = "raised" if isinstance(result, BaseException) else "returned"
    return (kind, type(result).__name__)


async def outcome(call: Callable[[], Any]) -> Any:
    try:
        return await done(call())
    except Exception as error:
        return error


# -- one caller: the same outcome and the same requests, plain and instrumented -------------------
@dataclass(frozen=True)
class Scenario:
    answers: tuple[Answer, ...]
    client: dict[str, Any] = field(default_factory=dict)
    call: dict[str, Any] = field(default_factory=dict)
    expect: str = "returned"  # the plain outcome, so a scenario cannot silently test nothing
    strict: bool | None = None  # 3.x ``_strict_response_validation``; None: the SDK default
    sent: int = 1  # requests the plain call makes (retries included)


SCENARIOS: dict[str, Scenario] = {
    "a 500 then a 200 is retried": Scenario(
        (Answer(500, headers=FAST),), {"max_retries": 2}, sent=2
    ),
    "retries run out": Scenario(
        (Answer(500, headers=FAST),) * 3, {"max_retries": 2}, {}, "raised", sent=3
    ),
    "a 429 with retry-after is retried": Scenario(
        (Answer(429, headers={**FAST, "retry-after": "0"}),), {"max_retries": 1}, sent=2
    ),
    "a 400 is not retried": Scenario(
        (Answer(400, {"error": "bad"}),), {"max_retries": 2}, {}, "raised"
    ),
    "max_retries=0 raises the first 500": Scenario(
        (Answer(500, headers=FAST),), {"max_retries": 0}, {}, "raised"
    ),
    "a client timeout": Scenario(
        (Answer(delay=TOO_LATE),), {"timeout": IMPATIENT, "max_retries": 0}, {}, "raised"
    ),
    "a timeout then a retry": Scenario(
        (Answer(delay=TOO_LATE), Answer(200, ANY_BODY)),
        {"timeout": IMPATIENT, "max_retries": 1},
        sent=2,
    ),
    "a per-call timeout": Scenario(
        (Answer(delay=TOO_LATE),), {"max_retries": 0}, {"timeout": IMPATIENT}, "raised"
    ),
    "a dropped connection": Scenario((Answer(drop=True),), {"max_retries": 0}, {}, "raised"),
    "a dropped connection then a retry": Scenario((Answer(drop=True),), {"max_retries": 1}, sent=2),
    "per-call extra headers": Scenario((), {}, {"extra_headers": {"x-conformance": "yes"}}),
}
if MAJOR == "3":
    SCENARIOS |= {
        "an invalid body, strict": Scenario((Answer(200, INVALID),), {}, {}, "raised", True),
        "an invalid body, loose": Scenario((Answer(200, INVALID),), {}, {}, "returned", False),
        "a text body, strict": Scenario((Answer(200, text="not json"),), {}, {}, "raised", True),
        "a text body, loose": Scenario((Answer(200, text="not json"),), {}, {}, "returned", False),
    }


async def _run(
    scenario: Scenario, upstream: ScriptedServer, mode: str, read: str
) -> tuple[tuple[str, str], int, list[str | None], list[str | None]]:
    """The caller's outcome, the requests made, their retry counts and the test header."""
    path, call = READS[read]
    upstream.reset()
    upstream.script(*scenario.answers)
    options = dict(scenario.client)
    if scenario.strict is not None:
        options["_strict_response_validation"] = scenario.strict
    client = make_client(mode, upstream.base_url, **options)
    result = await outcome(lambda: call(client, **scenario.call))
    # A request the client gave up on may reach the server's thread only after the call ended.
    await anyio.to_thread.run_sync(upstream.wait_for, scenario.sent)  # asyncio or trio
    seen = upstream.requests(path)
    marks = [request.headers.get("x-conformance") for request in seen]
    return summary(result), len(seen), upstream.retry_counts(path), marks


async def _one_caller(upstream: ScriptedServer, mode: str, read: str, name: str) -> None:
    """The scenario ``name`` plain, then under ``instrument()``: the same outcome and requests;
    then an error is never stored and a value is."""
    scenario = SCENARIOS[name]
    plain = await _run(scenario, upstream, mode, read)
    assert plain[0][0] == scenario.expect, plain
    assert plain[1] == scenario.sent, plain
    if MAJOR == "3":  # Stainless numbers its attempts
        assert plain[2] == [str(attempt) for attempt in range(scenario.sent)]
    if "extra_headers" in scenario.call:
        assert plain[3] == ["yes"]
    with instrumentation() as memory:
        cached = await _run(scenario, upstream, mode, read)
        assert cached == plain
        # An error is never stored: the next call goes upstream. A value is: the next is a hit.
        path, call = READS[read]
        options = {k: v for k, v in scenario.call.items() if k != "timeout"}  # not for a hit
        again = await outcome(lambda: call(make_client(mode, upstream.base_url), **options))
        after = len(upstream.requests(path))
        assert summary(again)[0] == "returned"
        assert after == cached[1] + (1 if plain[0][0] == "raised" else 0)
        assert memory.stats().hits == (0 if plain[0][0] == "raised" else 1)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_one_caller_sees_what_the_sdk_alone_gives(
    upstream: ScriptedServer, mode: str, read: str, name: str
) -> None:
    await _one_caller(upstream, mode, read, name)


@pytest.mark.skipif(MAJOR != "3", reason="the 5.x async client retries with asyncio.sleep")
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_one_trio_caller_sees_what_the_sdk_alone_gives(
    upstream: ScriptedServer, read: str, name: str
) -> None:
    trio.run(_one_caller, upstream, "async", read, name)


# -- raw and streaming responses: observed, never served from memory ---------------------------
def _raw(client: Any, read: str) -> Any:
    _, call = READS[read]
    return call(client.with_raw_response)


async def test_raw_responses_reach_upstream_every_time_and_retry_as_plain(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], mode: str, read: str
) -> None:
    path, _ = READS[read]
    client = make_client(mode, upstream.base_url, max_retries=2)
    upstream.script(Answer(500, headers=FAST))
    first = await done(_raw(client, read))
    second = await done(_raw(client, read))
    assert first.status_code == second.status_code == 200
    assert len(upstream.requests(path)) == 3  # one retried, one plain, none from memory
    assert instrumented.stats().hits == 0


@pytest.mark.skipif(MAJOR != "3", reason="3.x streams responses")
async def test_streaming_responses_reach_upstream_every_time(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], mode: str, read: str
) -> None:
    path, call = READS[read]
    client = make_client(mode, upstream.base_url)
    for _ in range(2):
        if mode == "async":
            async with call(client.with_streaming_response) as response:
                assert type(await response.parse()).__name__.endswith("Response")
        else:
            with call(client.with_streaming_response) as response:
                assert type(response.parse()).__name__.endswith("Response")
    assert len(upstream.requests(path)) == 2
    assert instrumented.stats().hits == 0


# -- strictness is part of the entry (issue 17, item 2) ------------------------------------------
@pytest.mark.skipif(MAJOR != "3", reason="5.x models are never validated strictly")
@pytest.mark.parametrize("body", ["invalid json", "text"])
async def test_a_strict_client_is_never_served_what_a_loose_client_accepted(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], mode: str, read: str, body: str
) -> None:
    path, call = READS[read]
    answer = Answer(200, INVALID) if body == "invalid json" else Answer(200, text="not json")
    upstream.script(answer, answer)
    loose = make_client(mode, upstream.base_url, _strict_response_validation=False)
    strict = make_client(mode, upstream.base_url, _strict_response_validation=True)
    accepted = await outcome(lambda: call(loose))
    assert summary(accepted)[0] == "returned"
    rejected = await outcome(lambda: call(strict))
    assert summary(rejected) == ("raised", "APIResponseValidationError")
    assert len(upstream.requests(path)) == 2


# -- callers with different options at once (issue 17, item 1) -----------------------------------
async def _together(
    mode: str, upstream: ScriptedServer, first: Call, second: Call
) -> tuple[Any, Any]:
    """``first`` starts; once upstream has its request, ``second`` starts; both outcomes."""
    if mode == "async":
        leader = asyncio.ensure_future(outcome(first))
        await asyncio.to_thread(upstream.wait_for, 1)
        follower = await outcome(second)
        return await leader, follower
    results: dict[str, Any] = {}

    def run(name: str, call: Call) -> None:
        try:
            results[name] = call()
        except Exception as error:
            results[name] = error

    thread = threading.Thread(target=run, args=("first", first))
    thread.start()
    await asyncio.to_thread(upstream.wait_for, 1)
    await asyncio.to_thread(run, "second", second)
    await asyncio.to_thread(thread.join, 10)
    return results["first"], results["second"]


# (the first caller's client options, the second's, the answer upstream gives the first, the
# error the first sees): the second caller's own options get it an answer.
APART = {
    "a caller with retries left does not share the error of one without": (
        {"max_retries": 0},
        {"max_retries": 3},
        Answer(500, headers=FAST, delay=SLOW),
        "InternalServerError",
    ),
    "a patient caller does not share the timeout of an impatient one": (
        {"timeout": IMPATIENT, "max_retries": 0},
        {"timeout": 30, "max_retries": 0},
        Answer(delay=TOO_LATE),
        "APITimeoutError",
    ),
}


@pytest.mark.parametrize("case", list(APART))
async def test_a_caller_does_not_share_an_outcome_its_own_options_would_not_give(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], mode: str, read: str, case: str
) -> None:
    path, call = READS[read]
    first_options, second_options, answer, error = APART[case]
    first = make_client(mode, upstream.base_url, **first_options)
    second = make_client(mode, upstream.base_url, **second_options)
    upstream.script(answer)
    failed, answered = await _together(mode, upstream, lambda: call(first), lambda: call(second))
    assert summary(failed) == ("raised", error)
    assert summary(answered)[0] == "returned"
    assert len(upstream.requests(path)) == 2


async def test_a_per_call_timeout_decides_who_shares_a_flight(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], mode: str, read: str
) -> None:
    _, call = READS[read]
    client = make_client(mode, upstream.base_url, max_retries=0)
    upstream.script(Answer(delay=TOO_LATE))
    timed_out, answered = await _together(
        mode, upstream, lambda: call(client, timeout=IMPATIENT), lambda: call(client)
    )
    assert summary(timed_out) == ("raised", "APITimeoutError")
    assert summary(answered)[0] == "returned"


async def test_callers_with_the_same_options_still_share_one_request_and_then_the_entry(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], mode: str, read: str
) -> None:
    path, call = READS[read]
    one = make_client(mode, upstream.base_url, max_retries=2)
    other = make_client(mode, upstream.base_url, max_retries=2)
    upstream.script(Answer(delay=SLOW))
    first, second = await _together(mode, upstream, lambda: call(one), lambda: call(other))
    assert summary(first)[0] == summary(second)[0] == "returned"
    assert len(upstream.requests(path)) == 1
    assert instrumented.stats().coalesced == 1
    # The key holds only what changes the value: other retries and timeouts hit the entry.
    patient = make_client(mode, upstream.base_url, max_retries=5, timeout=30)
    assert summary(await outcome(lambda: call(patient)))[0] == "returned"
    assert len(upstream.requests(path)) == 1


async def test_a_cancelled_caller_leaves_the_others_their_answer(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any]
) -> None:
    path, call = next(iter(READS.values()))
    client = make_client("async", upstream.base_url)
    upstream.script(Answer(delay=SLOW))
    cancelled = asyncio.ensure_future(done(call(client)))
    await asyncio.to_thread(upstream.wait_for, 1)
    waiting = asyncio.ensure_future(done(call(client)))
    await until(lambda: instrumented.stats().coalesced == 1, "the second caller joined")
    cancelled.cancel()
    assert summary(await waiting)[0] == "returned"
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert len(upstream.requests(path)) == 1


# -- trio: the async clients run on anyio (3.x) or httpx (5.x), so on trio too --------------------
def test_trio_reads_are_cached_and_a_write_drops_them(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], generation: Generation
) -> None:
    client = make_client("async", upstream.base_url)
    seen: list[str] = []

    async def main() -> None:
        for read, (_, call) in READS.items():
            seen.append(summary(await call(client))[0] + " " + read)
            seen.append(summary(await call(client))[0] + " " + read)
        assert instrumented.stats().hits == len(READS)  # each second read came from memory
        await generation.add(client)
        seen.append(summary(await next(iter(READS.values()))[1](client))[0])

    trio.run(main)
    assert all(entry.startswith("returned") for entry in seen), seen
    assert len(upstream.requests()) == len(READS) + 2  # the first reads, the write, one again


def test_concurrent_trio_callers_of_one_read_share_one_request(
    upstream: ScriptedServer, instrumented: WorkingMemory[Any], read: str
) -> None:
    path, call = READS[read]
    client = make_client("async", upstream.base_url)
    upstream.script(Answer(delay=0.5))  # slow enough that every caller arrives during the fetch
    results: list[Any] = []

    async def caller() -> None:
        results.append(await outcome(lambda: call(client)))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(caller)

    trio.run(main)
    assert [summary(result)[0] for result in results] == ["returned"] * CALLERS
    assert len(upstream.requests(path)) == 1
    stats = instrumented.stats()
    assert (stats.misses, stats.coalesced + stats.hits) == (1, CALLERS - 1)


def test_an_old_trio_hit_is_refreshed_in_the_background(upstream: ScriptedServer) -> None:
    path, call = next(iter(READS.values()))
    client = make_client("async", upstream.base_url)

    async def main() -> None:
        await call(client)
        await trio.sleep(0.3)  # older than refresh_after
        await call(client)  # served at once, refreshed behind it
        with trio.fail_after(10):  # a bound, not a measurement
            while len(upstream.requests(path)) < 2 or memory.stats().inflight:  # noqa: ASYNC110
                await trio.sleep(0.01)  # (the refresh runs in a thread, and lands here)

    with instrumentation(ttl=60.0, refresh_after=0.2) as memory:
        trio.run(main)
        assert memory.stats().hits == 1
    assert len(upstream.requests(path)) == 2


# -- a plain httpx client behind the caching transport: its timeout is its own too -----------------
@pytest.mark.skipif(MAJOR != "3", reason="one generation's paths are enough for the transport")
async def test_httpx_callers_with_different_timeouts_each_get_their_own_outcome(
    upstream: ScriptedServer,
) -> None:
    import httpx

    from wm_middleware import AsyncCachingTransport

    memory: WorkingMemory[Any] = WorkingMemory()
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"q": QUERY, "containerTag": TAG}

    def client(timeout: float) -> httpx.AsyncClient:
        transport = AsyncCachingTransport(working_memory=memory)
        return httpx.AsyncClient(
            base_url=upstream.base_url, headers=headers, transport=transport, timeout=timeout
        )

    async with client(IMPATIENT) as quick, client(30) as patient:
        upstream.script(Answer(delay=TOO_LATE))
        first = asyncio.ensure_future(outcome(lambda: quick.post("/v4/search", json=body)))
        await asyncio.to_thread(upstream.wait_for, 1)
        answered = await outcome(lambda: patient.post("/v4/search", json=body))
        assert summary(await first) == ("raised", "ReadTimeout")
        assert summary(answered) == ("returned", "Response")
        assert answered.status_code == 200
    assert len(upstream.requests("/v4/search")) == 2


@pytest.mark.skipif(MAJOR != "3", reason="one generation's paths are enough for the transport")
def test_httpx_callers_on_trio_share_one_request_and_then_the_entry(
    upstream: ScriptedServer,
) -> None:
    import httpx

    from wm_middleware import AsyncCachingTransport

    transport = AsyncCachingTransport()
    body = {"q": QUERY, "containerTag": TAG}
    upstream.script(Answer(delay=0.5))
    statuses: list[int] = []

    async def main() -> None:
        async with httpx.AsyncClient(
            base_url=upstream.base_url,
            headers={"Authorization": f"Bearer {KEY}"},
            transport=transport,
        ) as client:

            async def caller() -> None:
                statuses.append((await client.post("/v4/search", json=body)).status_code)

            async with trio.open_nursery() as nursery:
                for _ in range(CALLERS):
                    nursery.start_soon(caller)
            await caller()  # after the fetch: a hit

    trio.run(main)
    assert statuses == [200] * (CALLERS + 1)
    assert len(upstream.requests("/v4/search")) == 1
    assert transport.working_memory.stats().hits >= 1
