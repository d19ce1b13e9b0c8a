"""How a Redis writer without the secret forges an entry, and what the tests look for after it.

The attack: anyone who may write the tier's keys takes a live entry, keeps its header (whose
signature matches the live generation tokens) and puts a body of their choosing after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import redis
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from wm_middleware import RedisTier
from wm_middleware._redis.protocol import Layout

__all__ = ["EVIL", "REAL", "SECRET", "TENANT", "entry_of", "forge", "load", "points"]

SECRET = "fleet-secret"
TENANT = ("tenant", ("https://api.supermemory.ai", "fp-a"))
REAL = {"owner": "alice", "results": ["likes green tea"]}
EVIL = {"owner": "EVIL"}


def entry_of(key: Any, scopes: tuple[Any, ...] = (), secret: str | None = SECRET) -> Any:
    """The Redis names (entry, lease, tokens) of a load, as a tier with ``secret`` spells them."""
    layout = Layout("wm", None if secret is None else secret.encode(), 30.0, cluster=False)
    plan = layout.plan(key, scopes, 60.0)
    assert plan is not None
    return plan


def forge(raw: redis.Redis, entry: str, body: bytes) -> None:
    """Keep the live entry's header (its signature still matches), replace what follows it."""
    header = raw.get(entry).split(b"\n", 1)[0]  # type: ignore[union-attr]
    raw.set(entry, header + b"\n" + body, px=60_000)


def load(tier: RedisTier, mode: str, key: Any, fetch: Any, scopes: tuple[Any, ...] = ()) -> Any:
    if mode == "sync":
        return tier.load(key, scopes, 60.0, fetch)

    async def afetch() -> Any:
        return fetch()

    return asyncio.run(tier.aload(key, scopes, 60.0, afetch))


def points(reader: InMemoryMetricReader) -> Iterator[tuple[str, Any, Any]]:
    """``(metric, wm.shared.outcome, value)`` of every data point ``reader`` holds."""
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    outcome = point.attributes.get("wm.shared.outcome")
                    yield metric.name, outcome, getattr(point, "value", None)
