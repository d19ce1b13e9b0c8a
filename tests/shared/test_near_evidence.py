"""Near-duplicate evidence pooled across a fleet through the shared tier (real Valkey / Redis).

Each process stores the totals of its own verdicts, so a store made twice counts them once;
a process reads the others' and decides on the sum. With a secret, totals a writer without it
put in the hash are left out. Two tiers on one server stand for two processes (each has its
own token); the SDK test runs two wrapped clients, one teaching and one serving.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware._near.evidence import Evidence, family_of
from wm_middleware._redis import RedisTier
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse

from ..interception.conftest import TAG, Generation
from ..interception.conftest import generation as generation  # a fixture

FAMILY = family_of(SemanticReuse(serve=True))


def boards(url: str, secret: str | None = None) -> tuple[Evidence, Evidence, list[RedisTier]]:
    tiers = [RedisTier(url, secret=secret), RedisTier(url, secret=secret)]
    a, b = (Evidence(FAMILY, 0.01, tier.evidence(FAMILY)) for tier in tiers)
    return a, b, tiers


def test_each_process_verdicts_count_once_and_a_disagreement_reaches_the_others(
    redis_url: str,
) -> None:
    a, b, tiers = boards(redis_url)
    try:
        for _ in range(200):
            a.record("1", True)
        assert a.sync_now()
        assert a.sync_now()  # its totals stored again: still counted once
        for _ in range(99):
            b.record("1", True)
        assert b.sync_now()
        assert b.counts("1") == (299, 0)
        assert b.allows("1")[0]
        assert a.sync_now()
        assert a.counts("1") == (299, 0)
        a.record("1", False)
        assert not a.allows("1")[0]  # at once, here
        assert a.sync_now()
        assert b.sync_now()
        assert b.counts("1") == (299, 1)
        assert not b.allows("1")[0]
        assert b.counts("0.95") == (0, 0)  # another band: no evidence
    finally:
        for tier in tiers:
            tier.close()


def test_a_process_is_one_token_however_many_of_its_threads_exchange_at_once(
    redis_url: str, raw: redis.Redis
) -> None:
    """A read's sync thread and a caller may make a board's first exchange together: both
    store under the process's one token, so the fleet counts the process once."""
    tier = RedisTier(redis_url)
    try:
        for round_ in range(20):
            board = tier.evidence(f"{FAMILY} {round_}")
            start = threading.Barrier(8)

            def exchange(board: Any = board, start: threading.Barrier = start) -> None:
                start.wait(30)
                board.exchange({"1": (3, 0)})

            threads = [threading.Thread(target=exchange) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert len(raw.hkeys(board.key)) == 1  # one field: band "1", this process
    finally:
        tier.close()


def test_with_a_secret_totals_written_without_it_are_left_out(
    redis_url: str, raw: redis.Redis
) -> None:
    a, b, tiers = boards(redis_url, secret="fleet secret")
    try:
        for _ in range(10):
            a.record("1", True)
        assert a.sync_now()
        (key,) = raw.keys("*:near:*")
        stored = dict(raw.hgetall(key))
        (field,) = stored
        raw.hset(key, "1 intruder", b"5000 0")  # made up
        raw.hset(key, field.replace(b"1 ", b"0.99 ", 1), stored[field])  # moved to another band
        assert b.sync_now()
        assert b.counts("1") == (10, 0)
        assert b.counts("0.99") == (0, 0)
    finally:
        for tier in tiers:
            tier.close()


def serving_client(tier: RedisTier, base_url: str, generation: Generation, semantic: Any) -> Any:
    memory: WorkingMemory[Any] = WorkingMemory(shared=tier)
    return wm_middleware.wrap(
        generation.client("sync", base_url), working_memory=memory, semantic=semantic
    )


def test_a_process_serves_on_the_fleets_evidence_and_redis_holds_no_query_text(
    redis_url: str, raw: redis.Redis, emulator: EmulatorServer, generation: Generation
) -> None:
    emulator.seed(
        "sk-a", ["User drinks green tea every morning", "User lives in Lyon"], container_tag=TAG
    )
    semantic = SemanticReuse(serve=True, max_error=0.1, verify_share=0.0)  # 29 verdicts
    with RedisTier(redis_url) as one, RedisTier(redis_url) as other:
        teacher = serving_client(one, emulator.base_url, generation, semantic)
        learner = serving_client(other, emulator.base_url, generation, semantic)
        taught_and_served(teacher, learner, generation)
    for key in raw.keys("*"):
        kind = raw.type(key)
        values = raw.hgetall(key).items() if kind == b"hash" else [(key, b"")]
        for name, value in values:
            for text in (key, name, value):
                assert b"drink" not in text
                assert b"live" not in text


def taught_and_served(teacher: Any, learner: Any, generation: Generation) -> None:
    """The teacher's 29 verdicts open the band; the learner serves before it has 29 of its own."""
    for number in range(29):
        generation.search(teacher, query=f"What does the user drink, case {number}?")
        generation.search(teacher, query=f"what does the user drink case {number}")
    assert teacher.working_memory.stats().near_agreed == 29
    served = learner.working_memory.stats
    for number in range(100, 120):  # each miss asks the fleet (off its path) when it is old
        generation.search(learner, query=f"Where does the user live, case {number}?")
        generation.search(learner, query=f"where does the user live case {number}")
        if served().near_served:
            break
        time.sleep(0.05)
    stats = served()
    assert stats.near_served == 1
    assert stats.near_agreed < 29  # not on its own verdicts alone
