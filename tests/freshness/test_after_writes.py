"""Freshness after writes, through the real SDKs against the emulator's indexing pipeline.

Every test runs under the SDK generation of its venv (3.x and 5.x), sync and async.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

import pytest

import wm_middleware
from wm_middleware.emulator import EmulatorServer

from ..conftest import holding, until
from .conftest import Observed, Sdk, done, mentions, read_until, wait_until

TURN = 0.5  # seconds per agent turn, as in the issue
FACTS = ("espresso", "kayaking", "sourdough")


async def _turn_reads(sdk: Sdk, client: Any, tag: str) -> list[Any]:
    return [await done(sdk.profile(client, tag)), await done(sdk.search(client, tag))]


async def _probe(sdk: Sdk, agents: dict[str, Any], delay: float) -> dict[str, dict[str, int]]:
    """The issue's loop: each turn profile + search, then an add of a new fact every 4 turns
    (turns 2, 6, 10). Returns, per agent, the turn at which each fact first showed."""
    seen: dict[str, dict[str, int]] = {name: {} for name in agents}
    fact_turns = {2 + 4 * i: fact for i, fact in enumerate(FACTS)}
    turns = max(fact_turns) + math.ceil(delay / TURN) + 4
    for turn in range(turns):
        started = time.monotonic()
        for name, client in agents.items():
            for answer in await _turn_reads(sdk, client, name):
                for fact in FACTS:
                    if fact not in seen[name] and mentions(answer, fact):
                        seen[name][fact] = turn
            if turn in fact_turns:
                await done(sdk.add(client, f"The user likes {fact_turns[turn]}", name))
        await asyncio.sleep(max(0.0, started + TURN - time.monotonic()))
    return seen


async def test_the_probe_loop_sees_each_fact_at_most_one_turn_after_the_uncached_agent(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    # Indexed half a turn after a turn begins: a turn's reads never race the indexing.
    emulator.set_indexing_delay(2.25)
    plain = sdk.client(mode, emulator.base_url, api_key="sk-plain")
    cached = wm_middleware.wrap(sdk.client(mode, emulator.base_url, api_key="sk-cached"))
    # The cached agent first: its add is made first, so it is indexed no later than the plain
    # agent's (a comparison never skewed towards the cache).
    seen = await _probe(sdk, {"cached": cached, "plain": plain}, 2.25)
    assert set(seen["plain"]) == set(FACTS)  # the loop is long enough for every fact
    assert set(seen["cached"]) == set(FACTS)  # the last fact too
    for fact in FACTS:
        assert seen["cached"][fact] - seen["plain"][fact] <= 1, (fact, seen)
    # ... and the cache still saved reads: the plain agent fetched each of its reads, the
    # cached one fetched or checked a status for under 0.7 of its own (status checks included).
    turns = 10 + math.ceil(2.25 / TURN) + 4
    cached_reads = sdk.reads(emulator) - 2 * turns
    assert cached_reads + sdk.status_checks(emulator) < 0.7 * 2 * turns


async def test_a_document_that_never_finishes_keeps_its_scopes_short_lived_past_settle_max(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    emulator.set_indexing_delay(3600.0)
    cached = observed.wrap(sdk.client(mode, emulator.base_url), settle_interval=0.1, settle_max=0.5)
    await done(sdk.add(cached, "The user likes espresso"))
    assert observed.pending() == 1
    await asyncio.sleep(0.6)  # past settle_max: the settle reached its deadline
    before = sdk.reads(emulator)
    await done(sdk.search(cached))
    await asyncio.sleep(0.2)  # longer than an entry of a settling scope lives (75 ms)
    await done(sdk.search(cached))
    # Both fetched: the pre-index answer is never kept for a whole ttl ...
    assert sdk.reads(emulator) == before + 2
    assert observed.pending() == 1  # ... while the document is still followed


async def test_a_check_that_finds_the_write_indexed_ends_the_settle_and_caching_resumes(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    emulator.set_indexing_delay(0.3)
    cached = observed.wrap(sdk.client(mode, emulator.base_url), settle_interval=0.2)
    for _ in range(3):
        await done(sdk.search(cached))  # one fetch, two hits: credits for status checks
    await done(sdk.add(cached, "The user likes espresso"))
    assert not mentions(await done(sdk.search(cached)), "espresso")  # pending
    # Reads go on: checks start beside them, and the one that finds the document indexed
    # ends the settle.
    await read_until(lambda: sdk.search(cached), lambda _: observed.pending() == 0)
    assert sdk.status_checks(emulator) >= 1
    reads = sdk.reads(emulator)
    for _ in range(4):  # at most one fetch, cached as any other: the next reads are hits
        assert mentions(await done(sdk.search(cached)), "espresso")
    assert sdk.reads(emulator) <= reads + 1


async def test_a_write_indexed_before_a_younger_one_shows_while_the_younger_is_pending(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    # Copies live 1.5 s: the read right after both adds is served the one held before them,
    # however long the adds take (0.15 s was missed on a loaded machine, the first indexed).
    cached = wm_middleware.wrap(sdk.client(mode, emulator.base_url), settle_interval=2.0)
    for _ in range(3):
        await done(sdk.search(cached))  # one fetch, two hits: credits for status checks
    emulator.set_indexing_delay(0.3)
    await done(sdk.add(cached, "The user likes espresso"))
    emulator.set_indexing_delay(3600.0)
    await done(sdk.add(cached, "The user likes kayaking"))
    assert not mentions(await done(sdk.search(cached)), "espresso")  # both pending
    # Reads go on until the first shows (it is indexed, the second never is): the copy fetched
    # before the first write was indexed stops answering, though the second write's documents
    # are still pending.
    answer = await read_until(lambda: sdk.search(cached), lambda a: mentions(a, "espresso"))
    assert not mentions(answer, "kayaking")


async def test_a_copy_is_never_served_once_the_memory_dropped_its_entries(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    """A copy kept for a status check to confirm goes with the memory's entries: after an
    invalidation by hand (here ``clear()``), the read fetches, documents pending or not."""
    memory: wm_middleware.WorkingMemory[Any] = wm_middleware.WorkingMemory()
    cached = wm_middleware.wrap(
        sdk.client(mode, emulator.base_url), working_memory=memory, settle_interval=2.0
    )
    for _ in range(3):
        await done(sdk.search(cached))  # one fetch, two hits: credits for a status check
    emulator.set_indexing_delay(3600.0)
    await done(sdk.add(cached, "The user likes espresso"))
    # Served while pending: the copy a check could confirm. Its life (1.5 s) is long beside the
    # reads above, so no check starts until it runs short, and none is left in flight below.
    await done(sdk.search(cached))
    await asyncio.sleep(1.6)  # its life is over
    memory.clear()
    checks, reads = sdk.status_checks(emulator), sdk.reads(emulator)
    await done(sdk.search(cached))
    assert (sdk.status_checks(emulator), sdk.reads(emulator)) == (checks, reads + 1)


async def shows(sdk: Sdk, client: Any, fact: str) -> None:
    """Search with ``client`` until an answer mentions ``fact`` (bounded: 400 tries 10 ms apart,
    a guard, not a measurement)."""
    for _ in range(400):
        if mentions(await done(sdk.search(client)), fact):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the fact {fact!r} never showed")


@pytest.mark.parametrize("status", [500, 404])
async def test_a_failed_status_check_never_breaks_a_read_and_never_caches_forever(
    sdk: Sdk, mode: str, emulator: EmulatorServer, status: int
) -> None:
    emulator.set_indexing_delay(0.5)
    emulator.fail_next(None, status, path=sdk.status_paths[0], method="GET")
    cached = wm_middleware.wrap(
        sdk.client(mode, emulator.base_url), settle_interval=0.1, settle_max=2.0
    )
    for _ in range(5):
        await done(sdk.search(cached))  # hits: credits for status checks
    await done(sdk.add(cached, "The user likes espresso"))
    # Reads never see the failing checks; the fact shows at the latest when the window ends,
    # whatever the status checks say.
    await read_until(lambda: sdk.search(cached), lambda answer: mentions(answer, "espresso"))
    assert sdk.status_checks(emulator) >= 1
    emulator.clear_faults()


async def test_many_pending_writes_are_checked_in_bounded_rounds(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    emulator.set_indexing_delay(3600.0)
    cached = observed.wrap(
        # settle_max leaves room for 30 writes on a loaded machine: none may end before the last.
        sdk.client(mode, emulator.base_url),
        settle_interval=0.05,
        settle_max=30.0,
    )
    for _ in range(10):
        await done(sdk.search(cached))  # hits: credits for status checks
    written = [
        str((await done(sdk.add(cached, f"The user likes fact number {i}"))).id) for i in range(30)
    ]
    assert observed.pending() == 30
    await read_until(lambda: sdk.search(cached), lambda _: sdk.status_checks(emulator) >= 3)
    requests = [r for r in emulator.requests if r.method == "GET"]
    if sdk.major == "3":
        # One processing list per check, whatever the number of pending documents.
        assert {r.path for r in requests} == {"/v3/documents/processing"}
    else:
        # No bulk endpoint: each check asks for the oldest pending document only (of this
        # test's: another test's client may still be following its own).
        asked = {r.path.rsplit("/", 1)[-1] for r in requests} & set(written)
        assert asked == {written[0]}


async def test_a_write_while_a_read_of_the_same_scope_is_in_flight(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    # The read's request is held until the add is answered, then let go: it reaches the API
    # well within the 1.5 s before the fact is indexed, however loaded the machine.
    emulator.set_indexing_delay(1.5)
    in_flight, added = threading.Event(), threading.Event()

    def let_go() -> bool:
        in_flight.set()  # the read's request is about to be sent
        return added.is_set()

    def is_search(request: Any) -> bool:
        return request.method == "POST" and request.url.path.endswith("/search")

    http_client = holding(let_go, mode, only=is_search)
    client = sdk.client(mode, emulator.base_url, http_client=http_client)
    cached = wm_middleware.wrap(client, settle_interval=0.1)
    if mode == "async":
        task = asyncio.ensure_future(sdk.search(cached))
        await until(in_flight.is_set, "the read in flight")
        await sdk.add(cached, "The user likes espresso")
        added.set()
        old = await task
    else:
        reader = _Background(lambda: sdk.search(cached))
        wait_until(in_flight.is_set, what="the read in flight")
        sdk.add(cached, "The user likes espresso")
        added.set()
        old = reader.join()
    assert not mentions(old, "espresso")  # answered before indexing
    before = sdk.reads(emulator)
    await done(sdk.search(cached))
    assert sdk.reads(emulator) == before + 1  # the in-flight answer was not kept
    await shows(sdk, cached, "espresso")


class _Background:
    def __init__(self, call: Any) -> None:
        self.result: Any = None
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()

    def _run(self, call: Any) -> None:
        self.result = call()

    def join(self) -> Any:
        self._thread.join(20)
        assert not self._thread.is_alive()
        return self.result
