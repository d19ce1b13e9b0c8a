"""Traces and metrics of the working memory over OTLP: one ``instrument(otlp_endpoint=...)`` call.

    docker compose -f examples/observability/docker-compose.yml up -d   # collector, Jaeger...
    python examples/observability.py                 # http/protobuf to http://localhost:4318
    OTEL_EXPORTER_OTLP_PROTOCOL=grpc python examples/observability.py  # gRPC to localhost:4317
    OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 python examples/observability.py

Every read becomes a ``search_memory`` span (``wm.cache.result`` = hit, miss, coalesced or
bypass) and counts in ``wm.cache.requests`` / ``wm.search.duration``; Jaeger is on
http://localhost:16686 and the Grafana dashboard on http://localhost:3000.

The protocol follows ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, the default, or
``grpc``), as in any OpenTelemetry SDK; the endpoint ``OTEL_EXPORTER_OTLP_ENDPOINT``, else the
protocol's default port on localhost. Whether a collector is there is judged by a real (empty)
export over that protocol, not a TCP connect: a gRPC port accepts connections and still rejects
HTTP exports. When no collector accepts it, the example still runs and says why. Set
``OTEL_SERVICE_NAME`` to name the service (default ``wm-middleware-app``).

Environment: ``python3 -m pip install -e '.[demo]'`` (supermemory 3.x and the OTLP exporters).
"""

from __future__ import annotations

import os
import sys

import supermemory

import wm_middleware
from wm_middleware.emulator import supermemory_target
from wm_middleware.otlp import DEFAULT_PORTS, otlp_protocol, probe

CONTAINER_TAG = "user-alex"
MEMORIES = ["Alex has a severe peanut allergy."]


def otlp_target() -> tuple[str, str]:
    """(protocol, endpoint) from the standard ``OTEL_EXPORTER_OTLP_*`` variables.

    Raises:
        ValueError: ``OTEL_EXPORTER_OTLP_PROTOCOL`` names a protocol without a Python exporter.
    """
    protocol = otlp_protocol("traces")
    default = f"http://localhost:{DEFAULT_PORTS[protocol]}"
    return protocol, os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", default).rstrip("/")


def main() -> None:
    try:
        protocol, endpoint = otlp_target()
    except ValueError as error:
        sys.exit(f"observability.py: {error}")
    problem = probe(endpoint, protocol)
    if problem is None:
        memory = wm_middleware.instrument(otlp_endpoint=endpoint)
        print(f"exporting traces and metrics to {endpoint} over {protocol}")
    else:
        # Nothing accepts exports: without the variable, instrument() sets up no exporter.
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        memory = wm_middleware.instrument()
        print(
            f"{problem}; running without exporting (start a collector with "
            "docker compose -f examples/observability/docker-compose.yml up -d)"
        )
    try:
        # The real API with SUPERMEMORY_API_KEY, else an emulator seeded with MEMORIES.
        with supermemory_target(MEMORIES, container_tag=CONTAINER_TAG) as (api_key, base_url):
            client = supermemory.Supermemory(api_key=api_key, base_url=base_url)
            for _ in range(5):
                client.search.memories(q="peanut allergy", container_tag=CONTAINER_TAG)
            client.add(content="Alex carries an EpiPen.", container_tag=CONTAINER_TAG)
            client.search.memories(q="peanut allergy", container_tag=CONTAINER_TAG)
        print(memory.stats())
    finally:
        wm_middleware.uninstrument()
    # The SDK providers flush their batches at interpreter exit.


if __name__ == "__main__":
    main()
