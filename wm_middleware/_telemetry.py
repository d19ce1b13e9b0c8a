"""OpenTelemetry spans and metrics for intercepted reads and writes.

Cost model (see README, "Telemetry cost"): a cache hit is a few hundred nanoseconds, an SDK span
is tens of microseconds and an SDK ``Counter.add`` several. So on the hit path:

* request counts are plain integers, exported by an observable counter at collection time;
* a span per hit is optional (``trace_hits``);
* with ``trace_hits=False`` one hit in ``HIT_SAMPLE`` records its duration in the histogram,
  which keeps the hit-latency quantiles unbiased at a fraction of the cost.

Nothing here may raise into a caller: every entry point that touches the SDK is guarded.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation, get_meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from .version import __version__

if TYPE_CHECKING:
    from ._cache import WorkingMemory

__all__ = ["CAPTURE_CONTENT_ENV", "DURATION_BUCKETS", "Telemetry", "capture_content_enabled"]

logger = logging.getLogger(__name__)

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.37.0"
# Sub-millisecond buckets for hits in front of the database-client buckets for upstream calls.
DURATION_BUCKETS: Final = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
)
HIT_SAMPLE: Final = 64

# Attribute names.
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
RECORD_COUNT: Final = "gen_ai.memory.record.count"
QUERY_TEXT: Final = "gen_ai.memory.query.text"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
SM_OPERATION: Final = "supermemory.operation"
CACHE_RESULT: Final = "wm.cache.result"
INVALIDATED: Final = "wm.cache.invalidated"


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


class Telemetry:
    """Spans and metrics of one instrumentation (``instrument()`` or one ``wrap()``)."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        trace_hits: bool = True,
    ) -> None:
        self.trace_hits = trace_hits
        self.capture_content = capture_content_enabled()
        self.tracer: Tracer = trace.get_tracer(
            "wm_middleware", __version__, tracer_provider, schema_url=SCHEMA_URL
        )
        meter: Meter = get_meter(
            "wm_middleware", __version__, meter_provider, schema_url=SCHEMA_URL
        )
        # (result, operation) -> count. Written by callers without a lock: ``d[k] = d.get(k) + 1``
        # on str keys runs no Python code, so it is not interrupted under the GIL.
        self._requests: dict[tuple[str, str], int] = {}
        self._hits_seen = 0
        self._memories: weakref.WeakSet[WorkingMemory[Any]] = weakref.WeakSet()
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
        except Exception:  # pragma: no cover - an SDK failure must not reach the caller
            logger.debug("wm_middleware: recording a duration failed", exc_info=True)

    # -- spans ---------------------------------------------------------------------------------
    @contextmanager
    def read_span(
        self,
        operation: str,
        server: tuple[str, int | None],
        query: str | None,
        kind: SpanKind = SpanKind.CLIENT,
    ) -> Iterator[Span]:
        """A ``search_memory`` span, current for the duration of the block."""
        span = self._start(operation, "search_memory", server, kind)
        if span.is_recording() and self.capture_content and query is not None:
            span.set_attribute(QUERY_TEXT, query)
        with trace.use_span(
            span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        ):
            yield span

    def _start(
        self, operation: str, name: str, server: tuple[str, int | None], kind: SpanKind
    ) -> Span:
        try:
            span = self.tracer.start_span(name, kind=kind)
            if span.is_recording():
                span.set_attribute(OPERATION_NAME, name)
                span.set_attribute(PROVIDER_NAME, "supermemory")
                span.set_attribute(SM_OPERATION, operation)
                if server[0]:
                    span.set_attribute(SERVER_ADDRESS, server[0])
                if server[1] is not None:
                    span.set_attribute(SERVER_PORT, server[1])
            return span
        except Exception:  # pragma: no cover - an SDK failure must not reach the caller
            logger.debug("wm_middleware: starting a span failed", exc_info=True)
            return trace.INVALID_SPAN

    @staticmethod
    def end_read(span: Span, result: str, records: int | None, leader: object) -> None:
        try:
            if not span.is_recording():
                return
            span.set_attribute(CACHE_RESULT, result)
            if records is not None:
                span.set_attribute(RECORD_COUNT, records)
            if isinstance(leader, trace.SpanContext) and leader.is_valid:
                span.add_link(leader, {"wm.link": "coalesced_into"})
        except Exception:  # pragma: no cover
            logger.debug("wm_middleware: annotating a span failed", exc_info=True)

    @staticmethod
    def fail(span: Span, error: BaseException, result: str | None = None) -> None:
        try:
            if not span.is_recording():
                return
            if result is not None:
                span.set_attribute(CACHE_RESULT, result)
            span.set_attribute(ERROR_TYPE, error_type(error))
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)[:256] or type(error).__name__))
        except Exception:  # pragma: no cover
            logger.debug("wm_middleware: recording an error failed", exc_info=True)

    @contextmanager
    def write_span(
        self, operation: str, server: tuple[str, int | None], deletes: bool
    ) -> Iterator[Span]:
        name = "delete_memory" if deletes else "update_memory"
        span = self._start(operation, name, server, SpanKind.CLIENT)
        with trace.use_span(
            span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        ):
            yield span
