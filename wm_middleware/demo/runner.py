"""Run the scripted agent twice, uncached and cached, and collect what each run measured.

Each run gets its own SDK tracer provider (with an in-memory exporter, for the waterfall) and
resource ``service.name`` (``agent-uncached`` / ``agent-cached``), so that with an OTLP endpoint
both runs show up side by side in Jaeger and in the Grafana dashboard, whose ``job`` label is that
service name. The uncached run is instrumented with ``cache=False``: its reads go upstream and
are recorded as ``bypass``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .. import CacheStats, WorkingMemory, instrument, uninstrument, wrap
from ..otlp import DeliveryCount, otlp_exporter, otlp_protocol, probe
from ..semconv import CACHE_RESULT, OI_PROJECT, SEARCH_MEMORY, WRITE_SPANS
from .agent import AgentRun, CallRecord, TurnRecord, run_agent, supermemory_tools_executor
from .script import CONTAINER_TAG, DEMO_API_KEY, SEED_MEMORIES, turns

__all__ = [
    "DEFAULT_API_URL",
    "DEMO_API_KEY",
    "DemoError",
    "DemoOptions",
    "DemoResult",
    "Progress",
    "RunResult",
    "check_collector",
    "check_metrics",
    "otlp_target",
    "run_demo",
    "seed_emulator",
    "target_of",
]

DEFAULT_API_URL = "https://api.supermemory.ai"  # the SDK's own default base URL
SERVICE_NAMES = {"uncached": "agent-uncached", "cached": "agent-cached"}
METRIC_EXPORT_MILLIS = 1000
# Seeds the emulator's latency jitter: each run replays the same sequence of upstream latencies.
LATENCY_SEED = 7


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
    demo's memories in its own container tag); ``otlp_endpoint`` exports both runs, and their
    metrics too unless ``otlp_metrics`` is off (a collector that takes traces only).
    ``indexing_delay`` is the emulator's: seconds before a written memory is searchable.
    ``pause`` is the agent's time between turns (the model answering, the user writing back),
    left out of the wall times.
    """

    turns: int = 4
    latency_ms: float = 100.0
    indexing_delay: float = 2.0
    pause: float = 1.0
    api_key: str | None = None
    base_url: str | None = None
    otlp_endpoint: str | None = None
    otlp_from_env: bool = False
    otlp_protocol: str | None = None  # grpc | http/protobuf; None: OTEL_EXPORTER_OTLP_PROTOCOL
    duration: float | None = None  # seconds: keep both deployments running, side by side
    otlp_metrics: bool = True
    semantic: str | None = None  # "shadow" / "serve": the cached run's misses (docs/semantic.md)

    @property
    def uses_emulator(self) -> bool:
        return self.api_key is None and self.base_url is None


@dataclass(slots=True)
class AllRounds:
    """Wall times of every round's turns and searches, the first round's too: what a
    dashboard or Jaeger's Monitor tab shows of a ``duration`` run (the rest of
    :class:`RunResult` describes the first round)."""

    turns: list[float] = field(default_factory=list)
    searches: list[float] = field(default_factory=list)

    def add(self, agent: AgentRun) -> None:
        self.turns.extend(turn.seconds for turn in agent.turns)
        self.searches.extend(call.seconds for call in agent.searches)


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
    # With a duration: rounds of the script played, and upstream requests over all of them
    # (``agent``, ``upstream`` and ``results`` describe the first round).
    rounds: int = 1
    upstream_total: int = 0
    spans_recorded: int = 0  # every span of every round (the OTLP exporter saw these)
    otlp: DeliveryCount | None = None  # spans delivered to / dropped by the OTLP collector
    # Seconds of emulated latency the first round's requests waited (None: the real API).
    emulated_latency: float | None = None
    interrupted: bool = False  # Ctrl-C stopped the later rounds (``duration``)
    all_rounds: AllRounds = field(default_factory=AllRounds)


@dataclass(slots=True)
class DemoResult:
    options: DemoOptions
    target: str
    uncached: RunResult
    cached: RunResult

    @property
    def interrupted(self) -> bool:
        """Ctrl-C stopped the rounds after the first (``duration``); the first is complete."""
        return self.uncached.interrupted or self.cached.interrupted


def api_url(options: DemoOptions) -> str:
    """The API a run without the emulator talks to: ``base_url``, else the
    ``SUPERMEMORY_BASE_URL`` the SDK reads, else the SDK's default."""
    from_env = os.environ.get("SUPERMEMORY_BASE_URL", "").strip()
    return options.base_url or from_env.rstrip("/") or DEFAULT_API_URL


def target_of(options: DemoOptions) -> str:
    """What the runs talk to, as the demo's first line says it."""
    if options.uses_emulator:
        return (
            f"the emulator ({options.latency_ms:g} ms latency, "
            f"{options.indexing_delay:g} s indexing)"
        )
    url = api_url(options)
    if options.base_url is None and url != DEFAULT_API_URL:
        return f"{url} (SUPERMEMORY_BASE_URL)"
    return f"the Supermemory API ({url})" if url == DEFAULT_API_URL else url


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


def check_collector(
    endpoint: str | None, from_env: bool, protocol: str | None
) -> tuple[str, str | None]:
    """The OTLP protocol in force, and why no collector accepted a test export (``None``: it
    did, or there is no endpoint). Judged by a real export, not a TCP connect.

    Raises:
        ValueError: an unsupported protocol (argument or OTEL_EXPORTER_OTLP_PROTOCOL).
    """
    if endpoint is None:  # not exporting: the protocol variable is not this run's business
        return protocol or "http/protobuf", None
    protocol = otlp_protocol("traces", protocol)
    return protocol, probe(None if from_env else endpoint, protocol)


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def check_metrics(endpoint: str, from_env: bool, protocol: str | None) -> str | None:
    """Why the collector refused a test metric export (``None``: it accepted one).

    A backend that takes only traces answers a metric export with an error such as HTTP 405
    or 404. Checked once, before the runs, with an empty request: said once, instead
    of one exporter error per export interval. The exporter's own log lines are kept from the
    console and give the reason.
    """
    from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData

    protocol = otlp_protocol("metrics", protocol)
    exporter = otlp_exporter("metrics", None if from_env else endpoint, protocol, timeout=2.0)
    quiet = logging.getLogger("opentelemetry.exporter.otlp")
    captured, propagate = _Messages(), quiet.propagate
    quiet.addHandler(captured)
    quiet.propagate = False
    try:
        result = exporter.export(MetricsData(resource_metrics=[]), timeout_millis=2000)
    except Exception as error:
        result = None
        captured.messages.append(f"{type(error).__name__}: {error}")
    finally:
        quiet.removeHandler(captured)
        quiet.propagate = propagate
        try:
            exporter.shutdown()
        except Exception:
            pass
    if result == MetricExportResult.SUCCESS:
        return None
    reason = captured.messages[-1] if captured.messages else "the export failed"
    return " ".join(reason.split())


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


@dataclass(frozen=True, slots=True)
class _Providers:
    """One run's telemetry: the tracer provider with its in-memory exporter (the waterfall's
    spans) and, when exporting, the OTLP delivery count; the meter provider, if any."""

    tracer_provider: TracerProvider
    meter_provider: Any
    exporter: InMemorySpanExporter
    delivery: DeliveryCount | None

    def flush(self) -> None:
        self.tracer_provider.force_flush()
        if self.meter_provider is not None:
            self.meter_provider.force_flush()

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _providers(service_name: str, options: DemoOptions, meter_provider: Any = None) -> _Providers:
    """Tracer provider (in-memory exporter, plus OTLP when asked), meter provider, and the
    OTLP delivery count. A given ``meter_provider`` is used as it is."""
    # Phoenix-style backends group by openinference.project.name: one project per deployment.
    resource = Resource.create({"service.name": service_name, OI_PROJECT: service_name})
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    delivery: DeliveryCount | None = None
    if options.otlp_endpoint is not None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # From the environment, the exporters read the OTEL_EXPORTER_OTLP_* variables themselves.
        base = None if options.otlp_from_env else options.otlp_endpoint
        delivery = DeliveryCount(otlp_exporter("traces", base, options.otlp_protocol))
        tracer_provider.add_span_processor(BatchSpanProcessor(delivery))  # type: ignore[arg-type]
        if meter_provider is None and options.otlp_metrics:
            reader = PeriodicExportingMetricReader(
                otlp_exporter("metrics", base, options.otlp_protocol),
                export_interval_millis=METRIC_EXPORT_MILLIS,
            )
            meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    return _Providers(tracer_provider, meter_provider, exporter, delivery)


# The tracer provider of the run in the current context: httpx is instrumented once per process
# (a BaseInstrumentor is a singleton), and its spans must go to the run that made the request.
_RUN_TRACER: contextvars.ContextVar[TracerProvider | None] = contextvars.ContextVar(
    "wm_demo_run_tracer", default=None
)


class _RunTracerProvider:
    """A tracer provider whose tracers start spans on the current run's provider."""

    def get_tracer(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return _RunTracer(name, args, kwargs)


class _RunTracer:
    def __init__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._name, self._args, self._kwargs = name, args, kwargs

    def _tracer(self) -> Any:
        from opentelemetry.trace import NoOpTracer

        provider = _RUN_TRACER.get()
        if provider is None:
            return NoOpTracer()
        return provider.get_tracer(self._name, *self._args, **self._kwargs)

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracer().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracer().start_as_current_span(*args, **kwargs)


@contextmanager
def _traced_http(tracer_provider: TracerProvider) -> Iterator[None]:
    """HTTP spans made in this context go to ``tracer_provider``."""
    token = _RUN_TRACER.set(tracer_provider)
    try:
        yield
    finally:
        _RUN_TRACER.reset(token)


@contextmanager
def _httpx_traced() -> Iterator[bool]:
    """Trace the SDK's HTTP calls while the demo runs (opentelemetry-instrumentation-httpx, in
    the demo extra), so that a miss's request is a child of its ``search_memory`` span.
    Yields False where the instrumentation is missing or someone else already applied it."""
    # The stable HTTP attribute names (http.request.method, url.full, ...), read once per process.
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    try:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    except ImportError:
        yield False
        return
    instrumentor = HTTPXClientInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        yield False
        return
    instrumentor.instrument(tracer_provider=_RunTracerProvider())
    try:
        yield True
    finally:
        instrumentor.uninstrument()


def _result_counts(spans: Sequence[ReadableSpan]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for span in spans:
        result = (span.attributes or {}).get(CACHE_RESULT)
        if span.name == SEARCH_MEMORY and isinstance(result, str):
            counts[result] = counts.get(result, 0) + 1
    return counts


@contextmanager
def _caching(
    name: str, tools: Any, providers: _Providers, *, alone: bool, semantic: str | None = None
) -> Iterator[WorkingMemory[Any]]:
    """The run's cache layer: ``instrument()`` when the run is alone in the process; with the
    other run alongside (``duration``), a wrapped copy of the tools' own client instead, since
    ``instrument()`` patches the SDK once per process. The uncached run reads with
    ``cache=False`` (recorded as ``bypass``) either way."""
    cached = name == "cached"
    semantic = semantic if cached else None
    tracer_provider, meter_provider = providers.tracer_provider, providers.meter_provider
    if alone:
        memory = instrument(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            cache=cached,
            semantic=semantic,
        )
        try:
            yield memory
        finally:
            uninstrument()
        return
    wrapped = wrap(
        tools.client,
        cache=cached,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        semantic=semantic,
    )
    memory = wrapped.working_memory
    original, tools.client = tools.client, wrapped
    try:
        yield memory
    finally:
        tools.client = original


@dataclass(slots=True)
class _Played:
    """What :func:`_play` measured: the first round in detail, then how many rounds ran."""

    agent: AgentRun
    stats: CacheStats
    spans: tuple[ReadableSpan, ...]
    upstream: int
    waited: float | None
    rounds: int = 1
    recorded: int = 0
    interrupted: bool = False
    all_rounds: AllRounds = field(default_factory=AllRounds)


async def _play(
    options: DemoOptions,
    script: Sequence[Any],
    execute: Any,
    memory: WorkingMemory[Any],
    providers: _Providers,
    upstream: Callable[[], int] | None,
    waited: Callable[[], float] | None,
    progress: Progress,
) -> _Played:
    """The script once, or (with ``options.duration``) again and again until the duration is
    up; the first round is the one measured in detail."""
    tracer = providers.tracer_provider.get_tracer("wm_middleware.demo")
    exporter = providers.exporter
    start = upstream() if upstream is not None else 0
    began = time.monotonic()
    agent = await run_agent(
        script,
        execute,
        tracer=tracer,
        upstream=upstream,
        on_call=progress.call,
        on_turn=progress.turn,
        pause=options.pause,
    )
    # The first round's spans (all ended: the loop awaited every call) are the ones reported;
    # later rounds only feed the exporters and the dashboards.
    played = _Played(
        agent,
        memory.stats(),
        tuple(exporter.get_finished_spans()),
        upstream() - start if upstream is not None else 0,
        waited() if waited is not None else None,
    )
    played.all_rounds.add(agent)
    try:
        while options.duration is not None and time.monotonic() - began < options.duration:
            played.recorded += len(exporter.get_finished_spans())
            exporter.clear()
            later = await run_agent(script, execute, tracer=tracer, pause=options.pause)
            played.all_rounds.add(later)
            played.rounds += 1
    except asyncio.CancelledError:
        # Ctrl-C in a later round (see _side_by_side): it stops there, and the first round,
        # measured in full, is still reported.
        played.interrupted = True
    return played


async def _run(
    name: str,
    options: DemoOptions,
    *,
    api_key: str,
    base_url: str | None,
    upstream: Callable[[], int] | None,
    progress: Progress,
    meter_provider: Any = None,
    alone: bool = True,
    waited: Callable[[], float] | None = None,
) -> RunResult:
    """One deployment (see :func:`_play`), with its own providers, client and cache layer.

    ``upstream`` counts the requests the emulator received, ``waited`` the seconds of emulated
    latency they waited (``None`` against the real API)."""
    tools = _supermemory_tools(api_key, base_url)
    service_name = SERVICE_NAMES[name]
    providers = _providers(service_name, options, meter_provider)
    script = turns(options.turns)
    progress.start(name, sum(len(turn.calls) for turn in script))
    start = upstream() if upstream is not None else 0
    try:
        with (
            _caching(name, tools, providers, alone=alone, semantic=options.semantic) as memory,
            _traced_http(providers.tracer_provider),
        ):
            execute = supermemory_tools_executor(tools)
            played = await _play(
                options, script, execute, memory, providers, upstream, waited, progress
            )
    finally:
        await tools.client.close()
        providers.flush()
    played.recorded += len(providers.exporter.get_finished_spans())
    providers.shutdown()
    result = _run_result(name, service_name, played, providers, upstream, start)
    progress.finish(name, played.agent)
    return result


def _supermemory_tools(api_key: str, base_url: str | None) -> Any:
    """The agent's tools (supermemory-openai-sdk), on the user's container tag."""
    from supermemory_openai import SupermemoryTools

    config: dict[str, Any] = {"container_tags": [CONTAINER_TAG]}
    if base_url is not None:
        config["base_url"] = base_url
    return SupermemoryTools(api_key, config)


def _run_result(
    name: str,
    service_name: str,
    played: _Played,
    providers: _Providers,
    upstream: Callable[[], int] | None,
    start: int,
) -> RunResult:
    """What the run measured. Upstream requests are counted by the emulator (from ``start``),
    or against the real API from the first round's spans (misses, bypasses and writes), once
    per round."""
    results = _result_counts(played.spans)
    if upstream is not None:
        count, total, source = played.upstream, upstream() - start, "emulator"
    else:
        writes = sum(1 for s in played.spans if s.name in WRITE_SPANS)
        count = results.get("miss", 0) + results.get("bypass", 0) + writes
        total, source = count * played.rounds, "spans"
    return RunResult(
        name,
        service_name,
        played.agent,
        played.spans,
        played.stats,
        count,
        source,
        results,
        rounds=played.rounds,
        upstream_total=total,
        spans_recorded=played.recorded,
        otlp=providers.delivery,
        emulated_latency=played.waited,
        interrupted=played.interrupted,
        all_rounds=played.all_rounds,
    )


async def run_demo(
    options: DemoOptions,
    progress: Progress | None = None,
    *,
    meter_providers: Mapping[str, Any] | None = None,
) -> DemoResult:
    """Both runs against the emulator (started here) or the real API.

    Without a duration the runs go one after the other, each alone, for clean timings. With
    ``options.duration`` both deployments run side by side for that long (an emulator each),
    so that rate() and increase() on a dashboard compare them over the same minutes.

    Args:
        meter_providers: a meter provider per run name (``"uncached"``, ``"cached"``) to record
            the library's metrics on, instead of the OTLP one (tests scrape them).
    """
    progress = progress or Progress()
    meters = dict(meter_providers or {})
    with _httpx_traced():
        if not options.uses_emulator:
            api_key = options.api_key or os.environ.get("SUPERMEMORY_API_KEY", "")
            if not api_key:
                raise ValueError("--base-url needs --api-key or SUPERMEMORY_API_KEY")
            target = api_url(options)
            await _seed_api(api_key, target)

            def real(name: str, alone: bool) -> Any:
                return _run(
                    name,
                    options,
                    api_key=api_key,
                    base_url=target,
                    upstream=None,
                    progress=progress if alone else Progress(),
                    meter_provider=meters.get(name),
                    alone=alone,
                )

            if options.duration is not None:
                uncached, cached = await _side_by_side(
                    real("uncached", False), real("cached", False)
                )
            else:
                uncached = await real("uncached", True)
                cached = await real("cached", True)
            return DemoResult(options, target, uncached, cached)
        return await _emulated(options, progress, meters)


async def _side_by_side(
    first: Coroutine[Any, Any, RunResult], second: Coroutine[Any, Any, RunResult]
) -> tuple[RunResult, RunResult]:
    """Both deployments at once (``duration``). Ctrl-C cancels this task (``asyncio.run``
    does); each run then stops replaying and returns its first round, which is reported. Ctrl-C
    before a run's first round is over still ends the demo (``KeyboardInterrupt``)."""
    tasks = (asyncio.ensure_future(first), asyncio.ensure_future(second))
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        if any(task.cancelled() for task in tasks):
            raise
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()  # handled: the runs return what they measured
    return tasks[0].result(), tasks[1].result()


def _emulator(options: DemoOptions, jitter: tuple[float, float]) -> Any:
    from ..emulator import EmulatorServer

    return EmulatorServer(seed=LATENCY_SEED, latency=jitter, indexing_delay=options.indexing_delay)


async def _emulated(options: DemoOptions, progress: Progress, meters: dict[str, Any]) -> DemoResult:
    latency = options.latency_ms / 1000.0
    # +-20 % seeded jitter, so that the quantiles of the uncached run mean something.
    jitter = (latency * 0.8, latency * 1.2)

    def run(name: str, server: Any, alone: bool) -> Any:
        server.reset()  # same data and zero counters for both runs
        # The same sequence of latencies for both: neither run is slower by the luck of the draw.
        server.set_latency(jitter, seed=LATENCY_SEED)
        seed_emulator(server)
        return _run(
            name,
            options,
            api_key=DEMO_API_KEY,
            base_url=server.base_url,
            upstream=server.count,
            progress=progress if alone else Progress(),
            meter_provider=meters.get(name),
            alone=alone,
            waited=lambda: float(server.latency.total_seconds),
        )

    if options.duration is not None:
        async with (
            _emulator(options, jitter) as first,
            _emulator(options, jitter) as second,
        ):
            uncached, cached = await _side_by_side(
                run("uncached", first, False), run("cached", second, False)
            )
            return DemoResult(options, "emulator", uncached, cached)
    async with _emulator(options, jitter) as server:
        uncached = await run("uncached", server, True)
        cached = await run("cached", server, True)
        return DemoResult(options, "emulator", uncached, cached)
