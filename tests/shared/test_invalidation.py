"""Invalidation everywhere: generation tokens, refused stale stores, pub/sub to other L1s."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import redis

from wm_middleware import RedisTier

from . import workers
from .conftest import SPAWN, HeldLeader, InThread, Sink, blocked, patient_tier, wait_until
from .servers import Server

TENANT_A = ("tenant", ("https://api.supermemory.ai", "fp-a"))
TENANT_B = ("tenant", ("https://api.supermemory.ai", "fp-b"))


def scopes_of(tenant: tuple[str, Any], tag: str, query: str) -> tuple[Any, ...]:
    """The scopes an adapter puts on a read (see ``_adapters._requests.read_scopes``)."""
    return (tenant, ("tag", tenant[1], tag), query)


def key_of(tenant: tuple[str, Any], query: str) -> tuple[Any, ...]:
    return ("sdk", tenant[1], "search", query)


def listening_peer(redis_url: str) -> tuple[RedisTier, Sink]:
    """Another process's tier, subscribed, that loaded ``key_of(TENANT_A, "q")`` with its scopes
    (messages name digests it knows), and the sink recording its drops. Keep the tier: one
    dropped by its owner stops listening."""
    there = patient_tier(redis_url)
    sink = Sink()
    there.bind(sink)
    wait_until(lambda: there.subscribed)
    there.load(key_of(TENANT_A, "q"), scopes_of(TENANT_A, "user-1", "q"), 60.0, lambda: "v")
    return there, sink


def test_invalidation_reaches_another_process_local_memory(redis_url: str) -> None:
    ready = SPAWN.Event()
    drops = SPAWN.Queue()
    loads = [(key_of(TENANT_A, "q"), scopes_of(TENANT_A, "user-1", "q"))]
    listener = SPAWN.Process(target=workers.listen, args=(redis_url, loads, ready, drops, 3.0))
    listener.start()
    try:
        assert ready.wait(30)
        tier = patient_tier(redis_url)
        tier.invalidate(keys=[key_of(TENANT_A, "q")], scopes=[("tag", TENANT_A[1], "user-1")])
        keys, scopes, everything = drops.get(timeout=5)
        assert keys == [repr(key_of(TENANT_A, "q"))]
        assert scopes == [repr(("tag", TENANT_A[1], "user-1"))]
        assert everything is False
        tier.invalidate(keys=[key_of(TENANT_A, "never loaded there")])  # nothing to drop there
        tier.clear()
        assert drops.get(timeout=5) == ([], [], True)
    finally:
        listener.join(10)


def test_invalidation_messages_name_digests_each_process_maps_to_its_own_entries(
    redis_url: str,
) -> None:
    here, (_listening, sink) = patient_tier(redis_url), listening_peer(redis_url)
    here.invalidate(keys=[key_of(TENANT_A, "other")], scopes=[("tag", TENANT_A[1], "user-2")])
    here.invalidate(scopes=[("tag", TENANT_A[1], "user-1")])
    wait_until(lambda: sink.drops)
    assert sink.drops == [(frozenset(), frozenset({("tag", TENANT_A[1], "user-1")}), False)]


@pytest.mark.parametrize(
    "invalidation",
    [
        pytest.param({"keys": [key_of(TENANT_A, "q")]}, id="key"),
        pytest.param({"scopes": [TENANT_A]}, id="tenant"),
        pytest.param({"scopes": [("tag", TENANT_A[1], "user-1")]}, id="tag"),
        pytest.param({"scopes": ["q"]}, id="query"),
        pytest.param(None, id="clear"),
    ],
)
def test_every_kind_of_invalidation_makes_other_processes_miss(
    redis_url: str, invalidation: dict[str, Any] | None
) -> None:
    writer, reader = patient_tier(redis_url), patient_tier(redis_url)
    key, scopes = key_of(TENANT_A, "q"), scopes_of(TENANT_A, "user-1", "q")
    assert reader.load(key, scopes, 60.0, lambda: "old").outcome == "fetched"
    assert reader.load(key, scopes, 60.0, lambda: "new").value == "old"
    if invalidation is None:
        writer.clear()
    else:
        writer.invalidate(**invalidation)
    result = reader.load(key, scopes, 60.0, lambda: "new")
    assert (result.value, result.outcome) == ("new", "fetched")
    assert writer.errors == reader.errors == 0


def test_invalidating_one_tenant_leaves_another_with_the_same_query_alone(redis_url: str) -> None:
    tier = patient_tier(redis_url)
    a = (key_of(TENANT_A, "q"), scopes_of(TENANT_A, "user-1", "q"))
    b = (key_of(TENANT_B, "q"), scopes_of(TENANT_B, "user-1", "q"))
    tier.load(*a, 60.0, lambda: "a")
    tier.load(*b, 60.0, lambda: "b")
    tier.invalidate(scopes=[TENANT_A, ("tag", TENANT_A[1], "user-1")])
    assert tier.load(*a, 60.0, lambda: "a2").value == "a2"
    assert tier.load(*b, 60.0, lambda: "b2").outcome == "shared_hit"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fetch_that_began_before_an_invalidation_never_stores(redis_url: str, mode: str) -> None:
    tier, writer = patient_tier(redis_url), patient_tier(redis_url)
    outcomes: list[str] = []
    tier.on_operation = lambda outcome, _s: outcomes.append(outcome)
    key, scopes = key_of(TENANT_A, "q"), scopes_of(TENANT_A, "user-1", "q")

    def fetch() -> str:
        writer.invalidate(scopes=[("tag", TENANT_A[1], "user-1")])  # a write lands meanwhile
        return "stale"

    if mode == "sync":
        result = tier.load(key, scopes, 60.0, fetch)
    else:
        import asyncio

        async def afetch() -> str:
            return fetch()

        result = asyncio.run(tier.aload(key, scopes, 60.0, afetch))
    assert result.value == "stale"  # its own callers asked before the write: they get it
    assert result.keep_local is False  # but no L1 keeps it
    assert "store_refused" in outcomes
    assert tier.load(key, scopes, 60.0, lambda: "fresh").value == "fresh"


def test_an_evicted_generation_token_never_revives_an_old_entry(own_server: Server) -> None:
    """ABA: under allkeys-lru a token can be evicted while its entries stay; a counter that
    restarted at 1 would make them valid again. Random tokens make that a miss."""
    client = own_server.client()
    client.config_set("maxmemory", "3mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    tier = patient_tier(own_server.url)
    keys = [f"q{i}" for i in range(40)]
    for key in keys:
        tier.load(key, (key,), 600.0, lambda key=key: {"old": key})
    tier.invalidate(scopes=keys)
    # Fill the server until it evicts, so tokens and entries go in LRU order, then drop the
    # remaining scope tokens by hand: every entry still present lost the token it was made under.
    for i in range(400):
        client.set(f"filler:{i}", b"x" * 20_000, ex=600)
    for name in client.scan_iter(match="wm:v1:*:g:s:*"):
        client.delete(name)
    for key in keys:
        result = tier.load(key, (key,), 600.0, lambda key=key: {"new": key})
        assert result.value == {"new": key}


def test_a_lost_subscriber_connection_clears_local_memories(
    redis_url: str, raw: redis.Redis
) -> None:
    tier = patient_tier(redis_url)
    sink = Sink()
    tier.bind(sink)
    wait_until(lambda: tier.subscribed)
    raw.client_kill_filter(_type="pubsub")
    wait_until(lambda: any(everything for _, _, everything in sink.drops))
    wait_until(lambda: tier.subscribed)  # and it comes back by itself


def pause_the_process(seconds: float) -> None:
    """Hold the GIL for ``seconds``: no thread of this process runs meanwhile, as when a C
    extension holds it or a loaded machine does not schedule the process (the server goes on)."""
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))  # a PyDLL call keeps the GIL


def test_a_subscriber_does_not_take_its_own_pause_for_a_lost_connection(redis_url: str) -> None:
    here, (_listening, sink) = patient_tier(redis_url), listening_peer(redis_url)
    for _ in range(2):  # each longer than a server may stay silent (0.3 s)
        pause_the_process(0.6)
    here.invalidate(keys=[key_of(TENANT_A, "q")])
    wait_until(lambda: sink.drops)
    # Heard on the same connection: no drop of everything, nothing published meanwhile lost.
    assert sink.drops == [(frozenset({key_of(TENANT_A, "q")}), frozenset(), False)]


def test_a_value_shared_across_a_subscriber_loss_is_not_kept_locally(
    redis_url: str, raw: redis.Redis
) -> None:
    leader, waiter = patient_tier(redis_url), patient_tier(redis_url)
    sink = Sink()
    waiter.bind(sink)
    wait_until(lambda: waiter.subscribed)
    held = HeldLeader(leader, "q", "v")
    waiting = InThread(lambda: waiter.load("q", (), 60.0, str))
    wait_until(lambda: blocked(raw) >= 1)
    raw.client_kill_filter(_type="pubsub")  # invalidations sent now would be lost
    wait_until(lambda: any(everything for _, _, everything in sink.drops))
    held.finish()
    found = waiting.join()
    assert (found.value, found.outcome) == ("v", "shared_wait")
    assert found.keep_local is False
    wait_until(lambda: waiter.subscribed)
    assert waiter.load("q", (), 60.0, str).keep_local is True
