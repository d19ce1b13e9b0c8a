"""RedisTier's boundary: arguments checked up front, targets accepted, redis-py stays optional."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import redis

import wm_middleware
from wm_middleware import RedisTier
from wm_middleware._core import SharedTier

from .conftest import PATIENT, patient_tier


def test_redis_tier_implements_the_shared_tier_protocol(redis_url: str) -> None:
    assert isinstance(RedisTier(redis_url), SharedTier)


def test_the_core_does_not_import_redis() -> None:
    code = "import sys, wm_middleware; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert wm_middleware.RedisTier is RedisTier


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"target": 6379}, TypeError, "target must be"),
        ({"target": "http://localhost"}, ValueError, "redis://"),
        ({"namespace": ""}, ValueError, "namespace"),
        ({"namespace": "a{b}"}, ValueError, "braces"),
        ({"secret": 1}, TypeError, "secret"),
        ({"secret": ""}, ValueError, "secret"),
        ({"op_timeout": 0}, ValueError, "op_timeout"),
        ({"op_timeout": "1"}, TypeError, "op_timeout"),
        ({"lease": float("inf")}, ValueError, "lease"),
        ({"breaker_cooldown": -1}, ValueError, "breaker_cooldown"),
        ({"breaker_errors": 0}, ValueError, "breaker_errors"),
        ({"breaker_errors": 1.5}, TypeError, "breaker_errors"),
        ({"encode": bytes}, ValueError, "together"),
        ({"encode": 1, "decode": 2}, TypeError, "callables"),
        ({"max_value_bytes": 0}, ValueError, "max_value_bytes"),
    ],
)
def test_bad_arguments_fail_at_construction(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    target = kwargs.pop("target", "redis://127.0.0.1:1/0")
    with pytest.raises(error, match=match):
        RedisTier(target, **kwargs)


def test_construction_makes_no_connection() -> None:
    # Nothing listens on port 1: a tier is built (e.g. before a fork) without touching Redis.
    tier = RedisTier("redis://127.0.0.1:1/0")
    assert tier.errors == 0
    assert tier.breaker_state == "closed"


def test_a_client_target_is_reached_with_the_tiers_own_timeouts(redis_url: str) -> None:
    given: Any = redis.Redis.from_url(redis_url, socket_timeout=30)
    tier = patient_tier(given)
    assert tier.load("q", (), 60.0, lambda: 1).outcome == "fetched"
    main = tier._process.sync_conns().main  # type: ignore[union-attr]
    assert main.connection_pool.connection_kwargs["socket_timeout"] == PATIENT
    retry = main.connection_pool.connection_kwargs["retry"]
    # At most one immediate retry, on a broken connection only: never on a timeout.
    assert retry._retries <= 1
    assert not any(issubclass(redis.TimeoutError, e) for e in retry._supported_errors)
    assert given.connection_pool.connection_kwargs["socket_timeout"] == 30


def test_an_asyncio_client_target_serves_sync_and_async_calls(redis_url: str) -> None:
    import asyncio

    import redis.asyncio

    tier = patient_tier(redis.asyncio.Redis.from_url(redis_url))
    assert tier.load("q", (), 60.0, lambda: [1]).outcome == "fetched"

    async def fetch() -> list[int]:
        return [2]

    assert asyncio.run(tier.aload("q", (), 60.0, fetch)).value == [1]


def test_keys_that_no_other_process_could_spell_are_not_shared(redis_url: str) -> None:
    tier = patient_tier(redis_url)
    key = ("q", object())
    assert tier.load(key, (), 60.0, lambda: 1).outcome == "fetched"
    assert tier.load(key, (), 60.0, lambda: 2).value == 2
    assert tier.errors == 0
