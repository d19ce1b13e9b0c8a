"""Run the scripted agent twice, uncached and cached, and collect what each run measured.

Each run gets its own SDK tracer provider (with an in-memory exporter, for the waterfall) and
resource ``service.name`` (``agent-uncached`` / ``agent-cached``), so that with an OTLP endpoint
both runs show up side by side in Jaeger and in the Grafana dashboard, whose ``job`` label is that
service name. The uncached run is instrumented with ``cache=False``: its reads go upstream and
are recorded as ``bypass``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .._cache import CacheStats
from .._instrumentor import instrument, uninstrument
from .agent import AgentRun, CallRecord, TurnRecord, run_agent, supermemory_tools_executor
from .script import CONTAINER_TAG, SEED_MEMORIES, turns

__all__ = [
    "DEMO_API_KEY",
    "DemoError",
    "DemoOptions",
    "DemoResult",
    "Progress",
    "RunResult",
    "collector_reachable",
    "otlp_target",
    "run_demo",
    "seed_emulator",
]

DEMO_API_KEY = "sk-wm-demo"
SERVICE_NAMES = {"uncached": "agent-uncached", "cached": "agent-cached"}
METRIC_EXPORT_MILLIS = 1000


class DemoError(Exception):
    """The demo cannot run against its target (unreachable, or refusing the key): one sentence."""


class Progress:
    """Progress callbacks of one run (the default ignores them)."""

    def start(self, name: str, total_calls: int) -> None:
        pass

    def call(self, record: CallRecord) -> None:
        pass

    def turn(self, record: TurnRecord) -> None:
        pass

    def finish(self, name: str, run: AgentRun) -> None:
        pass


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """``wm-middleware demo`` settings.

    ``api_key``/``base_url`` target the real API (no emulator, no seeding of fake data beyond the
    demo's memories in its own container tag); ``otlp_endpoint`` exports both runs.
    """

    turns: int = 4
    latency_ms: float = 100.0
    api_key: str | None = None
    base_url: str | None = None
    otlp_endpoint: str | None = None
    otlp_from_env: bool = False

    @property
    def uses_emulator(self) -> bool:
        return self.api_key is None and self.base_url is None


@dataclass(slots=True)
class RunResult:
    """One run: the agent's measurements, the spans it produced, the cache counters."""

    name: str
    service_name: str
    agent: AgentRun
    spans: tuple[ReadableSpan, ...]
    stats: CacheStats
    upstream: int
    upstream_source: str  # "emulator" (requests the server saw) or "spans" (misses + bypasses)
    results: dict[str, int] = field(default_factory=dict)  # cache result -> read spans


@dataclass(slots=True)
class DemoResult:
    options: DemoOptions
    target: str
    uncached: RunResult
    cached: RunResult


def otlp_target(endpoint: str | None) -> tuple[str | None, bool]:
    """The collector endpoint and whether it came from the standard environment variables."""
    if endpoint:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"--otlp-endpoint must be an http(s) URL, got {endpoint!r}")
        return endpoint.rstrip("/"), False
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        value = os.environ.get(name, "").strip()
        if value:
            return value.rstrip("/"), True
    return None, False


def collector_reachable(endpoint: str, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections at ``endpoint``'s host and port."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 4318)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=timeout):
            return True
    except OSError:
        return False


def seed_emulator(server: Any, api_key: str = DEMO_API_KEY) -> None:
    """Put the demo's memory set into an emulator for ``api_key``."""
    server.seed(api_key, list(SEED_MEMORIES), container_tag=CONTAINER_TAG)


async def _seed_api(api_key: str, base_url: str | None) -> None:
    """Upsert the demo's memories into the real API (custom ids make re-runs idempotent)."""
    import supermemory

    # The first request tells whether the target is usable at all: fail fast, in one sentence.
    client = supermemory.AsyncSupermemory(api_key=api_key, base_url=base_url, max_retries=0)
    try:
        for number, memory in enumerate(SEED_MEMORIES, start=1):
            await client.add(
                content=memory["content"],
                container_tag=CONTAINER_TAG,
                custom_id=f"wm-middleware-demo-{number}",
            )
    except supermemory.APIConnectionError as error:
        raise DemoError(
            f"cannot reach {base_url} ({error.__cause__ or error}); check --base-url"
        ) from error
    except supermemory.APIStatusError as error:
        hint = "check --api-key" if error.status_code in (401, 403) else "try again later"
        raise DemoError(
            f"{base_url} refused the demo's first request with HTTP {error.status_code}; {hint}"
        ) from error
    finally:
        await client.close()


def _providers(service_name: str, options: DemoOptions) -> tuple[TracerProvider, Any, Any]:
    """Tracer provider (in-memory exporter, plus OTLP when asked) and meter provider."""
    resource = Resource.create({"service.name": service_name})
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider: Any = None
    if options.otlp_endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # From the environment, the exporters read the OTEL_EXPORTER_OTLP_* variables themselves.
        base = None if options.otlp_from_env else options.otlp_endpoint
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=base and f"{base}/v1/traces"))
        )
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=base and f"{base}/v1/metrics"),
            export_interval_millis=METRIC_EXPORT_MILLIS,
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    return tracer_provider, meter_provider, exporter


def _result_counts(spans: Sequence[ReadableSpan]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for span in spans:
        result = (span.attributes or {}).get("wm.cache.result")
        if span.name == "search_memory" and isinstance(result, str):
            counts[result] = counts.get(result, 0) + 1
    return counts


async def _run(
    name: str,
    options: DemoOptions,
    *,
    api_key: str,
    base_url: str | None,
    upstream: Callable[[], int] | None,
    progress: Progress,
) -> RunResult:
    from supermemory_openai import SupermemoryTools

    service_name = SERVICE_NAMES[name]
    tracer_provider, meter_provider, exporter = _providers(service_name, options)
    script = turns(options.turns)
    progress.start(name, sum(len(turn.calls) for turn in script))
    memory = instrument(
        tracer_provider=tracer_provider, meter_provider=meter_provider, cache=name == "cached"
    )
    config: dict[str, Any] = {"container_tags": [CONTAINER_TAG]}
    if base_url is not None:
        config["base_url"] = base_url
    tools = SupermemoryTools(api_key, config)
    start = upstream() if upstream is not None else 0
    try:
        agent = await run_agent(
            script,
            supermemory_tools_executor(tools),
            tracer=tracer_provider.get_tracer("wm_middleware.demo"),
            upstream=upstream,
            on_call=progress.call,
            on_turn=progress.turn,
        )
        stats = memory.stats()
    finally:
        uninstrument()
        await tools.client.close()
        tracer_provider.force_flush()
        if meter_provider is not None:
            meter_provider.force_flush()
    spans = tuple(exporter.get_finished_spans())
    tracer_provider.shutdown()
    if meter_provider is not None:
        meter_provider.shutdown()
    results = _result_counts(spans)
    if upstream is not None:
        count, source = upstream() - start, "emulator"
    else:
        writes = sum(1 for s in spans if s.name in ("update_memory", "delete_memory"))
        count = results.get("miss", 0) + results.get("bypass", 0) + writes
        source = "spans"
    progress.finish(name, agent)
    return RunResult(name, service_name, agent, spans, stats, count, source, results)


async def run_demo(options: DemoOptions, progress: Progress | None = None) -> DemoResult:
    """Both runs against the emulator (started here) or the real API."""
    progress = progress or Progress()
    if not options.uses_emulator:
        api_key = options.api_key or os.environ.get("SUPERMEMORY_API_KEY", "")
        if not api_key:
            raise ValueError("--base-url needs --api-key or SUPERMEMORY_API_KEY")
        target = options.base_url or os.environ.get(
            "SUPERMEMORY_BASE_URL", "https://api.supermemory.ai"
        )
        await _seed_api(api_key, target)
        runs = [
            await _run(
                n, options, api_key=api_key, base_url=target, upstream=None, progress=progress
            )
            for n in ("uncached", "cached")
        ]
        return DemoResult(options, target, *runs)

    from ..emulator import EmulatorServer

    latency = options.latency_ms / 1000.0
    # +-20 % seeded jitter, so that the quantiles of the uncached run mean something.
    async with EmulatorServer(seed=7, latency=(latency * 0.8, latency * 1.2)) as server:
        runs = []
        for name in ("uncached", "cached"):
            server.reset()  # same data and zero counters for both runs
            seed_emulator(server)
            runs.append(
                await _run(
                    name,
                    options,
                    api_key=DEMO_API_KEY,
                    base_url=server.base_url,
                    upstream=server.count,
                    progress=progress,
                )
            )
        return DemoResult(options, "emulator", *runs)
