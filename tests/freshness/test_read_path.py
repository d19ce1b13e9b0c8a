"""Status checks stay off the read path: no read waits on more than its own upstream request,
a check that gets no answer vouches for nothing, and a document slower than ``settle_max``
still shows within a turn of an uncached agent.

Against the emulator, through the real SDKs (3.x and 5.x), sync and async (and trio). Turns
and requests are counted, never times: a read's requests are the HTTP spans (the httpx
instrumentation's, on a real OpenTelemetry SDK) under the span the test opens around it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from wm_middleware.emulator import EmulatorServer

from .conftest import Observed, Sdk, done, mentions

TURN = 0.6  # seconds per turn: within the 0.75 s a check vouches for, under two of them
READ = "agent read"  # the span the test opens around each read

# shape -> (searches per turn, add every n-th turn; 0: never), as in bench_freshness.py
SHAPES: dict[str, tuple[int, int]] = {
    "guide": (1, 1),
    "tools": (3, 1),
    "sparse": (1, 4),
    "read-only": (1, 0),
}


@contextmanager
def _httpx_traced(observed: Observed) -> Iterator[None]:
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument(tracer_provider=observed.tracer_provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


def _requests_per_read(observed: Observed) -> list[int]:
    """For each span named :data:`READ`: the HTTP requests made under it (its descendants)."""
    spans = observed.spans.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}
    reads = {span.context.span_id: 0 for span in spans if span.name == READ}
    for span in spans:
        if "httpx" not in span.instrumentation_scope.name:
            continue
        parent = span.parent
        while parent is not None and parent.span_id not in reads:
            above = by_id.get(parent.span_id)
            parent = None if above is None else above.parent
        if parent is not None:
            reads[parent.span_id] += 1
    return list(reads.values())


async def _turns(
    sdk: Sdk,
    client: Any,
    shape: str,
    tracer: Any,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    turns: int = 9,
) -> None:
    """The loop of ``shape``: each read under a span of its own, then the turn's add."""
    searches, every = SHAPES[shape]
    for turn in range(turns):
        started = time.monotonic()
        for read in [sdk.profile] + [sdk.search] * searches:
            with tracer.start_as_current_span(READ):
                await done(read(client))
        if every and turn % every == 0:
            await done(sdk.add(client, f"The user likes fact number {turn}"))
        await sleep(max(0.0, started + TURN - time.monotonic()))


@pytest.mark.parametrize("shape", list(SHAPES))
async def test_no_read_waits_on_more_than_one_upstream_request(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed, shape: str
) -> None:
    emulator.set_latency(0.1)
    emulator.set_indexing_delay(1.3)
    tracer = observed.tracer_provider.get_tracer("agent")
    cached = observed.wrap(sdk.client(mode, emulator.base_url))
    with _httpx_traced(observed):
        await _turns(sdk, cached, shape, tracer)
    per_read = _requests_per_read(observed)
    assert len(per_read) == 9 * (1 + SHAPES[shape][0])
    assert max(per_read) == 1, per_read  # a fetch, or nothing: never a check and a fetch
    if shape == "sparse":
        assert per_read.count(0) > 0  # ... and reads were answered from memory meanwhile


def test_no_trio_read_waits_on_more_than_one_upstream_request(
    sdk: Sdk, emulator: EmulatorServer, observed: Observed
) -> None:
    import trio

    emulator.set_latency(0.1)
    emulator.set_indexing_delay(1.3)
    tracer = observed.tracer_provider.get_tracer("agent")
    cached = observed.wrap(sdk.client("async", emulator.base_url))
    with _httpx_traced(observed):
        trio.run(_turns, sdk, cached, "sparse", tracer, trio.sleep)
    per_read = _requests_per_read(observed)
    assert len(per_read) == 18
    assert max(per_read) == 1, per_read


# -- lag, in turns, against an uncached agent ------------------------------------------------------
async def _race(
    sdk: Sdk, agents: dict[str, Any], add_turn: int, turns: int, tracer: Any
) -> dict[str, int]:
    """Each turn, each agent (in order) reads profile + search, each read under a span of its
    own; at ``add_turn`` each adds the fact right after its reads. Returns the turn at which
    each agent first saw the fact."""
    seen: dict[str, int] = {}
    for turn in range(turns):
        started = time.monotonic()
        for name, client in agents.items():
            for read in (sdk.profile, sdk.search):
                with tracer.start_as_current_span(READ):
                    answer = await done(read(client, name))
                if name not in seen and mentions(answer, "espresso"):
                    seen[name] = turn
            if turn == add_turn:
                await done(sdk.add(client, "The user likes espresso", name))
        await asyncio.sleep(max(0.0, started + TURN - time.monotonic()))
    return seen


def _agents(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed, **options: Any
) -> dict[str, Any]:
    """The cached agent first: its add is made first, so it is indexed no later than the
    uncached agent's (the comparison is never skewed towards the cache)."""
    return {
        "cached": observed.wrap(sdk.client(mode, emulator.base_url, "sk-a"), **options),
        "plain": sdk.client(mode, emulator.base_url, "sk-b"),
    }


@pytest.mark.parametrize("fault", ["500", "hang"])
async def test_a_status_check_that_gets_no_answer_vouches_for_nothing(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed, fault: str
) -> None:
    emulator.set_indexing_delay(1.5)  # half a turn after a turn begins: no race with the reads
    for path in sdk.status_paths:
        if fault == "500":
            emulator.fail_next(None, 500, path=path, method="GET")
        else:
            emulator.hang_next(None, 30.0, path=path, method="GET")
    agents = _agents(sdk, mode, emulator, observed)
    with _httpx_traced(observed):
        seen = await _race(sdk, agents, 1, 9, observed.tracer_provider.get_tracer("agent"))
    assert sdk.status_checks(emulator) >= 1  # checks were made, and got no answer
    assert set(seen) == {"cached", "plain"}, seen
    assert seen["cached"] - seen["plain"] <= 1, seen
    assert max(_requests_per_read(observed)) == 1  # no read waited on the fault


async def test_a_document_slower_than_settle_max_shows_within_a_turn(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    # The settle (1 s) ends with the document pending; indexed half a turn after a turn begins.
    emulator.set_indexing_delay(2.7)
    agents = _agents(sdk, mode, emulator, observed, settle_interval=1.0, settle_max=1.0)
    tracer = observed.tracer_provider.get_tracer("agent")
    seen = await _race(sdk, agents, 1, 10, tracer)
    assert set(seen) == {"cached", "plain"}, seen
    assert seen["cached"] - seen["plain"] <= 1, seen
