"""OpenTelemetry spans and metrics for intercepted reads and writes.

One observation per call: :meth:`Telemetry.begin_read` when a read starts, finished once with
its outcome (see :mod:`.observe`); :meth:`Telemetry.begin_write` likewise for a write. A hit is
cheap: counted in a plain integer, a span only with ``trace_hits``, and with
``trace_hits=False`` one hit in ``HIT_SAMPLE`` timed, which keeps the hit-latency quantiles
unbiased at a fraction of the cost.

Telemetry never breaks or changes a call: every span is a :class:`GuardedSpan`, instruments
that raise are ignored, and each kind of SDK failure is logged once.

Conventions: the ``gen_ai.memory.client`` span and ``gen_ai.client.operation.duration`` of
open-telemetry/semantic-conventions-genai (schema :data:`SCHEMA_URL`, stability Development);
see :mod:`.names` and docs/telemetry.md. ``gen_ai.memory.store.id`` names the store without
naming a user: Supermemory's container tags are usually user ids, so by default it is the
configured store name (``WM_MIDDLEWARE_STORE_ID``, default ``supermemory``), never a tag. Error
spans carry ``error.type`` and the ERROR status; the error's message, which upstream services
fill with the query, is exported only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Tracer
from opentelemetry.trace import TracerProvider as TracerProviderApi
from opentelemetry.util.types import AttributeValue

from ..version import __version__
from .metrics import Instruments
from .names import (
    CACHE_RESULT,
    CACHE_TIER,
    CAPTURE_CONTENT_ENV,
    DEFAULT_STORE_ID,
    DELETE_MEMORY,
    DURATION_BUCKETS,
    ERROR_TYPE,
    HIT_SAMPLE,
    INVALIDATED,
    OI_PROJECT,
    OPENINFERENCE_ENV,
    OPERATION_NAME,
    PROVIDER,
    PROVIDER_NAME,
    QUERY_TEXT,
    RECORD_COUNT,
    RECORD_ID,
    SCHEMA_URL,
    SEARCH_MEMORY,
    SEMCONV_REPOSITORY,
    SEMCONV_VERSION,
    SERVER_ADDRESS,
    SERVER_PORT,
    SHARED_DURATION,
    SHARED_OPERATIONS,
    SHARED_OUTCOME,
    SM_OPERATION,
    STORE_ID,
    STORE_ID_ENV,
    UPDATE_MEMORY,
    UPSERT_MEMORY,
    WRITE_SPANS,
)
from .observe import ReadObservation, WriteObservation, records_attempted, write_operation_name
from .spans import GuardedSpan, error_type, records_of

if TYPE_CHECKING:
    from .._core import WorkingMemory
    from .._runtime import Read, Write

__all__ = [
    "CACHE_RESULT",
    "CACHE_TIER",
    "CAPTURE_CONTENT_ENV",
    "DEFAULT_STORE_ID",
    "DELETE_MEMORY",
    "DURATION_BUCKETS",
    "ERROR_TYPE",
    "HIT_SAMPLE",
    "INVALIDATED",
    "OI_PROJECT",
    "OPENINFERENCE_ENV",
    "OPERATION_NAME",
    "PROVIDER_NAME",
    "QUERY_TEXT",
    "RECORD_COUNT",
    "RECORD_ID",
    "SCHEMA_URL",
    "SEARCH_MEMORY",
    "SEMCONV_REPOSITORY",
    "SEMCONV_VERSION",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "SHARED_DURATION",
    "SHARED_OPERATIONS",
    "SHARED_OUTCOME",
    "SM_OPERATION",
    "STORE_ID",
    "STORE_ID_ENV",
    "UPDATE_MEMORY",
    "UPSERT_MEMORY",
    "WRITE_SPANS",
    "GuardedSpan",
    "ReadObservation",
    "Telemetry",
    "WriteObservation",
    "capture_content_enabled",
    "error_type",
    "openinference_enabled",
    "records_attempted",
    "records_of",
    "write_operation_name",
]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def capture_content_enabled() -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is exactly ``true`` (any case)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


def openinference_enabled() -> bool:
    """``WM_MIDDLEWARE_OPENINFERENCE``: true / 1 / yes / on, else off.

    Raises:
        ValueError: any other value, naming the variable.
    """
    value = os.environ.get(OPENINFERENCE_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{OPENINFERENCE_ENV} must be true or false, got {value!r}")


class Telemetry:
    """Spans and metrics of one instrumentation (``instrument()`` or one ``wrap()``).

    Args:
        tracer_provider, meter_provider: where spans and metrics go (default: the global ones).
        trace_hits: a span per cache hit (else hits are counted and one in ``HIT_SAMPLE`` timed).
        store_id: ``gen_ai.memory.store.id`` on every span. Default: ``WM_MIDDLEWARE_STORE_ID``,
            else ``"supermemory"``. Name the store, not a user: it goes on every span.
        openinference: add OpenInference attributes (``openinference.span.kind`` RETRIEVER on
            reads, the cache result in ``metadata``). Default: ``WM_MIDDLEWARE_OPENINFERENCE``.
    """

    def __init__(
        self,
        tracer_provider: TracerProviderApi | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        trace_hits: bool = True,
        store_id: str | None = None,
        openinference: bool | None = None,
    ) -> None:
        self.trace_hits = trace_hits
        self.capture_content = capture_content_enabled()
        self.openinference = openinference_enabled() if openinference is None else openinference
        if store_id is None:
            store_id = os.environ.get(STORE_ID_ENV, "").strip() or DEFAULT_STORE_ID
        self.store_id = store_id
        self.tracer: Tracer = trace.get_tracer(
            "wm_middleware", __version__, tracer_provider, schema_url=SCHEMA_URL
        )
        self.instruments = Instruments(meter_provider)

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
            OPERATION_NAME: name,
            PROVIDER_NAME: PROVIDER,
            STORE_ID: self.store_id,
            SM_OPERATION: operation,
        }
        if server[0]:
            attributes[SERVER_ADDRESS] = server[0]
        if server[1] is not None:
            attributes[SERVER_PORT] = server[1]
        return attributes
