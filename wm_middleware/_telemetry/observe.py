"""One observation per call: begun when a read or write starts, finished once with its outcome.

:class:`Telemetry` holds one instrumentation's tracer, instruments and settings and begins the
observations; :class:`ReadObservation` is what :meth:`Telemetry.begin_read` returns. The
runtime hands its fetch through :meth:`ReadObservation.fetching` and ends it with exactly one
of :meth:`~ReadObservation.hit`, :meth:`~ReadObservation.done` or
:meth:`~ReadObservation.fail`.

The span's kind is known before it starts: a read whose own fetch runs is a request to the
memory service (``CLIENT``), started by the fetch wrapper when the fetch begins, back-dated to
the start of the read, and current while the fetch runs (the HTTP span is its child). A read
served without its own fetch (a hit, a coalesced read, a value another process fetched) makes
no request: its ``INTERNAL`` span is made once the outcome is known, with the read's start
time. A hit with ``trace_hits=False`` makes no span at all and is counted in a plain integer; nor
does a hit while no tracer provider is set (the API's proxy, whose spans record nothing): from
the moment one is set, hits are traced through it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import (
    NoOpTracer,
    NoOpTracerProvider,
    ProxyTracer,
    ProxyTracerProvider,
    SpanKind,
    Tracer,
)
from opentelemetry.trace import TracerProvider as TracerProviderApi
from opentelemetry.util.types import AttributeValue

from .._settings import Settings
from ..version import __version__
from . import names
from .metrics import Instruments
from .openinference import read_attributes, read_metadata
from .spans import GuardedSpan, current, error_type, records_of, start

if TYPE_CHECKING:
    from .._calls import Read, Write
    from .._core import WorkingMemory

__all__ = ["ReadObservation", "Telemetry", "WriteObservation", "capture_content_enabled"]


def capture_content_enabled() -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is exactly ``true`` (any case)."""
    return os.environ.get(names.CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


class Telemetry:
    """Spans and metrics of one instrumentation (``instrument()`` or one ``wrap()``).

    Args:
        tracer_provider, meter_provider: where spans and metrics go (default: the global ones).
        settings: the resolved settings it follows (:class:`~wm_middleware._settings.Settings`):
            ``trace_hits`` (a span per cache hit, else hits are counted and one in
            ``HIT_SAMPLE`` timed), ``store_id`` (``gen_ai.memory.store.id`` on every span,
            ``"supermemory"`` when unset: name the store, not a user) and ``openinference``
            (OpenInference attributes: ``openinference.span.kind`` RETRIEVER on reads, the cache
            result in ``metadata``). Default: ``Settings.resolve({})``, the variables or defaults.

    Raises:
        ValueError: without ``settings``, a bad ``WM_MIDDLEWARE_*`` variable (named).
    """

    def __init__(
        self,
        tracer_provider: TracerProviderApi | None = None,
        meter_provider: MeterProvider | None = None,
        settings: Settings | None = None,
    ) -> None:
        if settings is None:
            settings = Settings.resolve({})
        self.trace_hits = settings.trace_hits
        self.capture_content = capture_content_enabled()
        self.openinference = settings.openinference
        self.store_id = settings.store_id or names.DEFAULT_STORE_ID
        self.tracer: Tracer = trace.get_tracer(
            "wm_middleware", __version__, tracer_provider, schema_url=names.SCHEMA_URL
        )
        # Spans record once a provider of the SDK's is in place (given, or set globally: the
        # global provider is set once, so a real one seen stays).
        self._recording = not isinstance(self.tracer, (ProxyTracer, NoOpTracer))
        self.instruments = Instruments(meter_provider)

    def traces_hits(self) -> bool:
        """A hit gets a span: ``trace_hits`` is on and spans go to a provider that records.

        A tracer made before the application set a global provider is the API's proxy, whose
        spans record nothing until one is set.
        """
        if not self.trace_hits:
            return False
        if not self._recording:
            self._recording = not isinstance(
                trace.get_tracer_provider(), (ProxyTracerProvider, NoOpTracerProvider)
            )
        return self._recording

    def watch(self, memory: WorkingMemory[Any]) -> None:
        """Export ``memory``'s size and counters through the observable instruments."""
        self.instruments.watch(memory)

    def record_shared(self, outcome: str, seconds: float | None = None) -> None:
        """One operation on the shared tier: ``wm.shared.operations`` and its duration."""
        self.instruments.record_shared(outcome, seconds)

    # -- one observation per call -------------------------------------------------------------
    def begin_read(self, read: Read) -> ReadObservation:
        """A read through the cache starts: finish it with ``hit``, ``done`` or ``fail``."""
        return ReadObservation(self, read)

    def begin_bypass(self, read: Read, traced: bool = True) -> ReadObservation:
        """An uncached read starts (its span now, unless not ``traced``): finish it with
        ``bypassed`` or ``fail``."""
        return ReadObservation(self, read, bypass=True, traced=traced)

    def begin_write(self, write: Write) -> WriteObservation:
        """A write starts (its span now): finish it with ``finish``."""
        return WriteObservation(self, write)

    def base_attributes(
        self, name: str, operation: str, server: tuple[str, int | None]
    ) -> dict[str, AttributeValue]:
        """The attributes every span of this library carries, given when it starts."""
        attributes: dict[str, AttributeValue] = {
            names.OPERATION_NAME: name,
            names.PROVIDER_NAME: names.PROVIDER,
            names.STORE_ID: self.store_id,
            names.SM_OPERATION: operation,
        }
        if server[0]:
            attributes[names.SERVER_ADDRESS] = server[0]
        if server[1] is not None:
            attributes[names.SERVER_PORT] = server[1]
        return attributes


def _wall_ns(started: float) -> int:
    """Epoch nanoseconds of the ``perf_counter`` reading ``started``."""
    return time.time_ns() - int((time.perf_counter() - started) * 1e9)


class ReadObservation:
    """One read through the cache (or one bypass), from its start to its outcome."""

    __slots__ = ("_bypass", "_read", "_span", "_start", "_telemetry", "settling")

    def __init__(
        self, telemetry: Telemetry, read: Read, bypass: bool = False, traced: bool = True
    ) -> None:
        self._telemetry = telemetry
        self._read = read
        self._bypass = bypass
        self._start = time.perf_counter()
        self._span: GuardedSpan | None = None
        # Set by the runtime before the outcome: the read's scope settles after a write.
        self.settling = False
        if bypass and traced:  # goes upstream, whatever happens: its CLIENT span starts now
            self._span = self._open(SpanKind.CLIENT, None)

    @property
    def span(self) -> GuardedSpan | None:
        """The span of the read's own request, once it has one (the leader's link target)."""
        return self._span

    # -- the fetch ------------------------------------------------------------------------------
    def fetching(self, fetch: Callable[[], Any]) -> Callable[[], Any]:
        """``fetch`` under this read's ``CLIENT`` span, started when the fetch begins."""

        def fetch_traced() -> Any:
            with current(self._client_span()):
                return fetch()

        return fetch_traced

    def afetching(self, fetch: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        """Async :meth:`fetching`: the span is current inside the fetch's own task."""

        async def fetch_traced() -> Any:
            with current(self._client_span()):
                return await fetch()

        return fetch_traced

    @contextmanager
    def calling(self) -> Iterator[None]:
        """Around a bypassed call: its span (started at begin) is current."""
        if self._span is None:
            yield
            return
        with current(self._span):
            yield

    def _client_span(self) -> GuardedSpan:
        if self._span is None:  # a caller that leads again after a dead flight keeps its span
            self._span = self._open(SpanKind.CLIENT, _wall_ns(self._start))
        return self._span

    # -- outcomes (exactly one per read) --------------------------------------------------------
    def hit(self, value: Any) -> None:
        """A hit of the lock-free lookup (tier ``local``): counted; a span only with trace_hits."""
        telemetry = self._telemetry
        instruments = telemetry.instruments
        operation = self._read.operation
        instruments.count("hit", operation)
        if telemetry.traces_hits():
            self._finish_span(self._open(SpanKind.INTERNAL, _wall_ns(self._start)), "hit", value)
        elif not telemetry.trace_hits and not instruments.sample_hit():
            return  # with trace_hits, every hit is timed, traced or not
        self._record("hit")

    def done(self, value: Any, outcome: str, tier: str, leader: object) -> None:
        """A read served past the lock-free lookup: ``outcome`` is miss, hit or coalesced."""
        self._telemetry.instruments.count(outcome, self._read.operation)
        span = self._span
        if span is None:  # no request of its own: a hit under the lock, coalesced, shared
            span = self._open(SpanKind.INTERNAL, _wall_ns(self._start))
        if outcome == "coalesced" and isinstance(leader, ReadObservation):
            theirs = leader.span
            if theirs is not None and span.is_recording():
                found = theirs.get_span_context()
                if found.is_valid:
                    span.add_link(found, {names.LINK_KIND: names.COALESCED_INTO})
        if outcome != "miss" and span.is_recording():  # its time went into someone else's work
            waited = names.WAIT_SHARED if tier == "shared" else names.WAIT_FLIGHT
            if outcome == "coalesced" or tier == "shared":
                span.set_attribute(names.WAIT_ON, waited)
        self._finish_span(span, outcome, value, None if outcome == "miss" else tier)
        self._record(outcome)

    def bypassed(self, value: Any) -> None:
        """A bypass returned ``value``."""
        self._telemetry.instruments.count("bypass", self._read.operation)
        if self._span is not None:
            self._finish_span(self._span, "bypass", value)
            self._record("bypass")

    def fail(self, error: BaseException) -> None:
        """The read raised ``error`` (counted as a miss, or a bypass)."""
        result = "bypass" if self._bypass else "miss"
        self._telemetry.instruments.count(result, self._read.operation)
        if self._bypass and self._span is None:
            return  # instrumentation suppressed: counted only
        span = self._span or self._open(SpanKind.INTERNAL, _wall_ns(self._start))
        if span.is_recording():
            span.set_attribute(names.CACHE_RESULT, result)
            span.fail(error, self._telemetry.capture_content)
        span.end()
        self._record(result, error_type(error))

    # -- helpers --------------------------------------------------------------------------------
    def _open(self, kind: SpanKind, start_time: int | None) -> GuardedSpan:
        telemetry = self._telemetry
        read = self._read
        attributes = telemetry.base_attributes(names.SEARCH_MEMORY, read.operation, read.server)
        if read.record_id is not None:
            attributes[names.RECORD_ID] = read.record_id
        if telemetry.capture_content and read.query is not None:
            attributes[names.QUERY_TEXT] = read.query
        if telemetry.openinference:
            attributes.update(read_attributes(read.query, telemetry.capture_content))
        return start(telemetry.tracer, names.SEARCH_MEMORY, kind, attributes, start_time)

    def _finish_span(
        self, span: GuardedSpan, result: str, value: Any, tier: str | None = "local"
    ) -> None:
        if result in ("miss", "bypass"):
            tier = None
        if span.is_recording():
            attributes: dict[str, AttributeValue] = {names.CACHE_RESULT: result}
            records = records_of(self._read.count, value)
            if records is not None:
                attributes[names.RECORD_COUNT] = records
            if tier is not None:
                attributes[names.CACHE_TIER] = tier
            if self.settling:
                attributes[names.SETTLING] = True
            telemetry = self._telemetry
            if telemetry.openinference:
                attributes.update(
                    read_metadata(
                        self._read.operation, result, tier, value, telemetry.capture_content
                    )
                )
            span.set_attributes(attributes)
        span.end()

    def _record(self, result: str, error: str | None = None) -> None:
        seconds = time.perf_counter() - self._start
        read = self._read
        instruments = self._telemetry.instruments
        instruments.record_read(seconds, result, read.operation, error)
        instruments.record_operation(seconds, names.SEARCH_MEMORY, read.server, error)


class WriteObservation:
    """One write: its ``CLIENT`` span, current while it runs, and its duration."""

    __slots__ = ("_name", "_span", "_start", "_telemetry", "_write")

    def __init__(self, telemetry: Telemetry, write: Write) -> None:
        self._telemetry = telemetry
        self._write = write
        self._start = time.perf_counter()
        name = write.operation_name
        self._name = name
        attributes = telemetry.base_attributes(name, write.operation, write.server)
        if write.records is not None:
            attributes[names.RECORD_COUNT] = write.records
        if write.record_id is not None:
            attributes[names.RECORD_ID] = write.record_id
        self._span = start(telemetry.tracer, name, SpanKind.CLIENT, attributes)

    @contextmanager
    def running(self) -> Iterator[None]:
        with current(self._span):
            yield

    def finish(self, invalidated: int, error: BaseException | None = None) -> None:
        """The write is over: ``invalidated`` entries dropped, ``error`` if it raised."""
        span = self._span
        kind = None
        if error is not None:
            kind = error_type(error)
            if span.is_recording():
                span.fail(error, self._telemetry.capture_content)
        if span.is_recording():
            span.set_attribute(names.INVALIDATED, invalidated)
        span.end()
        seconds = time.perf_counter() - self._start
        self._telemetry.instruments.record_operation(seconds, self._name, self._write.server, kind)
