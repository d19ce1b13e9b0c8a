"""Traces and metrics of the working memory over OTLP: one ``instrument(otlp_endpoint=...)`` call.

    docker compose -f examples/observability/docker-compose.yml up -d   # collector, Jaeger...
    python examples/observability.py                 # exports to http://localhost:4318
    OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 python examples/observability.py

Every read becomes a ``search_memory`` span (``wm.cache.result`` = hit, miss, coalesced or
bypass) and counts in ``wm.cache.requests`` / ``wm.search.duration``; Jaeger is on
http://localhost:16686 and the Grafana dashboard on http://localhost:3000. When no collector is
listening, the example still runs and says where it would have exported. Set
``OTEL_SERVICE_NAME`` to name the service (default ``wm-middleware-app``).

Environment: ``python3 -m pip install -e '.[demo]'`` (supermemory 3.x and the OTLP exporter).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import supermemory

import wm_middleware

CONTAINER_TAG = "user-alex"
# The standard variable, as for every OpenTelemetry exporter.
ENDPOINT = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318").rstrip("/")


def reachable(endpoint: str) -> bool:
    parts = urlsplit(endpoint)
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 4318), 0.5):
            return True
    except OSError:
        return False


@contextmanager
def supermemory_target() -> Iterator[tuple[str, str | None]]:
    """(api_key, base_url): the real API when SUPERMEMORY_API_KEY is set, else an emulator."""
    api_key = os.environ.get("SUPERMEMORY_API_KEY")
    if api_key:
        yield api_key, os.environ.get("SUPERMEMORY_BASE_URL")
        return
    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer(latency=0.05) as server:
        server.seed(
            "sk-example", ["Alex has a severe peanut allergy."], container_tag=CONTAINER_TAG
        )
        print(f"(no SUPERMEMORY_API_KEY: using the emulator at {server.base_url})")
        yield "sk-example", server.base_url


def main() -> None:
    if reachable(ENDPOINT):
        memory = wm_middleware.instrument(otlp_endpoint=ENDPOINT)
        print(f"exporting traces and metrics to {ENDPOINT} (OTLP/HTTP)")
    else:
        # Nothing listens: without the variable, instrument() sets up no exporter for it.
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        memory = wm_middleware.instrument()
        print(
            f"no OTLP collector at {ENDPOINT}: would export traces to {ENDPOINT}/v1/traces and "
            f"metrics to {ENDPOINT}/v1/metrics (start one with "
            "docker compose -f examples/observability/docker-compose.yml up -d)"
        )
    try:
        with supermemory_target() as (api_key, base_url):
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
