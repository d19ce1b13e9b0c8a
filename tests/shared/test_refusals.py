"""A tier the server refuses is said, not silent: a database it does not have, an ACL user without
a command the tier needs. One WARNING per cause naming it, however many calls it refuses, and no
call fails; a URL whose database is not a number is refused up front, naming the setting."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import NoPermissionError, ResponseError

from wm_middleware import RedisTier, WorkingMemory
from wm_middleware._redis import health
from wm_middleware._settings import Settings

from .conftest import patient_tier
from .servers import Server


def warnings(caplog: pytest.LogCaptureFixture, where: str) -> list[str]:
    """WARNING lines of this library about the server at ``where``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("wm_middleware")
        and r.levelno == logging.WARNING
        and where in r.getMessage()
    ]


def load(tier: RedisTier, mode: str, key: str) -> Any:
    """One load of ``key`` by ``tier``, sync or async; its result."""
    if mode == "sync":
        return tier.load(key, (), 60.0, lambda: "fetched value")

    async def fetch() -> str:
        return "fetched value"

    return asyncio.run(tier.aload(key, (), 60.0, fetch))


@pytest.fixture
def user(redis_url: str, raw: redis.Redis) -> Iterator[str]:
    """A fresh ACL user name on the session server, emptied (deleted after the test)."""
    name = f"app-{secrets.token_hex(4)}"
    yield name
    raw.acl_deluser(name)


def url_of(server: Server, user: str, password: str) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_database_the_server_does_not_have_is_warned_once_naming_it(
    server: Server, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.INFO, logger="wm_middleware")
    where = f"127.0.0.1:{server.port}/99"
    tier = patient_tier(f"redis://{where}", breaker_cooldown=0.0)
    try:
        for i in range(10):
            result = load(tier, mode, f"q{i}")
            assert (result.value, result.outcome) == ("fetched value", "fetched")
        assert tier.errors >= 10
        (warning,) = warnings(caplog, where)
        assert "refuses" in warning
        assert "ResponseError" in warning
        assert "DB index is out of range" in warning
    finally:
        tier.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_acl_user_without_the_scripts_is_warned_once_naming_noperm(
    server: Server, raw: redis.Redis, user: str, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.INFO, logger="wm_middleware")
    raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-@scripting")
    tier = patient_tier(url_of(server, user, "pw"), breaker_cooldown=0.0)
    try:
        for i in range(10):
            assert load(tier, mode, f"q{i}").outcome == "fetched"
        assert tier.errors >= 10
        (warning,) = warnings(caplog, f"{user}:***@127.0.0.1:{server.port}")
        assert NoPermissionError.__name__ in warning
        assert "'evalsha' command" in warning
        assert "pw@" not in warning
    finally:
        tier.close()


def test_an_acl_user_without_publish_is_warned_once_when_it_invalidates(
    server: Server, raw: redis.Redis, user: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wm_middleware")
    raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-publish")
    tier = patient_tier(url_of(server, user, "pw"))
    try:
        assert tier.load("q", (), 60.0, lambda: "v").outcome == "fetched"
        for _ in range(5):
            tier.invalidate(keys=["q"])
        assert tier.errors >= 5
        (warning,) = warnings(caplog, f"127.0.0.1:{server.port}")
        assert NoPermissionError.__name__ in warning
        assert "'publish' command" in warning
    finally:
        tier.close()


def test_a_memory_on_a_refused_tier_counts_shared_errors_and_says_why(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wm_middleware")
    where = f"127.0.0.1:{server.port}/99"
    tier = patient_tier(f"redis://{where}", breaker_cooldown=0.0)
    memory: WorkingMemory[str] = WorkingMemory(shared=tier)
    try:
        for i in range(5):
            assert memory.search(f"query {i}", lambda: "fetched value") == "fetched value"
        assert memory.stats().shared_errors >= 5
        (warning,) = warnings(caplog, where)  # the subscriber meets the same cause
        assert "DB index is out of range" in warning
    finally:
        tier.close()


def test_refusals_are_said_once_per_cause_for_a_bounded_number_of_causes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wm_middleware")
    causes = getattr(health, "CAUSES", 16)
    tier_health = health.Health("redis://refusing.example:6379/0")
    for _ in range(3):
        for n in range(causes * 2):
            tier_health.failed(ResponseError(f"refusal number {n}"))
    said = warnings(caplog, "refusing.example")
    assert [f"refusal number {n})" in line for n, line in enumerate(said)] == [True] * causes


@pytest.mark.parametrize(
    ("url", "database"),
    [
        ("redis://127.0.0.1:6379/abc", "'abc' as its path"),
        ("redis://app:s3cret@127.0.0.1:6379/db1", "'db1' as its path"),
        ("rediss://127.0.0.1:6379/-1", "'-1' as its path"),
        ("redis://127.0.0.1:6379/0?db=two", "'two' as its ?db="),
        ("unix:///tmp/redis.sock?db=x", "'x' as its ?db="),
    ],
)
def test_a_url_whose_database_is_not_a_number_is_refused_naming_the_setting(
    url: str, database: str
) -> None:
    for make, name in (
        (lambda: Settings.resolve({"shared": url}, {}), "shared "),
        (lambda: Settings.resolve({}, {"WM_MIDDLEWARE_SHARED_URL": url}), "SHARED_URL "),
        (lambda: RedisTier(url), "RedisTier target "),
    ):
        with pytest.raises(ValueError, match="must name its database as a number") as raised:
            make()
        message = str(raised.value)
        assert message.startswith(name.lstrip()) or f"WM_MIDDLEWARE_{name}" in message
        assert database in message
        assert "s3cret" not in message


def test_a_url_whose_port_is_not_a_number_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="shared is not a valid URL"):
        Settings.resolve({"shared": "redis://127.0.0.1:port/0"}, {})
