"""``WorkingMemory(shared=RedisTier(...))`` end to end, across real processes."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from wm_middleware import RedisTier, WorkingMemory

from ..conftest import FakeClock
from . import workers
from .conftest import fleet, patient_tier, wait_until
from .servers import Server
from .workers import COUNTER


def test_a_fleet_of_memories_fetches_once_and_accounts_every_lookup(
    redis_url: str, raw: redis.Redis, mode: str
) -> None:
    stats = fleet(workers.memory_herd, 3, redis_url, "prefs", 10, 0.2, mode)
    assert int(raw.get(COUNTER) or 0) == 1
    assert sum(s.misses for s in stats) == 1
    assert sum(s.hits + s.misses + s.coalesced for s in stats) == 30
    # The two other processes were served by the shared tier: each by a wait or a hit.
    assert sum(s.shared_waits + s.shared_hits for s in stats) == 2
    assert sum(s.shared_errors for s in stats) == 0


def test_a_shared_hit_fills_the_local_memory(redis_url: str) -> None:
    WorkingMemory(shared=patient_tier(redis_url)).search("prefs", lambda: {"v": 1})
    memory: WorkingMemory[Any] = WorkingMemory(shared=patient_tier(redis_url))
    wait_until(lambda: memory.shared.subscribed)  # type: ignore[union-attr]
    assert memory.search("prefs", lambda: {"v": 2}) == {"v": 1}
    assert memory.search("prefs", lambda: {"v": 3}) == {"v": 1}
    stats = memory.stats()
    assert (stats.hits, stats.shared_hits, stats.misses) == (2, 1, 0)
    assert memory.has("prefs")


def test_a_shared_hit_lives_in_the_local_memory_no_longer_than_its_shared_entry(
    redis_url: str, clock: FakeClock
) -> None:
    """An entry lives ``ttl`` from its fetch, whichever process holds it: one taken from Redis
    late in its life is kept locally for what is left of it, not for another ``ttl``. The
    reader's memory runs on a clock the test moves, so no window of real time decides it."""
    memory: WorkingMemory[Any] = WorkingMemory(
        shared=patient_tier(redis_url), ttl=60.0, clock=clock
    )
    wait_until(lambda: memory.shared.subscribed)  # type: ignore[union-attr]
    WorkingMemory(shared=patient_tier(redis_url), ttl=60.0).search("prefs", lambda: "first")
    time.sleep(1.5)  # at least: the shared entry has at most 58.5 s left from now on
    assert memory.search("prefs", lambda: "second") == "first"  # a shared hit
    assert memory.has("prefs")
    clock.advance(59.0)  # past what was left of the shared entry, within a fresh ttl of it
    assert not memory.has("prefs")


@pytest.mark.parametrize(
    "invalidate",
    [
        pytest.param(lambda m: m.invalidate("prefs"), id="invalidate-query"),
        pytest.param(lambda m: m.invalidate(), id="invalidate-all"),
        pytest.param(lambda m: m.clear(), id="clear"),
        pytest.param(lambda m: m.invalidate_scope("prefs"), id="invalidate-scope"),
    ],
)
def test_an_invalidation_in_one_memory_empties_the_others(redis_url: str, invalidate: Any) -> None:
    reader: WorkingMemory[Any] = WorkingMemory(shared=patient_tier(redis_url))
    writer: WorkingMemory[Any] = WorkingMemory(shared=patient_tier(redis_url))
    wait_until(lambda: reader.shared.subscribed)  # type: ignore[union-attr]
    reader.search("prefs", lambda: "old", limit=5)
    assert reader.has("prefs", limit=5)
    invalidate(writer)
    wait_until(lambda: not reader.has("prefs", limit=5))
    assert reader.search("prefs", lambda: "new", limit=5) == "new"


def test_stats_count_shared_errors_and_calls_still_succeed(own_server: Server) -> None:
    memory: WorkingMemory[Any] = WorkingMemory(
        shared=RedisTier(own_server.url, op_timeout=0.05, breaker_errors=2)
    )
    wait_until(lambda: memory.shared.subscribed)  # type: ignore[union-attr]
    own_server.stop()
    wait_until(lambda: not memory.shared.subscribed)  # type: ignore[union-attr]
    assert [memory.search(f"q{i}", lambda i=i: i) for i in range(5)] == list(range(5))
    stats = memory.stats()
    assert stats.shared_errors == 2
    assert stats.misses == 5
    time.sleep(0.5)  # the subscriber keeps failing to reconnect meanwhile
    assert memory.search("q1", lambda: "again") == 1  # and L1 keeps working


def test_local_memory_is_cleared_again_when_the_subscriber_is_back(own_server: Server) -> None:
    memory: WorkingMemory[Any] = WorkingMemory(shared=RedisTier(own_server.url, op_timeout=0.05))
    wait_until(lambda: memory.shared.subscribed)  # type: ignore[union-attr]
    own_server.stop()
    wait_until(lambda: not memory.shared.subscribed)  # type: ignore[union-attr]
    memory.search("prefs", lambda: "fetched while apart")
    assert memory.has("prefs")
    own_server.start()
    # Invalidations published while it was away are lost: back, it drops what it holds.
    wait_until(lambda: not memory.has("prefs"))
    assert memory.shared.subscribed  # type: ignore[union-attr]
