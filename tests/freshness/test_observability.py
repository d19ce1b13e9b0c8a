"""Freshness is observable: settling reads say so, status checks are traced and counted, and a
gauge shows the pending documents; the settings are validated at the boundary."""

from __future__ import annotations

from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware._runtime import Runtime
from wm_middleware._telemetry import Telemetry
from wm_middleware.emulator import EmulatorServer

from .conftest import QUERY, Observed, Sdk, done, mentions, read_until, wait_until


async def test_reads_of_a_settling_scope_say_so_and_status_checks_are_traced_without_query(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    emulator.set_indexing_delay(0.6)
    # settle_interval 2 s: what answers a read lives 1.5 s, so the hit below comes within it
    # however loaded the machine; the settle cannot end before it (no hit, no check before).
    cached = observed.wrap(sdk.client(mode, emulator.base_url), settle_interval=2.0)
    await done(sdk.search(cached))  # cached before the write: not settling
    await done(sdk.add(cached, "The user likes espresso"))
    assert observed.pending() == 1
    await done(sdk.search(cached))  # a miss while settling
    await done(sdk.search(cached))  # a hit while settling
    # Reads go on (status checks are made for them) until a check has ended the settle.
    await read_until(lambda: sdk.search(cached), lambda _: observed.pending() == 0)
    assert mentions(await done(sdk.search(cached)), "espresso")
    reads = [s for s in observed.spans.get_finished_spans() if s.name == "search_memory"]
    settling = [s.attributes.get("wm.cache.settling") for s in reads]
    assert settling[0] is None  # before the write
    assert settling[1] is True
    assert reads[1].attributes["wm.cache.result"] == "miss"
    assert settling[2] is True
    assert reads[2].attributes["wm.cache.result"] == "hit"
    assert settling[-1] is None  # after the settle ended
    checks = [
        s for s in observed.spans.get_finished_spans() if s.name == "wm.freshness.status_check"
    ]
    assert checks
    for span in checks:
        assert span.attributes["wm.freshness.outcome"] == "ok"
        assert span.attributes["server.address"] == "127.0.0.1"
        assert QUERY not in str(dict(span.attributes))
        assert "user-1" not in str(dict(span.attributes))  # no container tag either
    assert observed.status_checks("ok") == len(checks)


async def test_a_failed_status_check_is_counted_and_traced_as_an_error(
    sdk: Sdk, emulator: EmulatorServer, observed: Observed
) -> None:
    emulator.set_indexing_delay(0.3)
    emulator.fail_next(2, 503, path=sdk.status_paths[0], method="GET")
    cached = observed.wrap(sdk.client("sync", emulator.base_url), settle_interval=0.05)
    for _ in range(10):
        sdk.search(cached)  # hits: credits for status checks
    sdk.add(cached, "The user likes espresso")
    await read_until(lambda: sdk.search(cached), lambda _: observed.pending() == 0)
    assert observed.status_checks("error") == 2
    failed = [
        s
        for s in observed.spans.get_finished_spans()
        if s.name == "wm.freshness.status_check"
        and s.attributes.get("wm.freshness.outcome") == "error"
    ]
    assert [s.attributes["http.response.status_code"] for s in failed] == [503, 503]


def test_deletes_only_invalidate(sdk: Sdk, emulator: EmulatorServer, observed: Observed) -> None:
    emulator.set_indexing_delay(0.0)
    cached = observed.wrap(sdk.client("sync", emulator.base_url))
    added = sdk.add(cached, "The user likes espresso")
    if sdk.major == "3":
        cached.documents.delete(added.id)
    else:
        cached.documents.delete("user-1", ids=[added.id])
    assert observed.pending() == 0
    assert sdk.status_checks(emulator) == 0


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"freshness": "yes"}, "freshness"),
        ({"settle_interval": 0}, "settle_interval"),
        ({"settle_interval": float("nan")}, "settle_interval"),
        ({"settle_interval": "1"}, "settle_interval"),
        ({"settle_max": -1.0}, "settle_max"),
        ({"settle_max": float("inf")}, "settle_max"),
        ({"settle_interval": 5.0, "settle_max": 1.0}, "settle_max"),
    ],
)
def test_bad_freshness_settings_are_refused_naming_the_argument(
    options: dict[str, Any], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        Runtime(WorkingMemory(), Telemetry(), **options)
    # instrument() checks through Settings: a value of the wrong type is a TypeError there.
    with pytest.raises((TypeError, ValueError), match=name):
        wm_middleware.instrument(**options)
    assert wm_middleware.WorkingMemoryInstrumentor().runtime is None  # nothing was patched


def test_freshness_off_writes_only_invalidate(
    sdk: Sdk, emulator: EmulatorServer, observed: Observed
) -> None:
    emulator.set_indexing_delay(1.0)
    cached = observed.wrap(sdk.client("sync", emulator.base_url), freshness=False)
    sdk.add(cached, "The user likes espresso")
    assert observed.pending() == 0
    assert sdk.status_checks(emulator) == 0


def test_instrument_follows_writes_too(sdk: Sdk, emulator: EmulatorServer) -> None:
    emulator.set_indexing_delay(0.3)
    memory = wm_middleware.instrument(settle_interval=2.0)  # a hit's window of 1.5 s
    try:
        client = sdk.client("sync", emulator.base_url)
        sdk.search(client)
        sdk.add(client, "The user likes espresso")
        # Reads go on until the fact shows and a check beside them was made.
        wait_until(
            lambda: mentions(sdk.search(client), "espresso") and sdk.status_checks(emulator) >= 1
        )
        assert memory.stats().hits >= 1
    finally:
        wm_middleware.uninstrument()


async def test_a_status_check_is_a_trace_of_its_own_linked_to_the_write_and_the_read(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    """No read waits for a status check: it runs beside the reads, in a trace of its own,
    linked to the write whose documents it asks about and to the span around the read that
    started it."""
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.trace import SpanKind

    emulator.set_indexing_delay(3600.0)
    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument(tracer_provider=observed.tracer_provider)

    def checks() -> list[Any]:
        spans = observed.spans.get_finished_spans()
        return [s for s in spans if s.name == "wm.freshness.status_check"]

    try:
        # Copies live 1.5 s: the two hits that pay for a check come within it.
        cached = observed.wrap(sdk.client(mode, emulator.base_url), settle_interval=2.0)
        tracer = observed.tracer_provider.get_tracer("app")
        for _ in range(3):
            await done(sdk.search(cached))  # a fetch, then hits: credits for status checks
        await done(sdk.add(cached, "The user likes espresso"))
        with tracer.start_as_current_span("agent turn") as turn:
            # Reads answered from memory start a check once what answers them runs short.
            await read_until(lambda: sdk.search(cached), lambda _: bool(checks()))
    finally:
        instrumentor.uninstrument()
    spans = observed.spans.get_finished_spans()
    check = checks()[0]
    assert check.parent is None  # no read's child: none waited for it
    writes = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "upsert_memory"]
    assert len(writes) == 1
    links = {link.attributes["wm.link"]: link.context.span_id for link in check.links}
    assert links == {
        "pending_write": writes[0].context.span_id,
        "launched_by": turn.get_span_context().span_id,
    }
    http = [s for s in spans if s.parent is not None and s.parent.span_id == check.context.span_id]
    assert len(http) == 1  # the GET, traced by the httpx instrumentation, under the check
    assert http[0].kind is SpanKind.CLIENT
