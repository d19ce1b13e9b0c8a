"""What to compare, cached vs uncached, in Jaeger's Monitor tab and on Prometheus's graph page.

The Monitor tab filters by one span kind. A cached agent's ``search_memory`` spans have two: a
hit or a coalesced read is ``INTERNAL``, a miss is ``CLIENT`` (its own request upstream), while
an uncached agent's are all ``CLIENT``. Read spans of one kind therefore compare the cached
agent's misses (or its hits) with all of the uncached agent's reads, never its reads as a
whole; and the agent's tool call around each read (``execute_tool search_memories``) has the
same tail, since a p95 lands on the misses as soon as more than one read in twenty misses.
What the cache changes for the agent is how long its turns take: the agent's turn span
(``invoke_agent memory-demo`` in the demo, ``INTERNAL`` in both services) is what the Monitor
tab compares, cached against uncached.
"""

from __future__ import annotations

import urllib.parse

# The Monitor tab's "Span kind" and the operation to look at in both services: the demo's turn
# span (wm_middleware.demo.agent: TURN_SPAN and the agent's name).
MONITOR_KIND = "internal"
MONITOR_OPERATION = "invoke_agent memory-demo"

# The same comparison on Prometheus's graph page, from the span_metrics connector's histogram
# (the series Jaeger's Monitor tab reads).
P95_QUERY = (
    "histogram_quantile(0.95, sum by (service_name, le) ("
    "rate(traces_span_metrics_duration_milliseconds_bucket{"
    f'span_name="{MONITOR_OPERATION}", span_kind="SPAN_KIND_INTERNAL"'
    "}[1m])))"
)


def p95_graph_url(prometheus: str = "http://localhost:9090") -> str:
    """Prometheus's graph page showing :data:`P95_QUERY` (ms) over the last 15 minutes."""
    query = urllib.parse.urlencode(
        {"g0.expr": P95_QUERY, "g0.tab": "0", "g0.range_input": "15m"},
        quote_via=urllib.parse.quote,
    )
    return f"{prometheus.rstrip('/')}/graph?{query}"
