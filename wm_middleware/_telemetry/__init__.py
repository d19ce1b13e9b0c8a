"""OpenTelemetry spans and metrics for intercepted reads and writes.

One observation per call: :meth:`Telemetry.begin_read` when a read starts, finished once with
its outcome (see :mod:`.observe`); :meth:`Telemetry.begin_write` likewise for a write. A hit is
cheap: counted in a plain integer, a span only with ``trace_hits``, and with
``trace_hits=False`` one hit in ``HIT_SAMPLE`` timed, which keeps the hit-latency quantiles
unbiased at a fraction of the cost.

:class:`Telemetry` takes the resolved :class:`~wm_middleware._settings.Settings` (the one
reader of ``WM_MIDDLEWARE_*`` variables); the observations and :class:`Telemetry` itself are in
:mod:`.observe`, which imports the descriptions it observes from :mod:`wm_middleware._calls`.

Telemetry never breaks or changes a call: every span is a :class:`GuardedSpan`, instruments
that raise are ignored, and each kind of SDK failure is logged once.

Conventions: the ``gen_ai.memory.client`` span and ``gen_ai.client.operation.duration`` of
open-telemetry/semantic-conventions-genai (schema :data:`SCHEMA_URL`, stability Development);
see :mod:`.names` and docs/telemetry.md. ``gen_ai.memory.store.id`` names the store without
naming a user: Supermemory's container tags are usually user ids, so by default it is the
configured store name (the ``store_id`` setting, default ``supermemory``), never a tag. Error
spans carry ``error.type`` and the ERROR status; the error's message, which upstream services
fill with the query, is exported only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
"""

from __future__ import annotations

from .._settings import OPENINFERENCE as OPENINFERENCE_ENV
from .._settings import STORE_ID as STORE_ID_ENV
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
    OPERATION_NAME,
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
    UPDATE_MEMORY,
    UPSERT_MEMORY,
    WRITE_SPANS,
)
from .observe import ReadObservation, Telemetry, WriteObservation, capture_content_enabled
from .spans import GuardedSpan, error_type, records_of

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
    "records_of",
]
