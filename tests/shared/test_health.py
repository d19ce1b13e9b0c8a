"""A sick shared tier is visible (one WARNING per outage, one INFO when it is back); ``close()``."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import redis

from wm_middleware import RedisTier

from ..conftest import until
from .conftest import Sink, patient_tier, wait_until
from .servers import Server


def lines(caplog: pytest.LogCaptureFixture, level: int, where: str) -> list[str]:
    """Log lines of ``level`` about the server at ``where`` (tiers of earlier tests may still be
    trying the servers those tests stopped)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("wm_middleware") and r.levelno == level and where in r.getMessage()
    ]


def test_an_unreachable_tier_warns_once_and_no_call_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wm_middleware")
    tier = RedisTier("redis://127.0.0.1:1/0", op_timeout=0.05, breaker_cooldown=0.0)
    for i in range(20):
        assert tier.load(f"q{i}", (), 60.0, lambda i=i: i).value == i
    tier.invalidate(keys=["q1"])
    assert tier.errors >= 20
    (warning,) = lines(caplog, logging.WARNING, "127.0.0.1:1/")
    assert "cannot be reached" in warning
    assert lines(caplog, logging.INFO, "127.0.0.1:1/") == []
    tier.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stopped_server_warns_once_and_its_return_is_logged_once(
    own_server: Server, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.INFO, logger="wm_middleware")
    tier = patient_tier(own_server.url, breaker_errors=2, breaker_cooldown=0.05)
    where = f":{own_server.port}/"

    def load(key: str) -> str:
        if mode == "sync":
            return tier.load(key, (), 60.0, lambda: "v").outcome

        async def fetch() -> str:
            return "v"

        return asyncio.run(tier.aload(key, (), 60.0, fetch)).outcome

    assert load("q") == "fetched"
    # The subscriber settled first: a confirmation it reads only after the server died would
    # count as a return, and its failed reconnections as a second outage.
    wait_until(lambda: tier.subscribed)
    own_server.stop()
    for i in range(10):
        load(f"down{i}")
    assert len(lines(caplog, logging.WARNING, where)) == 1
    own_server.start()
    wait_until(lambda: load("q") == "shared_hit" or load("after") == "shared_hit")
    for i in range(5):
        load(f"up{i}")
    assert len(lines(caplog, logging.WARNING, where)) == 1
    (back,) = lines(caplog, logging.INFO, where)
    assert "reachable again" in back
    tier.close()


def tier_clients(raw: redis.Redis, before: set[int]) -> set[int]:
    return {int(c["id"]) for c in raw.client_list()} - before


def test_close_stops_the_subscriber_and_closes_every_connection(
    redis_url: str, raw: redis.Redis
) -> None:
    before = {int(c["id"]) for c in raw.client_list()}
    with patient_tier(redis_url) as tier:
        tier.bind(Sink())
        wait_until(lambda: tier.subscribed)
        tier.load("q", (), 60.0, lambda: 1)
        assert tier.load("q", (), 60.0, lambda: 2).outcome == "shared_hit"
        thread = tier._process.subscriber.thread  # type: ignore[union-attr]
        assert thread is not None
        assert thread.is_alive()
        assert len(tier_clients(raw, before)) >= 2  # commands and the subscriber
    assert not thread.is_alive()
    assert thread not in threading.enumerate()
    wait_until(lambda: tier_clients(raw, before) == set())
    # A closed tier is not broken: a later call opens what it needs again.
    assert tier.load("q", (), 60.0, lambda: 3).outcome == "shared_hit"
    tier.close()
    wait_until(lambda: tier_clients(raw, before) == set())


def test_close_also_closes_an_event_loops_connections(redis_url: str, raw: redis.Redis) -> None:
    before = {int(c["id"]) for c in raw.client_list()}
    tier = patient_tier(redis_url)

    async def main() -> None:
        async def fetch() -> int:
            return 1

        await tier.aload("q", (), 60.0, fetch)
        assert tier_clients(raw, before)
        tier.close()
        # The loop runs the closing it was handed before this coroutine ends.
        await until(lambda: tier_clients(raw, before) == set(), "the loop's connections closed")

    asyncio.run(main())
