"""The instruments: what a read or write records, and what is observed at collection time.

Cost model (see docs/telemetry.md): a cache hit is a few hundred nanoseconds, an SDK
``Counter.add`` several microseconds. So request counts are plain integers exported by an
observable counter at collection time, and the memories' sizes and counters are read from
their ``stats()`` the same way; only durations go through SDK instruments on a caller's path.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import (
    CallbackOptions,
    Meter,
    MeterProvider,
    NoOpMeter,
    Observation,
    get_meter,
)
from opentelemetry.util.types import AttributeValue

from ..version import __version__
from . import names
from .spans import failed

if TYPE_CHECKING:
    from .._core import WorkingMemory

__all__ = ["Instruments"]

_OBSERVED = (
    (names.CACHE_EVICTIONS, "evictions", "Entries evicted by the LRU bound."),
    (names.CACHE_EXPIRATIONS, "expirations", "Entries found expired."),
    (names.CACHE_INVALIDATIONS, "invalidations", "Entries dropped by invalidation."),
)


class Instruments:
    """The metrics of one :class:`~wm_middleware._telemetry.Telemetry`."""

    def __init__(self, meter_provider: MeterProvider | None) -> None:
        # (result, operation) -> count. Written by callers without a lock: ``d[k] = d.get(k) + 1``
        # on str keys runs no Python code, so it is not interrupted under the GIL.
        self.requests: dict[tuple[str, str], int] = {}
        self._hits_seen = 0
        self._memories: weakref.WeakSet[WorkingMemory[Any]] = weakref.WeakSet()
        try:
            meter = get_meter(
                "wm_middleware", __version__, meter_provider, schema_url=names.SCHEMA_URL
            )
            self._create(meter)
        except Exception:
            failed("creating the instruments")
            self._create(NoOpMeter("wm_middleware", __version__, names.SCHEMA_URL))

    def _create(self, meter: Meter) -> None:
        self.meter = meter  # instruments of other parts of the library (freshness) come from it
        buckets = list(names.DURATION_BUCKETS)
        self.operation_duration = meter.create_histogram(
            names.OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self.search_duration = meter.create_histogram(
            names.SEARCH_DURATION,
            unit="s",
            description="Duration of memory reads through the working memory, by cache result.",
            explicit_bucket_boundaries_advisory=buckets,
        )
        meter.create_observable_counter(
            names.CACHE_REQUESTS,
            callbacks=[self._observe_requests],
            unit="{request}",
            description="Memory reads by cache result (hit, miss, coalesced, bypass, near_hit).",
        )
        meter.create_observable_gauge(
            names.CACHE_SIZE,
            callbacks=[self._observer("size")],
            unit="{entry}",
            description="Entries held by the working memory.",
        )
        meter.create_observable_gauge(
            names.CACHE_INFLIGHT,
            callbacks=[self._observer("inflight")],
            unit="{request}",
            description="Upstream fetches in flight.",
        )
        for name, field, text in _OBSERVED:
            meter.create_observable_counter(
                name, callbacks=[self._observer(field)], unit="{entry}", description=text
            )
        self.shared_operations = meter.create_counter(
            names.SHARED_OPERATIONS,
            unit="{operation}",
            description="Operations on the shared tier, by outcome (hit, miss, lease, wait, "
            "error, ...).",
        )
        self.shared_duration = meter.create_histogram(
            names.SHARED_DURATION,
            unit="s",
            description="Duration of operations on the shared tier, by outcome.",
            explicit_bucket_boundaries_advisory=buckets,
        )

    def watch(self, memory: WorkingMemory[Any]) -> None:
        """Export ``memory``'s size and counters through the observable instruments."""
        self._memories.add(memory)

    # -- observable callbacks (run at collection time, never on a caller's path) -------------
    def _observe_requests(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {names.CACHE_RESULT: result, names.SM_OPERATION: operation})
            for (result, operation), count in list(self.requests.items())
        ]

    def _observer(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            total = sum(getattr(m.stats(), field) for m in list(self._memories))
            return [Observation(total)]

        return observe

    # -- on a caller's path --------------------------------------------------------------------
    def count(self, result: str, operation: str) -> None:
        key = (result, operation)
        self.requests[key] = self.requests.get(key, 0) + 1

    def sample_hit(self) -> bool:
        """True for one hit in ``HIT_SAMPLE``, whose duration goes to the histograms."""
        self._hits_seen += 1
        return self._hits_seen % names.HIT_SAMPLE == 0

    def record_read(
        self, seconds: float, result: str, operation: str, error: str | None = None
    ) -> None:
        """``wm.search.duration`` of one read, by cache result and SDK operation."""
        try:
            attributes = {names.CACHE_RESULT: result, names.SM_OPERATION: operation}
            if error is not None:
                attributes[names.ERROR_TYPE] = error
            self.search_duration.record(seconds, attributes)
        except Exception:
            failed("recording a duration")

    def record_operation(
        self,
        seconds: float,
        operation_name: str,
        server: tuple[str, int | None],
        error: str | None = None,
    ) -> None:
        """``gen_ai.client.operation.duration`` of one read or write."""
        try:
            attributes: dict[str, AttributeValue] = {
                names.OPERATION_NAME: operation_name,
                names.PROVIDER_NAME: names.PROVIDER,
            }
            if server[0]:
                attributes[names.SERVER_ADDRESS] = server[0]
                if server[1] is not None:
                    attributes[names.SERVER_PORT] = server[1]
            if error is not None:
                attributes[names.ERROR_TYPE] = error
            self.operation_duration.record(seconds, attributes)
        except Exception:
            failed("recording a duration")

    def record_shared(self, outcome: str, seconds: float | None = None) -> None:
        """One operation on the shared tier: ``wm.shared.operations`` and its duration."""
        try:
            attributes = {names.SHARED_OUTCOME: outcome}
            self.shared_operations.add(1, attributes)
            if seconds is not None:
                self.shared_duration.record(seconds, attributes)
        except Exception:
            failed("recording a shared-tier operation")
