"""Serve mode through the real SDK (3.x or 5.x, sync and async) against the emulator.

A near hit is served only once the verdicts of its configuration bound disagreement at or below
``max_error`` (0.5 here: five agreeing verdicts, where the default 1% takes 299), only from the
read's own partition, never from an entry a write dropped or a scope that settles, and it keeps
being verified: a disagreement closes the band at once. Requests are counted by the emulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware._instrumentor import INSTRUMENTATION
from wm_middleware._telemetry.names import NEAR_BOUND, NEAR_SIMILARITY, NEAR_VERIFY, QUERY_TEXT
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse, report, upper_bound

from ..conftest import until, wait_until
from ..interception.conftest import OTHER_KEY, OTHER_TAG, Generation, done
from ..interception.conftest import generation as generation  # a fixture
from .test_shadow_mode import KEY, TAG, ids, search
from .test_shadow_mode import seeded as seeded  # a fixture

EVIDENCE = 5  # agreeing verdicts that bound disagreement at or below 0.5: 1 - 0.05 ** (1 / 5)


def pair(number: int) -> tuple[str, str]:
    """A query and its near-duplicate: one lexical form, one answer from the emulator."""
    return f"What does the user drink, case {number}?", f"what does the user drink case {number}"


@pytest.fixture
def serving() -> Iterator[Any]:
    """``serving(**SemanticReuse options)``: instrument, serving at max_error 0.5."""

    def start(
        tracer_provider: Any = None, settle_interval: float | None = None, **options: Any
    ) -> WorkingMemory[Any]:
        semantic = SemanticReuse(serve=True, **{"max_error": 0.5, **options})
        return wm_middleware.instrument(
            semantic=semantic, tracer_provider=tracer_provider, settle_interval=settle_interval
        )

    yield start
    runtime = INSTRUMENTATION.runtime()
    if runtime is not None and runtime.serving is not None:
        serving = runtime.serving  # no verification of this test reaches the next one's server
        wait_until(lambda: serving.verifying == 0, what="the verifications")
    wm_middleware.uninstrument()


async def teach(generation: Generation, client: Any, verdicts: int, first: int = 100) -> None:
    """Make ``verdicts`` agreeing comparisons: each pair's second query is a compared miss."""
    for number in range(first, first + verdicts):
        for query in pair(number):
            await done(search(generation, client, query))


def test_the_arithmetic_needs_five_verdicts_here_and_299_at_the_default() -> None:
    assert upper_bound(0, EVIDENCE) <= 0.5 < upper_bound(0, EVIDENCE - 1)
    assert upper_bound(0, 299) <= 0.01 < upper_bound(0, 298)


async def test_a_near_hit_is_served_once_the_evidence_allows_it_and_makes_no_request(
    seeded: EmulatorServer, generation: Generation, serving: Any, mode: str
) -> None:
    memory = serving(verify_share=0.0)
    client = generation.client(mode, seeded.base_url)
    await teach(generation, client, EVIDENCE - 1)
    cached, near = pair(1)
    await done(search(generation, client, cached))
    before = generation.searches(seeded)
    fetched = await done(search(generation, client, near))  # 4 verdicts: not yet, it fetches
    assert generation.searches(seeded) == before + 1
    assert memory.stats().near_served == 0
    cached, near = pair(2)
    await done(search(generation, client, cached))
    before = generation.searches(seeded)
    served = await done(search(generation, client, near))  # 5 verdicts: served
    assert generation.searches(seeded) == before
    stats = memory.stats()
    assert (stats.near_served, stats.near_verified, stats.near_agreed) == (1, 0, EVIDENCE)
    assert stats.near_served_bound == pytest.approx(upper_bound(0, EVIDENCE))
    assert ids(served) == ids(fetched)  # the same answer its fetch gave the case before
    assert "served 1 near hits under a disagreement bound of at most 45.07%" in str(report(stats))


async def test_a_disagreeing_verification_stops_serving_until_the_evidence_comes_back(
    seeded: EmulatorServer, generation: Generation, serving: Any, mode: str
) -> None:
    memory = serving(verify_share=1.0)
    client = generation.client(mode, seeded.base_url)
    await teach(generation, client, EVIDENCE)
    await done(search(generation, client, "green tea"))
    seeded.seed(KEY, ["green tea", "Green tea, green tea and more green tea"], container_tag=TAG)
    served = await done(search(generation, client, "Green tea?"))  # the old answer, verified
    assert memory.stats().near_served == 1
    await until(lambda: memory.stats().near_verified == 1, "the verification")
    stats = memory.stats()
    assert (stats.near_disagreed, stats.near_agreed) == (1, EVIDENCE)
    fresh = ids(await done(search(generation, client, "green tea?!")))  # the band is closed
    assert fresh[:3] != ids(served)[:3]
    stats = memory.stats()
    assert stats.near_served == 1
    more = 0  # agreeing verdicts that bring the bound back to 0.5
    while upper_bound(stats.near_disagreed, stats.near_candidates + more) > 0.5:
        more += 1
    await teach(generation, client, more, first=200)
    assert memory.stats().near_served == 1
    cached, near = pair(300)
    await done(search(generation, client, cached))
    await done(search(generation, client, near))  # the evidence came back: served again
    assert memory.stats().near_served == 2


async def test_verified_near_hits_keep_requests_at_the_uncached_count(
    seeded: EmulatorServer, generation: Generation, serving: Any, mode: str
) -> None:
    memory = serving(verify_share=0.5)
    client = generation.client(mode, seeded.base_url)
    await teach(generation, client, EVIDENCE)
    start = generation.searches(seeded)
    runtime = INSTRUMENTATION.runtime()
    assert runtime is not None
    credits = runtime.freshness.ledger.earned
    for number in range(6):
        for query in pair(number):
            await done(search(generation, client, query))
    await until(lambda: memory.stats().near_verified == 3, "the verifications")
    # Twelve calls uncached make twelve requests: six misses and three verifications here.
    assert generation.searches(seeded) - start == 9
    assert memory.stats().near_served == 6
    # Only a near hit that made no request earns a credit a status check may spend.
    assert runtime.freshness.ledger.earned - credits == 3


@pytest.mark.parametrize("other", ["tag", "api_key", "limit"])
async def test_a_near_hit_comes_only_from_the_reads_partition(
    seeded: EmulatorServer, generation: Generation, serving: Any, mode: str, other: str
) -> None:
    memory = serving(verify_share=0.0)
    client = generation.client(mode, seeded.base_url)
    await teach(generation, client, EVIDENCE)
    cached, near = pair(1)
    await done(search(generation, client, cached))
    before = generation.searches(seeded)
    if other == "tag":
        await done(search(generation, client, near, tag=OTHER_TAG))
    elif other == "api_key":
        theirs = generation.client(mode, seeded.base_url, api_key=OTHER_KEY)
        await done(search(generation, theirs, near))
    else:
        await done(search(generation, client, near, limit=3))
    assert generation.searches(seeded) == before + 1
    assert memory.stats().near_served == 0
    await done(search(generation, client, near))  # its own partition: served
    assert memory.stats().near_served == 1


async def test_no_near_hit_from_an_entry_a_write_dropped(
    seeded: EmulatorServer, generation: Generation, serving: Any, mode: str
) -> None:
    memory = serving(verify_share=0.0)
    client = generation.client(mode, seeded.base_url)
    await teach(generation, client, EVIDENCE)
    cached, near = pair(1)
    await done(search(generation, client, cached))
    await done(generation.add(client, TAG, content="User now drinks rooibos"))  # indexed at once
    before = generation.searches(seeded)
    await done(search(generation, client, near))
    assert generation.searches(seeded) == before + 1
    assert memory.stats().near_served == 0


async def test_no_near_hit_while_the_scope_settles_after_a_write(
    seeded: EmulatorServer, generation: Generation, serving: Any, mode: str
) -> None:
    memory = serving(verify_share=0.0, settle_interval=30.0)  # what it fetches stays 22 s
    client = generation.client(mode, seeded.base_url)
    await teach(generation, client, EVIDENCE)
    seeded.set_indexing_delay(60.0)  # the write's document stays pending: its scope settles
    await done(generation.add(client, TAG, content="User now drinks rooibos"))
    cached, near = pair(1)
    await done(search(generation, client, cached))  # fetched while settling, and kept
    assert memory.stats().size > 0
    before = generation.searches(seeded)
    await done(search(generation, client, near))
    assert generation.searches(seeded) == before + 1
    assert memory.stats().near_served == 0
    seeded.set_indexing_delay(0.0)


async def test_the_near_hits_span_says_so_with_its_similarity_and_bound_and_no_query(
    seeded: EmulatorServer, generation: Generation, serving: Any, mode: str
) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    serving(tracer_provider=provider, verify_share=1.0)
    client = generation.client(mode, seeded.base_url)
    await teach(generation, client, EVIDENCE)
    cached, near = pair(1)
    await done(search(generation, client, cached))
    await done(search(generation, client, near))
    found = [
        dict(span.attributes or {})
        for span in spans.get_finished_spans()
        if (span.attributes or {}).get("wm.cache.result") == "near_hit"
    ]
    assert len(found) == 1
    assert found[0][NEAR_SIMILARITY] == 1.0
    assert found[0][NEAR_BOUND] == pytest.approx(upper_bound(0, EVIDENCE), abs=1e-6)
    assert found[0][NEAR_VERIFY] is True
    assert QUERY_TEXT not in found[0]
    assert not any("drink" in str(value) for value in found[0].values())


@pytest.mark.parametrize("semantic", ["shadow", "serve-off"])
async def test_without_serve_nothing_is_served_whatever_the_evidence(
    seeded: EmulatorServer, generation: Generation, mode: str, semantic: str
) -> None:
    chosen: Any = "shadow" if semantic == "shadow" else SemanticReuse(max_error=0.5)
    memory = wm_middleware.instrument(semantic=chosen)
    try:
        client = generation.client(mode, seeded.base_url)
        before = generation.searches(seeded)
        await teach(generation, client, EVIDENCE + 3)
        stats = memory.stats()
        assert generation.searches(seeded) - before == stats.misses == 2 * (EVIDENCE + 3)
        assert (stats.near_agreed, stats.near_served, stats.near_verified) == (EVIDENCE + 3, 0, 0)
    finally:
        wm_middleware.uninstrument()


def test_under_trio_a_near_hit_is_served_and_verified_on_the_callers_loop(
    seeded: EmulatorServer, generation: Generation, serving: Any
) -> None:
    import trio

    memory = serving(verify_share=1.0)
    client = generation.client("async", seeded.base_url)

    async def main() -> list[str]:
        await teach(generation, client, EVIDENCE)
        cached, near = pair(1)
        await search(generation, client, cached)
        before = generation.searches(seeded)
        served = await search(generation, client, near)
        assert memory.stats().near_served == 1
        with trio.fail_after(20):  # a bound, not a measurement
            while memory.stats().near_verified < 1:  # noqa: ASYNC110
                await trio.sleep(0.01)  # the verification's request runs on this loop
        assert generation.searches(seeded) == before + 1  # the verification's, no other
        return ids(served)

    served = trio.run(main)
    stats = memory.stats()
    assert (stats.near_agreed, stats.near_disagreed) == (EVIDENCE + 1, 0)
    assert served
