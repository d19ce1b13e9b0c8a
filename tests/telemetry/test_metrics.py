"""Metrics of the working memory, collected with the real SDK's ``InMemoryMetricReader``."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import AggregationTemporality, Gauge, Histogram, Sum

from wm_middleware import WorkingMemory
from wm_middleware._telemetry import DURATION_BUCKETS

from .conftest import Otel, make_read, make_runtime, make_write, until

RECORDS = ("a", "b")
ALLOWED_KEYS = {"wm.cache.result", "supermemory.operation", "error.type"}
# gen_ai.client.operation.duration: the GenAI conventions' attributes, none naming a user.
GENAI_KEYS = {
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "server.address",
    "server.port",
    "error.type",
}
RESULTS = {"hit", "miss", "coalesced", "bypass"}


def test_instruments_names_units_and_kinds(otel: Otel) -> None:
    runtime = make_runtime(otel)
    runtime.read(make_read(), lambda: RECORDS)
    runtime.read(make_read(), lambda: RECORDS)
    metrics = otel.metrics()

    expected: dict[str, tuple[str, type, bool | None]] = {
        "wm.cache.requests": ("{request}", Sum, True),
        "wm.search.duration": ("s", Histogram, None),
        "gen_ai.client.operation.duration": ("s", Histogram, None),
        "wm.cache.size": ("{entry}", Gauge, None),
        "wm.cache.inflight": ("{request}", Gauge, None),
        "wm.cache.evictions": ("{entry}", Sum, True),
        "wm.cache.expirations": ("{entry}", Sum, True),
        "wm.cache.invalidations": ("{entry}", Sum, True),
    }
    assert set(metrics) == set(expected)
    for name, (unit, kind, monotonic) in expected.items():
        metric = metrics[name]
        assert metric.unit == unit, name
        assert isinstance(metric.data, kind), name
        assert metric.description, name
        if monotonic is not None:
            assert metric.data.is_monotonic is monotonic, name
            assert metric.data.aggregation_temporality is AggregationTemporality.CUMULATIVE


def test_duration_histogram_has_sub_millisecond_buckets_in_front(otel: Otel) -> None:
    runtime = make_runtime(otel)
    runtime.read(make_read(), lambda: RECORDS)
    runtime.read(make_read(), lambda: RECORDS)
    points = otel.points("wm.search.duration")
    assert points
    for point in points:
        bounds = tuple(point.explicit_bounds)
        assert bounds == DURATION_BUCKETS
        assert bounds == tuple(sorted(bounds))
        assert bounds[:4] == (0.00005, 0.0001, 0.00025, 0.0005)  # a hit lands in these
        assert bounds[-1] >= 5.0  # and an upstream timeout still has a bucket
    hit = next(p for p in points if p.attributes["wm.cache.result"] == "hit")
    assert hit.count == 1
    assert hit.sum < 1.0


def test_duration_buckets_resolve_upstream_calls_of_50_to_300_ms() -> None:
    """No gap wider than 50 ms between 50 and 300 ms, so a 110 ms call reads as ~110 ms,
    not as the middle of a 100-500 ms bucket."""
    inside = [b for b in DURATION_BUCKETS if 0.05 <= b <= 0.3]
    assert inside[0] == 0.05
    assert inside[-1] == 0.3
    gaps = [round(high - low, 6) for low, high in itertools.pairwise(inside)]
    assert max(gaps) <= 0.05
    assert any(0.1 < b <= 0.125 for b in DURATION_BUCKETS)  # 110 ms sits in a 25 ms bucket


def test_requests_and_durations_by_result_and_operation(otel: Otel) -> None:
    runtime = make_runtime(otel)
    runtime.read(make_read(), lambda: RECORDS)
    for _ in range(3):
        runtime.read(make_read(), lambda: RECORDS)
    runtime.read(make_read(operation="profile"), lambda: RECORDS)
    runtime.bypass("search.memories", ("h", 1), lambda: "raw")
    with pytest.raises(KeyError):
        runtime.read(make_read("boom"), _fail)

    assert otel.requests() == {
        ("miss", "search.memories"): 2,
        ("hit", "search.memories"): 3,
        ("miss", "profile"): 1,
        ("bypass", "search.memories"): 1,
    }
    durations = otel.durations()
    assert (
        durations[(("supermemory.operation", "search.memories"), ("wm.cache.result", "hit"))] == 3
    )
    assert durations[(("supermemory.operation", "profile"), ("wm.cache.result", "miss"))] == 1
    failed = [k for k in durations if ("error.type", "KeyError") in k]
    assert failed == [
        (
            ("error.type", "KeyError"),
            ("supermemory.operation", "search.memories"),
            ("wm.cache.result", "miss"),
        )
    ]


async def test_coalesced_calls_are_counted(otel: Otel) -> None:
    runtime = make_runtime(otel)
    release = asyncio.Event()

    async def slow() -> Any:
        await release.wait()
        return RECORDS

    tasks = [asyncio.create_task(runtime.aread(make_read(), slow)) for _ in range(5)]
    await until(lambda: runtime.memory.stats().coalesced >= 4)
    assert [p.value for p in otel.points("wm.cache.inflight")] == [1]
    release.set()
    await asyncio.gather(*tasks)
    assert otel.requests() == {("miss", "search.memories"): 1, ("coalesced", "search.memories"): 4}
    assert [p.value for p in otel.points("wm.cache.inflight")] == [0]


def test_cache_gauges_and_counters_follow_the_working_memory(otel: Otel) -> None:
    now = [1000.0]
    memory: WorkingMemory[Any] = WorkingMemory(max_entries=2, ttl=10.0, clock=lambda: now[0])
    runtime = make_runtime(otel, memory=memory)
    for query in ("q1", "q2", "q3"):  # q1 evicted
        runtime.read(make_read(query), lambda: RECORDS)
    assert _values(otel) == {"size": 2, "evictions": 1, "expirations": 0, "invalidations": 0}

    now[0] += 11  # q2, q3 expire; found expired on their next read
    runtime.read(make_read("q2"), lambda: RECORDS)
    assert _values(otel)["expirations"] == 1

    runtime.write(make_write("user-1"), lambda: "ok")  # drops every entry of user-1
    values = _values(otel)
    assert values["invalidations"] >= 1
    assert values["size"] == memory.stats().size


def test_metric_attributes_are_low_cardinality(otel: Otel) -> None:
    """No query, tag, tenant or user on any metric attribute, however many there are."""
    runtime = make_runtime(otel)
    for i in range(40):
        read = make_read(f"query-{i}", f"tag-{i}", tenant=f"tenant-{i}")
        runtime.read(read, lambda: RECORDS)
        runtime.read(read, lambda: RECORDS)
        runtime.write(make_write(f"tag-{i}", tenant=f"tenant-{i}"), lambda: "ok")
    text = otel.exported_text().split("]", 1)[-1]  # the metrics part
    for name, metric in otel.metrics().items():
        points = list(metric.data.data_points)
        assert len(points) <= 8, f"{name}: {len(points)} series"
        for point in points:
            allowed = GENAI_KEYS if name.startswith("gen_ai.") else ALLOWED_KEYS
            assert set(point.attributes) <= allowed, name
            result = point.attributes.get("wm.cache.result")
            assert result is None or result in RESULTS
    for word in ("query-", "tag-", "tenant-", "user-"):
        assert word not in text


def _values(otel: Otel) -> dict[str, int]:
    metrics = otel.metrics()
    return {
        name: sum(p.value for p in metrics[f"wm.cache.{name}"].data.data_points)
        for name in ("size", "evictions", "expirations", "invalidations")
    }


def _fail() -> Any:
    raise KeyError("boom")
