"""Redis Cluster: one call's keys share a slot (no CROSSSLOT); sync, async and invalidation."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

from .conftest import Sink, patient_tier, wait_until
from .servers import Cluster, Server

TENANT = ("tenant", ("https://api.supermemory.ai", "fp-a"))
SCOPES = (TENANT, ("tag", TENANT[1], "user-1"), "prefs")
KEY = ("sdk", TENANT[1], "search", "prefs")


@pytest.fixture
def cluster_client(cluster: Cluster) -> redis.cluster.RedisCluster:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.port)
    client.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    return client


def slots_in_use(client: redis.cluster.RedisCluster) -> dict[int, list[bytes]]:
    found: dict[int, list[bytes]] = {}
    for node in client.get_primaries():
        for name in client.get_redis_connection(node).scan_iter():
            found.setdefault(client.keyslot(name), []).append(name)
    return found


def test_a_call_on_a_cluster_touches_one_slot(cluster_client: redis.cluster.RedisCluster) -> None:
    tier = patient_tier(cluster_client)
    assert tier.load(KEY, SCOPES, 60.0, lambda: {"r": 1}).outcome == "fetched"
    assert tier.load(KEY, SCOPES, 60.0, dict).outcome == "shared_hit"
    tier.invalidate(keys=[KEY], scopes=[("tag", TENANT[1], "user-1"), "prefs"])
    assert tier.load(KEY, SCOPES, 60.0, lambda: {"r": 2}).value == {"r": 2}
    assert tier.errors == 0
    slots = slots_in_use(cluster_client)
    tenant_slots = [s for s, names in slots.items() if not any(b":tenants" in n for n in names)]
    assert len(tenant_slots) == 1  # entry, lease, signal and every token: one slot


def test_an_asyncio_cluster_client_is_accepted(cluster: Cluster) -> None:
    async def main() -> list[str]:
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.port)
        await client.initialize()
        tier = patient_tier(client)

        async def fetch() -> list[int]:
            return [1]

        outcomes = [(await tier.aload(("a", 1), SCOPES, 60.0, fetch)).outcome for _ in range(2)]
        await client.aclose()
        assert tier.errors == 0
        return outcomes

    assert asyncio.run(main()) == ["fetched", "shared_hit"]


def test_invalidation_is_heard_across_a_cluster(cluster: Cluster) -> None:
    listener = patient_tier(
        redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[2].port)
    )
    sink = Sink()
    listener.bind(sink)
    wait_until(lambda: listener.subscribed)
    listener.load(KEY, SCOPES, 60.0, lambda: "held here")  # messages name digests it knows
    writer = patient_tier(redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.port))
    writer.invalidate(scopes=[TENANT])
    # (drops of everything, from a subscriber that lost its connection on a busy machine, are
    # legitimate and left out)
    named = lambda: [d for d in sink.drops if not d[2]]  # noqa: E731
    wait_until(named)
    assert named() == [(frozenset(), frozenset({TENANT}), False)]


def _ask(node: Server, *args: object) -> object:
    return node.client().execute_command(*args)


def test_a_tenant_slot_migrated_to_another_node_keeps_serving(
    cluster: Cluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    tier = patient_tier(cluster_client)
    assert tier.load(KEY, SCOPES, 60.0, lambda: {"r": 1}).outcome == "fetched"
    (slot,) = [
        s for s, names in slots_in_use(cluster_client).items() if any(b":e:" in n for n in names)
    ]
    source = next(n for n in cluster.nodes if _ask(n, "CLUSTER", "COUNTKEYSINSLOT", slot))
    target = next(n for n in cluster.nodes if n is not source)
    source_id, target_id = (str(_ask(n, "CLUSTER", "MYID"), "utf-8") for n in (source, target))
    _ask(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    _ask(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    names = _ask(source, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
    assert isinstance(names, list)
    _ask(source, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *names)
    for node in cluster.nodes:
        _ask(node, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
    wait_until(lambda: all(_ask(n, "CLUSTER", "COUNTKEYSINSLOT", slot) == 0 for n in (source,)))
    assert tier.load(KEY, SCOPES, 60.0, dict).value == {"r": 1}  # the entry moved with its slot
    tier.invalidate(scopes=[("tag", TENANT[1], "user-1")])
    assert tier.load(KEY, SCOPES, 60.0, lambda: {"r": 2}).value == {"r": 2}
