"""The names of the spans, attributes and metrics ``wm_middleware`` emits, for code that reads
its telemetry: dashboards, alerts, tests, a report built from exported spans (as the demo's).

Each is also listed, with its meaning, in docs/telemetry.md. The GenAI ones follow
open-telemetry/semantic-conventions-genai (stability Development); ``wm.*`` names are this
library's own. A span of a read is named :data:`SEARCH_MEMORY` and carries :data:`CACHE_RESULT`
(one of :data:`RESULTS`); a write's span is one of :data:`WRITE_SPANS`::

    from wm_middleware.semconv import CACHE_RESULT, SEARCH_MEMORY

    hits = [s for s in spans if s.name == SEARCH_MEMORY and s.attributes[CACHE_RESULT] == "hit"]
"""

from __future__ import annotations

from ._telemetry.names import (
    CACHE_EVICTIONS,
    CACHE_INFLIGHT,
    CACHE_INVALIDATIONS,
    CACHE_REQUESTS,
    CACHE_RESULT,
    CACHE_SIZE,
    CACHE_TIER,
    CAPTURE_CONTENT_ENV,
    CREATE_MEMORY,
    DELETE_MEMORY,
    OI_PROJECT,
    OPERATION_DURATION,
    OPERATION_NAME,
    OPERATIONS,
    RESULTS,
    SEARCH_DURATION,
    SEARCH_MEMORY,
    UPDATE_MEMORY,
    UPSERT_MEMORY,
    WRITE_SPANS,
)

__all__ = [
    "CACHE_EVICTIONS",
    "CACHE_INFLIGHT",
    "CACHE_INVALIDATIONS",
    "CACHE_REQUESTS",
    "CACHE_RESULT",
    "CACHE_SIZE",
    "CACHE_TIER",
    "CAPTURE_CONTENT_ENV",
    "CREATE_MEMORY",
    "DELETE_MEMORY",
    "OI_PROJECT",
    "OPERATIONS",
    "OPERATION_DURATION",
    "OPERATION_NAME",
    "RESULTS",
    "SEARCH_DURATION",
    "SEARCH_MEMORY",
    "UPDATE_MEMORY",
    "UPSERT_MEMORY",
    "WRITE_SPANS",
]
