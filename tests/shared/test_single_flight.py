"""Cross-process single-flight: one upstream fetch per key, waiters woken, dead leaders replaced."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import redis

from wm_middleware import RedisTier

from . import workers
from .conftest import HeldLeader, InThread, blocked, fleet, kill_a_leader, patient_tier, wait_until
from .workers import COUNTER


def test_three_processes_of_ten_callers_make_one_upstream_fetch(
    redis_url: str, raw: redis.Redis, mode: str
) -> None:
    reports = fleet(workers.herd, 3, redis_url, "preferences", 10, 0.2, mode)
    assert int(raw.get(COUNTER) or 0) == 1
    outcomes = [o for report, _ in reports for o in report]
    assert len(outcomes) == 30
    assert outcomes.count("fetched") == 1
    assert set(outcomes) <= {"fetched", "shared_wait", "shared_hit"}
    assert all(errors == 0 for _, errors in reports)


def test_leader_error_wakes_waiters_at_once_and_is_cached_nowhere(
    redis_url: str, raw: redis.Redis, mode: str
) -> None:
    # The lease is long: a waiter that was not woken would still be blocked when we look.
    leader_tier = patient_tier(redis_url, lease=30.0)
    waiter_tier = patient_tier(redis_url, lease=30.0)
    leading = threading.Event()
    failing = threading.Event()
    boom = RuntimeError("upstream 500")
    seen: dict[str, Any] = {}

    def failing_fetch() -> Any:
        leading.set()
        failing.wait(10)
        raise boom

    def leader() -> None:
        try:
            if mode == "sync":
                leader_tier.load("q", (), 30.0, failing_fetch)
            else:

                async def fetch() -> Any:
                    return await asyncio.to_thread(failing_fetch)

                asyncio.run(leader_tier.aload("q", (), 30.0, fetch))
        except RuntimeError as error:
            seen["error"] = error

    def waiter() -> None:
        if mode == "sync":
            seen["result"] = waiter_tier.load("q", (), 30.0, lambda: "second")
        else:

            async def fetch() -> str:
                return "second"

            seen["result"] = asyncio.run(waiter_tier.aload("q", (), 30.0, fetch))

    first = threading.Thread(target=leader)
    first.start()
    assert leading.wait(10)
    second = threading.Thread(target=waiter)
    second.start()
    wait_until(lambda: blocked(raw) >= 1)
    assert "result" not in seen  # it is waiting on the leader
    failing.set()
    first.join(10)
    second.join(10)
    assert not second.is_alive(), "the waiter was not woken by the failed leader"
    assert seen["error"] is boom  # the upstream error reaches the caller unchanged
    assert seen["result"].value == "second"
    assert seen["result"].outcome == "fetched"  # the waiter took over the lease and fetched
    assert leader_tier.errors == waiter_tier.errors == 0


def test_dead_leader_is_replaced_when_its_lease_expires(redis_url: str, raw: redis.Redis) -> None:
    kill_a_leader(redis_url, raw, "q", lease=1.0)
    tier = patient_tier(redis_url, lease=1.0)
    waits: list[str] = []
    tier.on_operation = lambda outcome, _s: waits.append(outcome)
    result = tier.load("q", (), 30.0, lambda: workers.counted_fetch(redis_url, "fresh", 0))
    assert result.value == "fresh"
    assert result.outcome == "fetched"
    assert waits[0] == "wait" or "lease" in waits  # it found the dead lease (or it had expired)
    assert int(raw.get(COUNTER) or 0) == 2
    assert tier.errors == 0


def test_one_tier_serves_threads_and_several_event_loops(redis_url: str, raw: redis.Redis) -> None:
    # op_timeout 1 s: 36 connections open at once, and a busy machine may take longer than the
    # default 0.1 s to accept them (a tier error there is a fetch, not what this test is about).
    tier = RedisTier(redis_url, op_timeout=1.0)
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def fetch() -> dict[str, int]:
        return workers.counted_fetch(redis_url, {"n": 1}, 0.2)  # type: ignore[no-any-return]

    def in_a_loop() -> None:
        async def afetch() -> Any:
            return await asyncio.to_thread(fetch)

        async def main() -> list[str]:
            start.wait()
            results = await asyncio.gather(*(tier.aload("k", (), 30.0, afetch) for _ in range(5)))
            return [r.outcome for r in results if r.value == {"n": 1}]

        found = asyncio.run(main())
        with lock:
            outcomes.extend(found)

    def in_a_thread() -> None:
        start.wait()
        result = tier.load("k", (), 30.0, fetch)
        with lock:
            outcomes.append(result.outcome if result.value == {"n": 1} else "wrong")

    threads = [threading.Thread(target=in_a_loop) for _ in range(3)]
    threads += [threading.Thread(target=in_a_thread) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(outcomes) == 18
    assert outcomes.count("fetched") == 1
    assert int(raw.get(COUNTER) or 0) == 1
    assert tier.errors == 0


def test_waiters_block_instead_of_polling(redis_url: str, server: Any) -> None:
    """While one fetch runs, a waiting process sends a bounded number of commands."""
    held = HeldLeader(patient_tier(redis_url), "q", "v")
    waiter_tier = patient_tier(redis_url)
    before = server.client().info("commandstats")
    waiting = InThread(lambda: waiter_tier.load("q", (), 30.0, lambda: "x"))
    wait_until(lambda: blocked(server.client()) >= 1)  # it waits for the leader now
    time.sleep(0.3)  # let a polling waiter show itself; a blocking one sends nothing meanwhile
    held.finish()
    assert waiting.join().outcome == "shared_wait"
    after = server.client().info("commandstats")

    def calls(stats: dict[str, Any]) -> int:
        # Round trips of the tier (commands inside its scripts are counted apart by the server;
        # connection set-up and the subscriber's pings are not polling).
        data = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_blmove")
        return sum(stats.get(name, {}).get("calls", 0) for name in data)

    # get-or-lease, BLMOVE, get-or-lease for the waiter; store for the leader (+1 for a script
    # load after a server restart).
    assert calls(after) - calls(before) <= 5


def test_one_wake_up_reaches_every_waiting_process(redis_url: str, raw: redis.Redis) -> None:
    # Separate tiers: separate connections and blocking calls, as separate processes have.
    held = HeldLeader(patient_tier(redis_url, lease=30.0), "q", "v")
    waiters = [patient_tier(redis_url, lease=30.0) for _ in range(4)]
    calls = [InThread(lambda t=t: t.load("q", (), 60.0, lambda: "own")) for t in waiters]
    wait_until(lambda: blocked(raw) == 4)
    assert held.finish().outcome == "fetched"
    # A wake-up that reached one waiter only would leave the others blocked for the lease.
    results = [call.join() for call in calls]
    assert {(r.value, r.outcome) for r in results} == {("v", "shared_wait")}


def test_a_wait_longer_than_op_timeout_is_not_an_error(redis_url: str, raw: redis.Redis) -> None:
    """The wait lasts as long as the test holds the leader, which it does until the waiter has
    been blocked for longer than its op_timeout. That op_timeout (1 s) is one no loopback round
    trip before or after the wait reaches, however loaded the machine: only the wait can."""
    op_timeout = 1.0
    held = HeldLeader(patient_tier(redis_url), "q", "v")
    waiter = RedisTier(redis_url, op_timeout=op_timeout)
    waiting = InThread(lambda: waiter.load("q", (), 60.0, lambda: "own"))
    wait_until(lambda: blocked(raw) >= 1)  # the waiter waits on the leader
    time.sleep(1.5 * op_timeout)  # the blocking connection must not time out meanwhile
    assert blocked(raw) >= 1
    held.finish()
    result = waiting.join()
    assert (result.value, result.outcome) == ("v", "shared_wait")
    assert waiter.errors == 0


def test_a_waiter_past_its_deadline_fetches_itself(redis_url: str, raw: redis.Redis) -> None:
    """Leaders that hang one after another: a waiter waits two leases in all (the first
    leader's, then its successor's), then stops waiting and fetches for itself."""
    hung = HeldLeader(patient_tier(redis_url, lease=0.5), "q", "late")  # finishes after the test
    outcomes: list[str] = []
    tiers = [patient_tier(redis_url, lease=0.5) for _ in range(2)]
    for tier in tiers:
        tier.on_operation = lambda outcome, _s: outcomes.append(outcome)
    second_leading, given_up = threading.Event(), threading.Event()

    def slow() -> str:
        second_leading.set()
        given_up.wait(30)  # longer than a lease, and than the waiter's whole wait
        return "mine"

    first = InThread(lambda: tiers[0].load("q", (), 60.0, slow))
    assert second_leading.wait(10)  # the hung leader's lease expired; tiers[0] took it over
    second = tiers[1].load("q", (), 60.0, lambda: "waited enough")
    given_up.set()
    assert (second.value, second.outcome) == ("waited enough", "fetched")
    assert "wait_timeout" in outcomes or outcomes.count("lease") == 2
    assert first.join().value == "mine"
    hung.finish()
