"""OpenTelemetry spans and metrics for intercepted reads and writes.

Cost model (see README, "Telemetry cost"): a cache hit is a few hundred nanoseconds, an SDK span
is tens of microseconds and an SDK ``Counter.add`` several. So on the hit path:

* request counts are plain integers, exported by an observable counter at collection time;
* a span per hit is optional (``trace_hits``);
* with ``trace_hits=False`` one hit in ``HIT_SAMPLE`` records its duration in the histogram,
  which keeps the hit-latency quantiles unbiased at a fraction of the cost.

Telemetry never breaks or changes a call. Every span handed to the runtime is a
:class:`GuardedSpan`, whose methods swallow an SDK failure (a span processor whose ``on_end``
raises, a span whose ``end`` or ``get_span_context`` raises) and log it once; the span context
managers never raise on exit; instruments that raise are ignored the same way.

Semantic conventions: the GenAI memory spans (``search_memory``, ``upsert_memory``,
``update_memory``, ``delete_memory``) of OpenTelemetry semantic conventions
:data:`SEMCONV_VERSION` (status Development). ``gen_ai.memory.store.id`` names the store
without naming a user: Supermemory's container tags are usually user ids, so by default it is
the configured store name (``WM_MIDDLEWARE_STORE_ID``, default ``supermemory``), never a tag.
Error spans carry ``error.type`` and the ERROR status; the error's message, which upstream
services fill with the query, is exported only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation, get_meter
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace import TracerProvider as TracerProviderApi
from opentelemetry.util.types import AttributeValue

from .version import __version__

if TYPE_CHECKING:
    from ._core import WorkingMemory

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "DURATION_BUCKETS",
    "SEMCONV_VERSION",
    "STORE_ID_ENV",
    "GuardedSpan",
    "Telemetry",
    "capture_content_enabled",
    "records_of",
]

logger = logging.getLogger(__name__)

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
STORE_ID_ENV: Final = "WM_MIDDLEWARE_STORE_ID"
DEFAULT_STORE_ID: Final = "supermemory"
# The semantic-conventions release whose GenAI memory spans and attributes these follow: the
# memory attributes first appear in 1.41.0 (1.37.0, named before, predates them).
SEMCONV_VERSION: Final = "1.41.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
# Sub-millisecond buckets for hits, then buckets every 25-50 ms through 50-300 ms, where
# upstream memory searches land (with 100 -> 500 ms a 110 ms call read as p50 ~ 200 ms).
DURATION_BUCKETS: Final = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.125,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
HIT_SAMPLE: Final = 64

# Span names (gen_ai.operation.name values).
SEARCH_MEMORY: Final = "search_memory"
UPSERT_MEMORY: Final = "upsert_memory"  # add: may create or merge
UPDATE_MEMORY: Final = "update_memory"  # a known, existing record
DELETE_MEMORY: Final = "delete_memory"
WRITE_SPANS: Final = (UPSERT_MEMORY, UPDATE_MEMORY, DELETE_MEMORY)

# Attribute names.
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
RECORD_COUNT: Final = "gen_ai.memory.record.count"
STORE_ID: Final = "gen_ai.memory.store.id"
QUERY_TEXT: Final = "gen_ai.memory.query.text"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
SM_OPERATION: Final = "supermemory.operation"
CACHE_RESULT: Final = "wm.cache.result"
CACHE_TIER: Final = "wm.cache.tier"  # local | shared, on hits and coalesced reads
INVALIDATED: Final = "wm.cache.invalidated"

# Instruments of the shared (second) tier; see Telemetry.record_shared.
SHARED_OPERATIONS: Final = "wm.shared.operations"
SHARED_DURATION: Final = "wm.shared.duration"
SHARED_OUTCOME: Final = "wm.shared.outcome"

# The fallback when an adapter passes no count: write operations that touch a number of records
# their request does not list (bulk deletes by tag, whole namespaces) or no memory record at all
# get no guessed record count.
_UNCOUNTED_WRITES: Final = (
    "batch",
    "bulk",
    "matching",
    "namespace",
    "settings",
    "connection",
    "organization",
    "write",
)


def capture_content_enabled() -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is exactly ``true`` (any case)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


def error_type(error: BaseException) -> str:
    kind = type(error)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def write_operation_name(operation: str, deletes: bool) -> str:
    """``delete_memory``, ``update_memory`` (known records) or ``upsert_memory`` (add)."""
    if deletes:
        return DELETE_MEMORY
    return UPDATE_MEMORY if "update" in operation else UPSERT_MEMORY


def records_attempted(operation: str) -> int | None:
    """Records a write attempts: one per single-record call, unknown (None) for the rest."""
    return None if any(word in operation for word in _UNCOUNTED_WRITES) else 1


_failures_logged: set[str] = set()


def _failed(what: str) -> None:
    """Log an SDK failure: a warning the first time per kind, debug after that."""
    if what in _failures_logged:
        logger.debug("wm_middleware: %s failed", what, exc_info=True)
        return
    _failures_logged.add(what)
    logger.warning("wm_middleware: %s failed; the call goes on (logged once)", what, exc_info=True)


def records_of(count: Callable[[Any], int | None], value: Any) -> int | None:
    """``count(value)``: the record count of a result, or ``None`` where counting fails."""
    try:
        return count(value)
    except Exception:
        _failed("counting the records of a result")
        return None


class GuardedSpan:
    """A span whose every method is safe to call: an SDK failure is logged, never raised.

    It is what :meth:`Telemetry.read_span` and :meth:`Telemetry.write_span` yield; the runtime
    uses it like a :class:`~opentelemetry.trace.Span`.
    """

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def is_recording(self) -> bool:
        try:
            return bool(self.span.is_recording())
        except Exception:
            _failed("span.is_recording")
            return False

    def get_span_context(self) -> SpanContext:
        try:
            found = self.span.get_span_context()
            if isinstance(found, SpanContext):
                return found
        except Exception:
            _failed("span.get_span_context")
        return trace.INVALID_SPAN_CONTEXT

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        try:
            self.span.set_attribute(key, value)
        except Exception:
            _failed("span.set_attribute")

    def add_link(self, context: SpanContext, attributes: dict[str, AttributeValue]) -> None:
        try:
            self.span.add_link(context, attributes)
        except Exception:
            _failed("span.add_link")

    def end(self) -> None:
        try:
            self.span.end()
        except Exception:
            _failed("span.end")


class Telemetry:
    """Spans and metrics of one instrumentation (``instrument()`` or one ``wrap()``).

    Args:
        tracer_provider, meter_provider: where spans and metrics go (default: the global ones).
        trace_hits: a span per cache hit (else hits are counted and one in ``HIT_SAMPLE`` timed).
        store_id: ``gen_ai.memory.store.id`` on every span. Default: ``WM_MIDDLEWARE_STORE_ID``,
            else ``"supermemory"``. Name the store, not a user: it goes on every span.
    """

    def __init__(
        self,
        tracer_provider: TracerProviderApi | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        trace_hits: bool = True,
        store_id: str | None = None,
    ) -> None:
        self.trace_hits = trace_hits
        self.capture_content = capture_content_enabled()
        if store_id is None:
            store_id = os.environ.get(STORE_ID_ENV, "").strip() or DEFAULT_STORE_ID
        self.store_id = store_id
        self.tracer: Tracer = trace.get_tracer(
            "wm_middleware", __version__, tracer_provider, schema_url=SCHEMA_URL
        )
        # (result, operation) -> count. Written by callers without a lock: ``d[k] = d.get(k) + 1``
        # on str keys runs no Python code, so it is not interrupted under the GIL.
        self._requests: dict[tuple[str, str], int] = {}
        self._hits_seen = 0
        self._memories: weakref.WeakSet[WorkingMemory[Any]] = weakref.WeakSet()
        try:
            self._create_instruments(
                get_meter("wm_middleware", __version__, meter_provider, schema_url=SCHEMA_URL)
            )
        except Exception:
            _failed("creating the instruments")
            self._create_instruments(get_meter("wm_middleware", __version__, _NO_METERS))

    def _create_instruments(self, meter: Meter) -> None:
        self.duration = meter.create_histogram(
            "wm.search.duration",
            unit="s",
            description="Duration of memory reads through the working memory, by cache result.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        meter.create_observable_counter(
            "wm.cache.requests",
            callbacks=[self._observe_requests],
            unit="{request}",
            description="Memory reads by cache result (hit, miss, coalesced, bypass).",
        )
        meter.create_observable_gauge(
            "wm.cache.size",
            callbacks=[self._observer("size")],
            unit="{entry}",
            description="Entries held by the working memory.",
        )
        meter.create_observable_gauge(
            "wm.cache.inflight",
            callbacks=[self._observer("inflight")],
            unit="{request}",
            description="Upstream fetches in flight.",
        )
        for name, field, text in (
            ("wm.cache.evictions", "evictions", "Entries evicted by the LRU bound."),
            ("wm.cache.expirations", "expirations", "Entries found expired."),
            ("wm.cache.invalidations", "invalidations", "Entries dropped by invalidation."),
        ):
            meter.create_observable_counter(
                name, callbacks=[self._observer(field)], unit="{entry}", description=text
            )
        self.shared_operations = meter.create_counter(
            SHARED_OPERATIONS,
            unit="{operation}",
            description="Operations on the shared tier, by outcome (hit, miss, lease, wait, "
            "error, ...).",
        )
        self.shared_duration = meter.create_histogram(
            SHARED_DURATION,
            unit="s",
            description="Duration of operations on the shared tier, by outcome.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )

    def watch(self, memory: WorkingMemory[Any]) -> None:
        """Export ``memory``'s size and counters through the observable instruments."""
        self._memories.add(memory)

    # -- observable callbacks (run at collection time, never on a caller's path) -------------
    def _observe_requests(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {CACHE_RESULT: result, SM_OPERATION: operation})
            for (result, operation), count in list(self._requests.items())
        ]

    def _observer(self, field: str) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            total = sum(getattr(m.stats(), field) for m in list(self._memories))
            return [Observation(total)]

        return observe

    # -- counting ------------------------------------------------------------------------------
    def count(self, result: str, operation: str) -> None:
        key = (result, operation)
        self._requests[key] = self._requests.get(key, 0) + 1

    def sample_hit(self) -> bool:
        """True for one hit in ``HIT_SAMPLE``, whose duration goes to the histogram."""
        self._hits_seen += 1
        return self._hits_seen % HIT_SAMPLE == 0

    def record_duration(
        self, seconds: float, result: str, operation: str, error: str | None = None
    ) -> None:
        try:
            attributes = {CACHE_RESULT: result, SM_OPERATION: operation}
            if error is not None:
                attributes[ERROR_TYPE] = error
            self.duration.record(seconds, attributes)
        except Exception:
            _failed("recording a duration")

    def record_shared(self, outcome: str, seconds: float | None = None) -> None:
        """One operation on the shared tier: ``wm.shared.operations`` and its duration."""
        try:
            attributes = {SHARED_OUTCOME: outcome}
            self.shared_operations.add(1, attributes)
            if seconds is not None:
                self.shared_duration.record(seconds, attributes)
        except Exception:
            _failed("recording a shared-tier operation")

    # -- spans ---------------------------------------------------------------------------------
    @contextmanager
    def read_span(
        self,
        operation: str,
        server: tuple[str, int | None],
        query: str | None,
        kind: SpanKind = SpanKind.CLIENT,
    ) -> Iterator[GuardedSpan]:
        """A ``search_memory`` span, current for the duration of the block."""
        span = self._start(operation, SEARCH_MEMORY, server, kind)
        if self.capture_content and query is not None and span.is_recording():
            span.set_attribute(QUERY_TEXT, query)
        with _current(span):
            yield span

    def hit_span(
        self,
        operation: str,
        server: tuple[str, int | None],
        query: str | None,
        value: Any,
        count: Callable[[Any], int | None],
        tier: str,
    ) -> None:
        """The ``search_memory`` span of a cache hit of ``value``, started and ended at once.

        A hit runs no code of its own inside its span, so the span is never made current: no
        context attach and detach on the hit path. With no SDK tracer provider the API hands
        out a non-recording span, and this costs one ``start_span`` and one ``end``: no wrapper,
        no attribute, and ``count(value)`` (the record count) is not computed.
        """
        try:
            span = self.tracer.start_span(SEARCH_MEMORY, kind=SpanKind.INTERNAL)
        except Exception:
            _failed("starting a span")
            return
        try:
            recording = span.is_recording()
        except Exception:
            _failed("span.is_recording")
            recording = False
        if recording:
            guarded = GuardedSpan(span)
            self._annotate(guarded, operation, SEARCH_MEMORY, server)
            if self.capture_content and query is not None:
                guarded.set_attribute(QUERY_TEXT, query)
            self.end_read(guarded, "hit", records_of(count, value), None, tier)
        try:
            span.end()
        except Exception:
            _failed("span.end")

    @contextmanager
    def write_span(
        self,
        operation: str,
        server: tuple[str, int | None],
        deletes: bool,
        records: int | None = None,
    ) -> Iterator[GuardedSpan]:
        """An ``upsert_memory`` / ``update_memory`` / ``delete_memory`` span for a write.

        ``records`` is the number of records the write attempts; by default one for a
        single-record operation and left out where the call path cannot know it.
        """
        span = self._start(operation, write_operation_name(operation, deletes), server)
        if records is None:
            records = records_attempted(operation)
        if records is not None and span.is_recording():
            span.set_attribute(RECORD_COUNT, records)
        with _current(span):
            yield span

    def _start(
        self,
        operation: str,
        name: str,
        server: tuple[str, int | None],
        kind: SpanKind = SpanKind.CLIENT,
    ) -> GuardedSpan:
        try:
            span = self.tracer.start_span(name, kind=kind)
        except Exception:
            _failed("starting a span")
            return GuardedSpan(trace.INVALID_SPAN)
        guarded = GuardedSpan(span)
        if guarded.is_recording():
            self._annotate(guarded, operation, name, server)
        return guarded

    def _annotate(
        self, span: GuardedSpan, operation: str, name: str, server: tuple[str, int | None]
    ) -> None:
        """The attributes every span of this library carries (``span`` is recording)."""
        try:
            raw = span.span
            raw.set_attribute(OPERATION_NAME, name)
            raw.set_attribute(PROVIDER_NAME, "supermemory")
            raw.set_attribute(STORE_ID, self.store_id)
            raw.set_attribute(SM_OPERATION, operation)
            if server[0]:
                raw.set_attribute(SERVER_ADDRESS, server[0])
            if server[1] is not None:
                raw.set_attribute(SERVER_PORT, server[1])
        except Exception:
            _failed("annotating a span")

    @staticmethod
    def end_read(
        span: GuardedSpan | Span,
        result: str,
        records: int | None,
        leader: object,
        tier: str | None = None,
    ) -> None:
        """Annotate a read with its cache result, record count, leader link and tier.

        ``tier`` (``"local"`` or ``"shared"``) is where a hit or a coalesced read was served
        from; ``None`` leaves ``wm.cache.tier`` out.
        """
        try:
            if not span.is_recording():
                return
            span.set_attribute(CACHE_RESULT, result)
            if records is not None:
                span.set_attribute(RECORD_COUNT, records)
            if tier is not None:
                span.set_attribute(CACHE_TIER, tier)
            if result in ("coalesced", "hit"):
                _make_internal(span)
            if isinstance(leader, SpanContext) and leader.is_valid:
                span.add_link(leader, {"wm.link": "coalesced_into"})
        except Exception:
            _failed("annotating a span")

    def fail(
        self, span: GuardedSpan | Span, error: BaseException, result: str | None = None
    ) -> None:
        """Mark ``span`` failed: ``error.type`` and the ERROR status; the message only with
        content capture on (upstream errors echo the query)."""
        try:
            if not span.is_recording():
                return
            inner = span.span if isinstance(span, GuardedSpan) else span
            if result is not None:
                inner.set_attribute(CACHE_RESULT, result)
            kind = error_type(error)
            inner.set_attribute(ERROR_TYPE, kind)
            if self.capture_content:
                inner.record_exception(error)
                inner.set_status(Status(StatusCode.ERROR, str(error)[:256] or kind))
            else:
                # The exception event without its message or stack trace (the trace's last
                # line repeats the message).
                inner.add_event("exception", {"exception.type": kind})
                inner.set_status(Status(StatusCode.ERROR))
        except Exception:
            _failed("recording an error")


def _make_internal(span: GuardedSpan | Span) -> None:
    """A coalesced read, or a hit found only past the lock-free lookup (in L1 under the lock, or
    in the shared tier), makes no request to the memory service: INTERNAL, like a plain hit.

    The runtime starts the span before it knows how the read will be served, and the API has no
    way to change a span's kind; the SDK span keeps it in ``_kind`` until it ends.
    """
    inner = span.span if isinstance(span, GuardedSpan) else span
    if hasattr(inner, "_kind"):
        inner._kind = SpanKind.INTERNAL


@contextmanager
def _current(span: GuardedSpan) -> Iterator[GuardedSpan]:
    """Make ``span`` current in the block and end it after; never raises on its own account."""
    try:
        token: object | None = otel_context.attach(trace.set_span_in_context(span.span))
    except Exception:
        _failed("attaching a span")
        token = None
    try:
        yield span
    finally:
        if token is not None:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception:
                _failed("detaching a span")
        span.end()


class _NoMeters(MeterProvider):
    """Instruments that do nothing: used when the given meter provider fails."""

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> Meter:
        from opentelemetry.metrics import NoOpMeter

        return NoOpMeter(name, version=version, schema_url=schema_url)


_NO_METERS: Final = _NoMeters()
