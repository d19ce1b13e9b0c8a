"""Every span, metric and attribute name this library emits, and the histogram buckets.

Source of the GenAI names: open-telemetry/semantic-conventions-genai, ``model/gen-ai/``
(``spans.yaml``: the ``gen_ai.memory.client`` span; ``registry.yaml``: the ``gen_ai.memory.*``
attributes and the ``gen_ai.operation.name`` members; ``metrics.yaml``:
``gen_ai.client.operation.duration``). That repository is unreleased (stability Development);
its schema URLs have the form ``https://opentelemetry.io/schemas/gen-ai-dev/X.Y.Z-dev``. The
entries used here are pinned in ``tests/telemetry/semconv_genai.json`` and checked against what
is emitted. No release of open-telemetry/semantic-conventions (1.41.0 through 1.44.0) defines
memory operations.

Names under ``wm.`` and ``supermemory.`` are this library's own (no convention exists for cache
results; semantic-conventions issue #1747). ``openinference.*``, ``input.value``, ``metadata``
and ``retrieval.documents.*`` are OpenInference's, emitted only when switched on.
"""

from __future__ import annotations

from typing import Final

SEMCONV_REPOSITORY: Final = "open-telemetry/semantic-conventions-genai"
# The development version of that repository's schema the names below follow.
SEMCONV_VERSION: Final = "1.42.0-dev"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/gen-ai-dev/{SEMCONV_VERSION}"

# -- environment variables ----------------------------------------------------------------------
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# The store id and OpenInference variables are settings: wm_middleware._settings reads them.
DEFAULT_STORE_ID: Final = "supermemory"
PROVIDER: Final = "supermemory"  # gen_ai.provider.name

# -- span names (gen_ai.operation.name values) --------------------------------------------------
SEARCH_MEMORY: Final = "search_memory"
CREATE_MEMORY: Final = "create_memory"  # new records only
UPSERT_MEMORY: Final = "upsert_memory"  # add: may create or merge
UPDATE_MEMORY: Final = "update_memory"  # a known, existing record
DELETE_MEMORY: Final = "delete_memory"
WRITE_SPANS: Final = (UPSERT_MEMORY, UPDATE_MEMORY, DELETE_MEMORY, CREATE_MEMORY)
OPERATIONS: Final = (SEARCH_MEMORY, *WRITE_SPANS)

# -- attribute names: GenAI conventions ---------------------------------------------------------
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
STORE_ID: Final = "gen_ai.memory.store.id"
RECORD_ID: Final = "gen_ai.memory.record.id"
RECORD_COUNT: Final = "gen_ai.memory.record.count"
QUERY_TEXT: Final = "gen_ai.memory.query.text"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"

# -- attribute names: this library's own --------------------------------------------------------
SM_OPERATION: Final = "supermemory.operation"  # the SDK method, e.g. "search.memories"
CACHE_RESULT: Final = "wm.cache.result"  # hit | miss | coalesced | bypass
CACHE_TIER: Final = "wm.cache.tier"  # local | shared, on hits and coalesced reads
INVALIDATED: Final = "wm.cache.invalidated"  # entries a write dropped
SETTLING: Final = "wm.cache.settling"  # true: the read's scope settles after a write
LINK_KIND: Final = "wm.link"  # on the link of a coalesced read to its leader
COALESCED_INTO: Final = "coalesced_into"
SHARED_OUTCOME: Final = "wm.shared.outcome"
CHECK_OUTCOME: Final = "wm.freshness.outcome"  # ok | not_found | error, on a status check
RESULTS: Final = ("hit", "miss", "coalesced", "bypass")
# Near-duplicate shadow mode, on a miss's span (wm_middleware.semantic).
NEAR_SIMILARITY: Final = "wm.cache.near.similarity"  # of the candidate, else of the nearest
NEAR_VERDICT: Final = "wm.cache.near.verdict"  # agreed | disagreed | vetoed | none | error
NEAR_VETO: Final = "wm.cache.near.veto"  # the rule that refused the nearest
NEAR_QUERY: Final = "wm.cache.near.query"  # the candidate's query: content capture only
STATUS_CHECK: Final = "wm.freshness.status_check"  # the span of one status request
HTTP_STATUS_CODE: Final = "http.response.status_code"
WRITE_LINK: Final = "pending_write"  # wm.link on a status check's link to the write it follows
LAUNCHER_LINK: Final = "launched_by"  # wm.link on a status check's link to the read's context
# Where a read's time went when it waited on anything but a request of its own.
WAIT_ON: Final = "wm.wait.on"  # flight | shared, on a read that made no request of its own
WAIT_FLIGHT: Final = "flight"  # it joined another caller's fetch and waited for it
WAIT_SHARED: Final = "shared"  # the shared tier answered it (a Redis round trip, or a flight there)

# -- attribute names: OpenInference (opt-in) ----------------------------------------------------
OI_SPAN_KIND: Final = "openinference.span.kind"
OI_RETRIEVER: Final = "RETRIEVER"
OI_PROJECT: Final = "openinference.project.name"  # a resource attribute
OI_INPUT: Final = "input.value"  # the query: content opt-in only
OI_METADATA: Final = "metadata"  # JSON: cache result, tier, operation
OI_DOCUMENTS: Final = "retrieval.documents"  # .{i}.document.{id,content,score}: content opt-in
OI_MAX_DOCUMENTS: Final = 20

# -- metric names -------------------------------------------------------------------------------
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
SEARCH_DURATION: Final = "wm.search.duration"
CACHE_REQUESTS: Final = "wm.cache.requests"
CACHE_SIZE: Final = "wm.cache.size"
CACHE_INFLIGHT: Final = "wm.cache.inflight"
CACHE_EVICTIONS: Final = "wm.cache.evictions"
CACHE_EXPIRATIONS: Final = "wm.cache.expirations"
CACHE_INVALIDATIONS: Final = "wm.cache.invalidations"
SHARED_OPERATIONS: Final = "wm.shared.operations"
SHARED_DURATION: Final = "wm.shared.duration"
NEAR_COMPARISONS: Final = "wm.cache.near"  # misses compared, by wm.cache.near.verdict
FRESHNESS_CHECKS: Final = "wm.freshness.status_checks"
FRESHNESS_PENDING: Final = "wm.freshness.pending"

# Sub-millisecond buckets for hits, then buckets every 25-50 ms through 50-300 ms, where
# upstream memory searches land (with 100 -> 500 ms a 110 ms call read as p50 ~ 200 ms). Both
# duration histograms, wm.search.duration and gen_ai.client.operation.duration, use them.
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
# With trace_hits=False, one hit in HIT_SAMPLE is timed (both histograms); all are counted.
HIT_SAMPLE: Final = 64
