"""A sick Redis never fails a call: no retries, short timeouts, a circuit breaker.

Delay is bounded by counting: each tier error costs at most ``op_timeout``, and after
``breaker_errors`` of them the tier is skipped, so a run of calls pays for that many at most.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from wm_middleware import RedisTier

from .conftest import patient_tier, wait_until
from .servers import Server


def load(tier: RedisTier, mode: str, key: str, value: Any) -> Any:
    if mode == "sync":
        return tier.load(key, (), 60.0, lambda: value)

    async def fetch() -> Any:
        return value

    return asyncio.run(tier.aload(key, (), 60.0, fetch))


@contextlib.contextmanager
def down(server: Server) -> Iterator[None]:
    server.stop()
    yield


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("sickness", ["down", "hung"])
def test_sick_server_fails_no_call_and_opens_the_breaker(
    own_server: Server, mode: str, sickness: str
) -> None:
    tier = RedisTier(own_server.url, op_timeout=0.05, breaker_errors=3, breaker_cooldown=60.0)
    outcomes: list[str] = []
    tier.on_operation = lambda outcome, _s: outcomes.append(outcome)
    # Connections exist before. A fetched outcome may also be a tier error (50 ms is short on a
    # loaded machine): warm up until the tier serves, then count from there.
    wait_until(lambda: load(tier, mode, "warm", 1).outcome == "shared_hit")
    errors, outcomes[:] = tier.errors, []
    with down(own_server) if sickness == "down" else own_server.paused():
        results = [load(tier, mode, f"q{i}", i) for i in range(20)]
        assert [r.value for r in results] == list(range(20))
        assert {r.outcome for r in results} == {"fetched"}
        assert tier.errors - errors == 3  # three failed operations, then the tier is skipped
        assert tier.breaker_state == "open"
    assert outcomes.count("error") == 3


def test_a_restarted_server_is_used_again_after_the_cooldown(own_server: Server) -> None:
    tier = patient_tier(own_server.url, breaker_errors=2, breaker_cooldown=0.2)
    tier.load("q", (), 60.0, lambda: "v")
    own_server.stop()
    for i in range(5):
        assert tier.load(f"k{i}", (), 60.0, lambda i=i: i).value == i
    assert tier.breaker_state == "open"
    own_server.start()
    wait_until(lambda: tier.breaker_state == "half_open")
    assert tier.load("q", (), 60.0, lambda: "again").outcome == "fetched"  # the probe
    assert tier.breaker_state == "closed"
    assert tier.load("q", (), 60.0, lambda: "x").outcome == "shared_hit"
    assert tier.errors == 2


def test_a_failed_probe_opens_the_breaker_again(own_server: Server) -> None:
    tier = RedisTier(own_server.url, op_timeout=0.05, breaker_errors=1, breaker_cooldown=0.1)
    own_server.stop()
    tier.load("q", (), 60.0, lambda: 1)
    wait_until(lambda: tier.breaker_state == "half_open")
    assert tier.load("q", (), 60.0, lambda: 2).value == 2
    assert tier.breaker_state == "open"
    assert tier.errors == 2


def test_invalidation_with_the_server_down_does_not_raise(own_server: Server) -> None:
    tier = RedisTier(own_server.url, op_timeout=0.05)
    own_server.stop()
    tier.invalidate(keys=["q"], scopes=["q"])
    tier.clear()
    assert tier.errors == 2


def test_fetch_errors_are_not_tier_errors(redis_url: str) -> None:
    tier = patient_tier(redis_url, breaker_errors=1)
    for _ in range(3):
        with pytest.raises(ZeroDivisionError):
            tier.load("q", (), 60.0, lambda: 1 / 0)
    assert tier.errors == 0
    assert tier.breaker_state == "closed"
