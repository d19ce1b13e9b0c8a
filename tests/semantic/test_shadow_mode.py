"""Shadow mode through the real SDK (3.x or 5.x, sync and async) against the emulator.

A miss always gets its own fetched answer; beside it, the nearest cached query of the same
partition is compared with it, and the verdict comes from the two real answers' record ids.
An embedder that maps every text to one vector makes every cached query of a partition "near",
so what keeps candidates apart in those tests is the partition alone.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware._instrumentor import INSTRUMENTATION
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse, report

from ..conftest import holding
from ..interception.conftest import KEY, OTHER_KEY, OTHER_TAG, TAG, Generation, done
from ..interception.conftest import generation as generation  # a fixture

MEMORIES = [
    "User likes green tea",
    "User drinks coffee every morning",
    "User meets Alice on Mondays",
    "User meets Bob on Fridays",
    "User prefers window seats",
]


def same_vector(texts: Sequence[str]) -> list[list[float]]:
    """Every text is one point: any two queries are as near as can be."""
    return [[1.0, 0.0] for _ in texts]


@pytest.fixture
def seeded(emulator: EmulatorServer) -> EmulatorServer:
    for key in (KEY, OTHER_KEY):
        for tag in (TAG, OTHER_TAG):
            emulator.seed(key, MEMORIES, container_tag=tag)
    return emulator


@pytest.fixture
def shadow() -> Iterator[Any]:
    """``shadow(**instrument options)``: instrument with them; ``uninstrument()`` after."""

    def start(**options: Any) -> WorkingMemory[Any]:
        return wm_middleware.instrument(**options)

    yield start
    wm_middleware.uninstrument()


def near_index() -> Any:
    runtime = INSTRUMENTATION.runtime()
    assert runtime is not None
    assert runtime.near is not None
    return runtime.near


def search(generation: Generation, client: Any, query: str, tag: str = TAG, **options: Any) -> Any:
    if generation.major == "3":
        return client.search.memories(q=query, container_tag=tag, **options)
    return client.search(tag, query=query, **options)


def ids(answer: Any) -> list[str]:
    return [result.id for result in answer.results]


async def test_a_rewording_is_compared_and_agrees_from_the_real_answers(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow(semantic="shadow")
    client = generation.client(mode, seeded.base_url)
    plain = generation.client("sync", seeded.base_url, api_key=KEY)
    first = await done(search(generation, client, "What does the user drink?"))
    second = await done(search(generation, client, "um, what does the user drink"))
    stats = memory.stats()
    assert (stats.misses, stats.near_candidates, stats.near_agreed) == (2, 1, 1)
    assert ids(second) == ids(first)
    wm_middleware.uninstrument()
    assert ids(search(generation, plain, "um, what does the user drink")) == ids(second)


async def test_a_candidate_with_other_results_disagrees_and_the_caller_gets_the_fetched_answer(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow(semantic=SemanticReuse(embed=same_vector, vetoes=()))
    client = generation.client(mode, seeded.base_url)
    tea = await done(search(generation, client, "green tea"))
    seats = await done(search(generation, client, "window seats"))
    stats = memory.stats()
    assert (stats.near_candidates, stats.near_agreed, stats.near_disagreed) == (1, 0, 1)
    assert ids(seats) != ids(tea)
    assert "User prefers window seats" in [result.memory for result in seats.results[:1]]


@pytest.mark.parametrize("other", ["tag", "api_key", "limit"])
async def test_candidates_come_only_from_the_same_partition(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str, other: str
) -> None:
    memory = shadow(semantic=SemanticReuse(embed=same_vector, vetoes=()))
    client = generation.client(mode, seeded.base_url)
    await done(search(generation, client, "green tea"))
    if other == "tag":
        await done(search(generation, client, "coffee", tag=OTHER_TAG))
    elif other == "api_key":
        theirs = generation.client(mode, seeded.base_url, api_key=OTHER_KEY)
        await done(search(generation, theirs, "coffee"))
    else:
        await done(search(generation, client, "coffee", limit=3))
    assert memory.stats().near_candidates == 0
    await done(search(generation, client, "window seats"))  # the first one's partition again
    assert memory.stats().near_candidates == 1


async def test_a_veto_refuses_a_near_query_that_names_someone_else(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow(semantic=SemanticReuse(embed=same_vector))
    client = generation.client(mode, seeded.base_url)
    await done(search(generation, client, "when does the user meet Alice"))
    await done(search(generation, client, "when does the user meet Bob"))
    stats = memory.stats()
    assert (stats.near_vetoed, stats.near_candidates) == (1, 0)


async def test_a_hit_is_not_compared(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow(semantic=SemanticReuse(embed=same_vector, vetoes=()))
    client = generation.client(mode, seeded.base_url)
    for _ in range(3):
        await done(search(generation, client, "green tea"))
    stats = memory.stats()
    assert (stats.hits, stats.misses, stats.near_candidates) == (2, 1, 0)


async def test_an_embedder_that_raises_is_counted_and_logged_once(
    seeded: EmulatorServer,
    generation: Generation,
    shadow: Any,
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("the embedding service is down")

    memory = shadow(semantic=SemanticReuse(embed=broken))
    client = generation.client(mode, seeded.base_url)
    with caplog.at_level("WARNING", logger="wm_middleware"):
        answers = [await done(search(generation, client, q)) for q in ("tea", "coffee", "seats")]
    assert all(answer.results for answer in answers)
    assert memory.stats().near_errors == 3
    warnings = [r for r in caplog.records if "near-duplicate" in r.getMessage()]
    assert len(warnings) == 1
    assert "RuntimeError" in warnings[0].getMessage()
    assert "tea" not in warnings[0].getMessage()


async def test_a_hanging_embedder_never_holds_a_read_and_its_late_vector_is_kept(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    release = threading.Event()

    def hanging(texts: Sequence[str]) -> list[list[float]]:
        release.wait(60)  # released by the test; a read waiting for it would fail the test
        return [[1.0, 0.0] for _ in texts]

    memory = shadow(semantic=SemanticReuse(embed=hanging, vetoes=(), timeout=0.05))
    client = generation.client(mode, seeded.base_url)
    tea = await done(search(generation, client, "green tea"))
    assert tea.results
    assert memory.stats().near_errors == 1
    release.set()
    index = near_index()
    for _ in range(200):  # the late vector is indexed by the embedding thread
        if len(index):
            break
        threading.Event().wait(0.01)
    assert len(index) == 1
    await done(search(generation, client, "window seats"))
    assert memory.stats().near_candidates == 1


async def test_many_hung_embeddings_turn_into_immediate_errors(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    release = threading.Event()

    def hanging(texts: Sequence[str]) -> list[list[float]]:
        release.wait(60)
        return [[1.0] for _ in texts]

    memory = shadow(semantic=SemanticReuse(embed=hanging, timeout=0.01))
    client = generation.client(mode, seeded.base_url)
    try:
        for number in range(8):
            answer = await done(search(generation, client, f"memory number {number}"))
            assert answer is not None
        assert memory.stats().near_errors == 8
    finally:
        release.set()


async def test_the_index_is_bounded_by_the_memory_and_forgets_dropped_entries(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow(semantic=SemanticReuse(embed=same_vector, vetoes=()), max_entries=3)
    client = generation.client(mode, seeded.base_url)
    for query in ("tea", "coffee", "seats", "Alice", "Bob", "mornings"):
        await done(search(generation, client, query))
    assert len(near_index()) <= 3
    memory.clear()
    await done(search(generation, client, "Fridays"))
    stats = memory.stats()
    assert stats.near_candidates == 5  # each miss after the first, none after the clear
    assert len(near_index()) == 1


def test_threads_get_their_own_answers_and_every_verdict_is_counted(
    seeded: EmulatorServer, generation: Generation, shadow: Any
) -> None:
    memory = shadow(semantic="shadow")
    client = generation.client("sync", seeded.base_url)
    queries = ["what does the user drink", "What does the user drink?", "green tea", "Green tea!"]
    expected = {}
    for query in queries:
        wm_middleware.uninstrument()
        expected[query] = ids(search(generation, client, query))
        memory = shadow(semantic="shadow")
    got: dict[str, list[list[str]]] = {query: [] for query in queries}

    def run(query: str) -> None:
        got[query].append(ids(search(generation, client, query)))

    threads = [threading.Thread(target=run, args=(q,)) for q in queries * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(answers == [expected[q]] * 4 for q, answers in got.items())
    stats = memory.stats()
    assert stats.near_candidates == stats.near_agreed + stats.near_disagreed
    assert stats.near_candidates <= stats.misses <= len(queries)


async def test_off_by_default_and_reported_when_on(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow()
    runtime = INSTRUMENTATION.runtime()
    assert runtime is not None
    assert runtime.near is None
    client = generation.client(mode, seeded.base_url)
    await done(search(generation, client, "green tea"))
    await done(search(generation, client, "Green tea?"))
    assert memory.stats().near_candidates == 0
    memory = shadow(semantic="shadow")
    await done(search(generation, client, "green tea"))
    await done(search(generation, client, "Green tea?"))
    line = str(report(memory.stats()))
    assert line.startswith("of 2 misses, 1 had a candidate: 1 agreed, 0 disagreed")


async def test_the_variable_and_wrap_switch_it_on(
    seeded: EmulatorServer,
    generation: Generation,
    shadow: Any,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WM_MIDDLEWARE_SEMANTIC", "shadow")
    memory = shadow()
    client = generation.client(mode, seeded.base_url)
    await done(search(generation, client, "green tea"))
    await done(search(generation, client, "Green tea?"))
    assert memory.stats().near_agreed == 1
    wm_middleware.uninstrument()
    monkeypatch.delenv("WM_MIDDLEWARE_SEMANTIC")
    wrapped = wm_middleware.wrap(generation.client(mode, seeded.base_url), semantic="shadow")
    await done(search(generation, wrapped, "green tea"))
    await done(search(generation, wrapped, "Green tea?"))
    assert wrapped.working_memory.stats().near_agreed == 1


async def test_a_candidate_refreshed_since_it_was_indexed_is_compared_by_its_new_answer(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow(semantic="shadow", ttl=60.0, refresh_after=0.2)
    client = generation.client(mode, seeded.base_url)
    old = ids(await done(search(generation, client, "green tea")))
    seeded.seed(KEY, ["green tea", "Green tea, green tea and more green tea"], container_tag=TAG)
    new = old
    for _ in range(300):  # each hit past refresh_after starts the background refresh
        await asyncio.sleep(0.05)
        new = ids(await done(search(generation, client, "green tea")))
        if new != old:
            break
    assert new[:3] != old[:3], "the refresh brought the answer the emulator gives now"
    fetched = ids(await done(search(generation, client, "Green tea?")))  # a near-duplicate miss
    assert fetched == new
    stats = memory.stats()
    assert (stats.near_candidates, stats.near_agreed, stats.near_disagreed) == (1, 1, 0)


async def test_records_of_dropped_entries_go_even_when_their_partition_is_not_read_again(
    seeded: EmulatorServer, generation: Generation, shadow: Any, mode: str
) -> None:
    memory = shadow(semantic="shadow")
    client = generation.client(mode, seeded.base_url)
    for query in ("tea", "coffee", "seats"):
        await done(search(generation, client, query))
    assert len(near_index()) == 3
    memory.clear()
    for query in ("Alice", "Bob"):  # misses of another partition
        await done(search(generation, client, query, tag=OTHER_TAG))
    assert len(near_index()) == 2  # theirs alone: the cleared entries' queries are gone


def test_the_embedder_is_asked_once_per_query(
    seeded: EmulatorServer, generation: Generation, shadow: Any
) -> None:
    asked: list[str] = []

    def counting(texts: Sequence[str]) -> list[list[float]]:
        asked.extend(texts)
        return [[1.0, 0.0] for _ in texts]

    memory = shadow(semantic=SemanticReuse(embed=counting, vetoes=(), timeout=5.0))
    # The first thread's fetch is held until the five others have joined it.
    joined = lambda: memory.stats().coalesced == 5  # noqa: E731
    client = generation.client("sync", seeded.base_url, http_client=holding(joined, "sync"))
    barrier = threading.Barrier(6)

    def run() -> None:
        barrier.wait()
        search(generation, client, "green tea")

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert memory.stats().misses == 1
    memory.clear()
    search(generation, client, "green tea")  # its entry is gone, its vector is not
    assert asked == ["green tea"]


@pytest.mark.parametrize("raised", [KeyboardInterrupt, asyncio.CancelledError, SystemExit])
async def test_an_embedders_interrupt_stays_in_its_thread_and_the_read_keeps_its_answer(
    seeded: EmulatorServer,
    generation: Generation,
    shadow: Any,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    raised: type[BaseException],
) -> None:
    def interrupted(texts: Sequence[str]) -> list[list[float]]:
        raise raised()

    seen: list[tuple[str, type[BaseException] | None]] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: seen.append((a.thread.name, a.exc_type)))
    memory = shadow(semantic=SemanticReuse(embed=interrupted, timeout=5.0))
    client = generation.client(mode, seeded.base_url)
    answer = await done(search(generation, client, "green tea"))
    assert "User likes green tea" in [result.memory for result in answer.results]
    assert memory.stats().near_errors == 1
    for _ in range(500):  # the embedding thread ends once the miss has its answer
        if seen:
            break
        threading.Event().wait(0.01)
    assert seen == [("wm-near-embed", raised)]
