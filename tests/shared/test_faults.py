"""What operators and networks do to a shared tier, against real servers (issue 18).

Each test reproduces one fault with real parts: a server killed and restarted with its AOF, a TCP
proxy that cuts or trickles, ``CLIENT PAUSE``, a full ``noeviction`` server, a SIGKILLed leader,
keys edited by hand. Bounds are on outcomes and on a join that would hang, never on wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pytest
import redis

from wm_middleware import RedisTier

from . import workers
from .conftest import HeldLeader, InThread, Sink, blocked, kill_a_leader, patient_tier, wait_until
from .faults import Proxy
from .servers import Server
from .workers import COUNTER

TENANT = ("tenant", ("https://api.supermemory.ai", "fp-a"))
TAG = ("tag", TENANT[1], "user-1")
KEY = ("sdk", TENANT[1], "search", '{"q":"what does alice like"}')
SCOPES = (TENANT, TAG, "what does alice like")


def round_trips(server: Server) -> int:
    """Tier round trips the server has seen (scripts and blocking calls)."""
    stats = server.client().info("commandstats")
    names = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_blmove")
    return sum(stats.get(name, {}).get("calls", 0) for name in names)


def entry_key(raw: redis.Redis) -> bytes:
    (name,) = [k for k in raw.scan_iter(match="wm:v1:*:e:*")]
    return name  # type: ignore[no-any-return]


# -- 1. a write that cannot reach Redis is replayed before Redis serves again -----------------


@contextlib.contextmanager
def unreachable(fault: str, server: Server, proxy: Proxy) -> Iterator[None]:
    if fault == "restart":
        server.stop()
        yield
        server.start()
    elif fault == "cut":
        proxy.cut()
        yield
        proxy.restore()
    else:
        server.client().execute_command("CLIENT", "PAUSE", 3000, "WRITE")
        yield
        server.client().execute_command("CLIENT", "UNPAUSE")


@pytest.mark.parametrize("fault", ["restart", "cut", "pause"])
def test_a_failed_invalidation_is_replayed_before_anything_is_served(
    aof_server: Server, fault: str, mode: str
) -> None:
    proxy = Proxy(aof_server.port)
    try:
        # Bounds a loaded machine still meets: only the fault must make the writer's call fail;
        # the peer never meets it.
        writer = RedisTier(proxy.url, op_timeout=0.5, breaker_errors=100)
        peer = patient_tier(aof_server.url, breaker_errors=100)
        assert writer.load(KEY, SCOPES, 600.0, lambda: "old").outcome == "fetched"
        assert peer.load(KEY, SCOPES, 600.0, lambda: "new").value == "old"
        with unreachable(fault, aof_server, proxy):
            writer.invalidate(scopes=[TAG])  # cannot reach Redis: must not be forgotten
        if mode == "sync":
            mine = writer.load(KEY, SCOPES, 600.0, lambda: "new")
        else:

            async def fetch() -> str:
                return "new"

            mine = asyncio.run(writer.aload(KEY, SCOPES, 600.0, fetch))
        assert mine.value == "new"  # the writer never sees its own write undone
        assert peer.load(KEY, SCOPES, 600.0, lambda: "new").value == "new"
        fresh = patient_tier(aof_server.url)
        assert fresh.load(KEY, SCOPES, 600.0, lambda: "new").value == "new"
    finally:
        proxy.close()


def test_pending_invalidations_are_bounded_and_still_reach_every_key(own_server: Server) -> None:
    tier = RedisTier(own_server.url, op_timeout=0.05, breaker_errors=100_000)
    keys = [f"q{i}" for i in range(3000)]
    for key in keys[:50]:
        tier.load(key, (), 600.0, lambda key=key: f"old {key}")
    own_server.stop()
    for key in keys:
        tier.invalidate(keys=[key])
    assert len(tier._pending) <= 1024  # bounded: beyond that they collapse into one clear
    own_server.start()
    for key in keys[:50]:
        assert tier.load(key, (), 600.0, lambda key=key: f"new {key}").value == f"new {key}"


# -- 2. a full noeviction server still takes invalidations ------------------------------------


def test_invalidation_works_on_a_full_noeviction_server(own_server: Server) -> None:
    raw = own_server.client()
    raw.config_set("maxmemory-policy", "noeviction")
    writer, reader = patient_tier(own_server.url), patient_tier(own_server.url)
    sink = Sink()
    reader.bind(sink)
    wait_until(lambda: reader.subscribed)
    assert reader.load(KEY, SCOPES, 600.0, lambda: "old").outcome == "fetched"
    raw.config_set("maxmemory", 1)  # every write that needs memory is refused from now on
    try:
        writer.invalidate(scopes=[TAG])
        assert writer.errors == 0
        wait_until(lambda: any(TAG in scopes for _, scopes, _ in sink.drops))
        assert reader.load(KEY, SCOPES, 600.0, lambda: "new").value == "new"
    finally:
        raw.config_set("maxmemory", 0)


# -- 3. a store refused for memory releases the lease -----------------------------------------


def test_a_store_refused_for_memory_releases_the_lease_and_wakes_waiters(
    own_server: Server,
) -> None:
    raw = own_server.client()
    raw.config_set("maxmemory-policy", "noeviction")
    leader, waiter = (
        patient_tier(own_server.url, lease=30.0),
        patient_tier(own_server.url, lease=30.0),
    )
    held = HeldLeader(leader, "q", {"big": "x" * 1000})
    waiting = InThread(lambda: waiter.load("q", (), 60.0, lambda: "own"))
    wait_until(lambda: blocked(raw) >= 1)
    raw.config_set("maxmemory", 1)
    try:
        assert held.finish().outcome == "fetched"
        found = waiting.join()  # woken at once, not after the 30 s lease
        assert (found.value, found.outcome) == ("own", "fetched")
        assert leader.errors == 1
        leases = [k for k in raw.scan_iter(match="wm:v1:*:l:*") if raw.type(k) == b"string"]
        assert leases == []  # released, not left to expire
    finally:
        raw.config_set("maxmemory", 0)


# -- 4. op_timeout bounds a whole reply, even on a trickling link ------------------------------


def test_op_timeout_bounds_a_call_on_a_trickling_link(proxy: Proxy, mode: str) -> None:
    # op_timeout PATIENT (2 s): the healthy first call has room on a busy machine, and the
    # trickled reply below would take 40 s, past InThread's 10 s, with a per-read timeout.
    tier = patient_tier(proxy.url, breaker_errors=100)
    value = {"body": "x" * 4000}  # ~4 KB: 40 s at one byte every 10 ms
    assert tier.load("q", (), 600.0, lambda: value).outcome == "fetched"
    proxy.trickle = 0.01
    if mode == "sync":
        call = InThread(lambda: tier.load("q", (), 600.0, lambda: "direct"))
    else:

        async def fetch() -> str:
            return "direct"

        call = InThread(lambda: asyncio.run(tier.aload("q", (), 600.0, fetch)))
    result = call.join()  # a per-read timeout would keep it reading for 40 s
    assert (result.value, result.outcome) == ("direct", "fetched")
    assert tier.errors == 1


def test_a_slow_link_is_served_and_a_stalled_one_bounded(proxy: Proxy) -> None:
    tier = patient_tier(proxy.url, breaker_errors=100)
    assert tier.load("q", (), 600.0, lambda: [1]).outcome == "fetched"
    proxy.latency = 0.03  # 30 ms each way: slower, still well within op_timeout
    assert tier.load("q", (), 600.0, lambda: [2]).outcome == "shared_hit"
    proxy.stalled = True  # a partition that drops packets: the connection stays open
    stalled = InThread(lambda: tier.load("q", (), 600.0, lambda: [3]))
    assert stalled.join().outcome == "fetched"
    assert tier.errors == 1


# -- 5. a dead leader is replaced by one waiter, the others wait for it -----------------------


def test_after_a_leader_dies_one_waiter_takes_over_and_the_rest_wait(
    redis_url: str, raw: redis.Redis
) -> None:
    kill_a_leader(redis_url, raw, "q", lease=2.0)
    tiers = [patient_tier(redis_url, lease=2.0) for _ in range(4)]

    def fetch() -> str:
        return workers.counted_fetch(redis_url, "fresh", 0.3)  # type: ignore[no-any-return]

    calls = [InThread(lambda t=t: t.load("q", (), 60.0, fetch)) for t in tiers]
    results = [call.join() for call in calls]
    assert all(r.value == "fresh" for r in results)
    assert sorted(r.outcome for r in results) == ["fetched", *["shared_wait"] * 3]
    assert int(raw.get(COUNTER) or 0) == 2  # the dead leader's fetch and one replacement


# -- 6. pub/sub carries digests only -----------------------------------------------------------


def test_invalidation_messages_carry_no_query_text_or_parameter(redis_url: str) -> None:
    listener = redis.Redis.from_url(redis_url).pubsub()
    listener.subscribe("wm:v1:invalidate")
    assert listener.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]
    tier = patient_tier(redis_url)
    tier.invalidate(keys=[KEY], scopes=[TAG, "what does alice like"])
    message = None
    deadline = time.monotonic() + 5
    while message is None and time.monotonic() < deadline:
        message = listener.get_message(timeout=1)
    assert message is not None
    data: bytes = message["data"]
    for clear in (b"alice", b"user-1", b"fp-a", b"api.supermemory.ai", b"search"):
        assert clear not in data
    listener.close()


# -- 7. keys whose TTL was removed by hand -----------------------------------------------------


def test_a_lease_without_a_ttl_never_makes_waiters_poll(own_server: Server) -> None:
    raw = own_server.client()
    held = HeldLeader(patient_tier(own_server.url), "q", "v")
    (lease,) = raw.scan_iter(match="wm:v1:*:l:*")
    raw.persist(lease)
    waiter = patient_tier(own_server.url)
    before = round_trips(own_server)
    waiting = InThread(lambda: waiter.load("q", (), 30.0, lambda: "x"))
    wait_until(lambda: blocked(raw) >= 1)  # it waits for the leader now
    time.sleep(0.3)  # a polling waiter shows itself meanwhile; a blocked one sends nothing
    held.finish()
    assert waiting.join().outcome == "shared_wait"
    assert round_trips(own_server) - before <= 5


def test_an_entry_without_a_ttl_is_never_served_past_its_own_expiry(
    redis_url: str, raw: redis.Redis
) -> None:
    tier = patient_tier(redis_url)
    tier.load("q", (), 0.2, lambda: "old")
    raw.persist(entry_key(raw))
    time.sleep(0.3)  # past the entry's 0.2 s; the server would keep it forever
    result = tier.load("q", (), 0.2, lambda: "new")
    assert (result.value, result.outcome) == ("new", "fetched")


# -- 8. a corrupt entry is replaced ------------------------------------------------------------


def test_a_corrupt_entry_with_a_valid_header_is_a_miss_that_leases_and_stores(
    redis_url: str, raw: redis.Redis
) -> None:
    tier, other = patient_tier(redis_url), patient_tier(redis_url)
    tier.load("q", (), 60.0, lambda: {"ok": 1})
    name = entry_key(raw)
    header = raw.get(name).split(b"\n", 1)[0]  # type: ignore[union-attr]
    raw.set(name, header + b"\n{not json", px=60_000)
    result = tier.load("q", (), 60.0, lambda: {"ok": 2})
    assert (result.value, result.outcome) == ({"ok": 2}, "fetched")
    again = other.load("q", (), 60.0, lambda: {"ok": 3})
    assert (again.value, again.outcome) == ({"ok": 2}, "shared_hit")  # stored, not refetched


# -- 9. credentials are masked everywhere ------------------------------------------------------


def test_a_bad_url_error_masks_its_password() -> None:
    with pytest.raises(ValueError, match="redis://") as caught:
        RedisTier("http://user:s3cr3tpw@host")
    assert "s3cr3tpw" not in str(caught.value)
    assert "user:***@host" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:s3cr3tpw@127.0.0.1:1/0",
        "redis://:s3cr3tpw@127.0.0.1:1/0",
        "redis://127.0.0.1:1/0?password=s3cr3tpw",
    ],
)
def test_credentials_never_show_in_repr_or_logs(url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    tier = RedisTier(url, op_timeout=0.05)
    assert "s3cr3tpw" not in repr(tier)
    assert "127.0.0.1:1" in repr(tier)
    assert tier.load("q", (), 60.0, lambda: 1).value == 1
    tier.invalidate(keys=["q"])
    tier.close()
    assert any(r.name.startswith("wm_middleware") for r in caplog.records)
    assert "s3cr3tpw" not in caplog.text


def test_an_acl_user_is_served_and_its_password_stays_hidden(
    own_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    raw = own_server.client()
    raw.acl_setuser(
        "app",
        enabled=True,
        passwords=["+s3cr3tpw"],
        keys=["wm:*"],
        channels=["wm:*"],
        commands=["+@all"],
    )
    url = f"redis://app:s3cr3tpw@127.0.0.1:{own_server.port}/0"
    tier, other = patient_tier(url), patient_tier(url)
    assert tier.load(KEY, SCOPES, 60.0, lambda: [1]).outcome == "fetched"
    assert other.load(KEY, SCOPES, 60.0, list).outcome == "shared_hit"
    tier.invalidate(scopes=[TAG])
    assert other.load(KEY, SCOPES, 60.0, lambda: [2]).value == [2]
    assert tier.errors == other.errors == 0
    assert "s3cr3tpw" not in repr(tier) + caplog.text
