"""Cost of a cache hit through the real supermemory 3.x SDK, with and without telemetry.

Run from the repository root (supermemory 3.x installed)::

    python benchmarks/bench_sdk.py            # full run
    python benchmarks/bench_sdk.py --quick    # smoke test: fewer rounds, same rows
    python benchmarks/bench_sdk.py --json results.json

Every call is ``client.search.memories(q=..., container_tag=...)`` of a real ``Supermemory``
client against the emulator served in this process with no added latency, so the round trip
is the cheapest one possible (loopback HTTP, uvicorn in a thread): the hit ratios are upper
bounds of what a real network gives.

Rows: (1) uninstrumented round trip (the baseline); (2) a hit under ``instrument()`` with no SDK
providers (the API's no-op tracer and meter); (3) a hit with SDK providers and a span per hit
(TracerProvider + BatchSpanProcessor to a no-op exporter, MeterProvider with a reader); (4) the
same providers with ``trace_hits=False``; (0) the SDK's own floor: the same call with
``SyncAPIClient.request`` wrapped (wrapt, as ``instrument()`` does) to return a stored copy
(``pickle.loads`` of the response, as a hit does) without any middleware. Goals: (2) <= 0.5x (1);
(4) <= 1.10x (2); (2) <= 1.35x (0), i.e. the middleware adds at most 35% to the SDK's own work
(the regression guard of issue 15).

Method as in bench_core.py: each sample is a tight loop of the one call with the garbage
collector off; candidates are interleaved, every round running each once in a rotated order;
a figure is the median over rounds. ``instrument()`` is one per process, so each sample
instruments (untimed, then one untimed miss fills the cache) and uninstruments after.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

import pickle

import supermemory
import wrapt
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import wm_middleware

try:
    import supermemory._base_client as base_client
except ImportError:  # supermemory 5.x (Fern) has none: main() says what it needs
    base_client = None

from benchmarks._common import Row, parse_arguments, report, rotated
from wm_middleware.emulator import EmulatorServer

API_KEY: Final = "sk-bench"
TAG: Final = "user-1"
QUERY: Final = "what does the user prefer for breakfast"


@dataclass(frozen=True)
class Config:
    rounds: int
    sample_ns: int  # target duration of one timed sample


FULL: Final = Config(rounds=21, sample_ns=300_000_000)
QUICK: Final = Config(rounds=5, sample_ns=50_000_000)


class NoOpExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@dataclass
class Candidate:
    """How to set up one row's sample: ``instrument`` options, or ``None`` for uninstrumented.

    ``floor``: the stored response ``request`` returns instead of sending (no middleware).
    """

    options: dict[str, Any] | None
    floor: bytes | None = None


def _search(client: supermemory.Supermemory) -> Any:
    return client.search.memories(q=QUERY, container_tag=TAG)


def _loop(client: supermemory.Supermemory, count: int) -> float:
    """Nanoseconds per call of ``count`` searches."""
    search = client.search.memories
    started = time.perf_counter_ns()
    for _ in range(count):
        search(q=QUERY, container_tag=TAG)
    return (time.perf_counter_ns() - started) / count


def _sample(client: supermemory.Supermemory, candidate: Candidate, count: int) -> float:
    if candidate.floor is not None:
        stored = candidate.floor
        original = vars(base_client.SyncAPIClient)["request"]
        wrapt.wrap_function_wrapper(
            base_client.SyncAPIClient, "request", lambda wrapped, obj, a, k: pickle.loads(stored)
        )
        try:
            return _timed(client, count)
        finally:
            base_client.SyncAPIClient.request = original  # type: ignore[method-assign]
    if candidate.options is not None:
        wm_middleware.instrument(**candidate.options)
    try:
        return _timed(client, count)
    finally:
        if candidate.options is not None:
            wm_middleware.uninstrument()


def _timed(client: supermemory.Supermemory, count: int) -> float:
    _search(client)  # untimed: fills the cache (a miss) or warms the connection
    gc.collect()
    gc.disable()
    try:
        return _loop(client, count)
    finally:
        gc.enable()


def bench(cfg: Config, server: EmulatorServer) -> list[Row]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(NoOpExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    sdk = {"tracer_provider": tracer_provider, "meter_provider": meter_provider}
    client = supermemory.Supermemory(api_key=API_KEY, base_url=server.base_url, max_retries=0)
    candidates = {
        "floor": Candidate(None, pickle.dumps(_search(client))),
        "round_trip": Candidate(None),
        "hit": Candidate({}),
        "hit_spans": Candidate(dict(sdk)),
        "hit_no_spans": Candidate({**sdk, "trace_hits": False}),
    }
    try:
        samples = _measure(cfg, server, client, candidates)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
    return _rows({name: statistics.median(values) for name, values in samples.items()})


def _measure(
    cfg: Config,
    server: EmulatorServer,
    client: supermemory.Supermemory,
    candidates: dict[str, Candidate],
) -> dict[str, list[float]]:
    """Every candidate's samples, interleaved in a rotated order each round."""
    before = server.count("POST", "/v4/search")
    counts = {
        name: max(20, int(cfg.sample_ns / max(_sample(client, c, 20), 1.0)))
        for name, c in candidates.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    upstream: dict[str, int] = dict.fromkeys(candidates, 0)
    for order in rotated(list(candidates), cfg.rounds):
        for name in order:
            seen = server.count("POST", "/v4/search")
            samples[name].append(_sample(client, candidates[name], counts[name]))
            upstream[name] += server.count("POST", "/v4/search") - seen
    # Every instrumented sample made exactly one upstream call (its untimed miss): hits only.
    for name in ("hit", "hit_spans", "hit_no_spans"):
        assert upstream[name] == cfg.rounds, (name, upstream[name])
    assert server.count("POST", "/v4/search") > before
    return samples


def _rows(med: dict[str, float]) -> list[Row]:
    base = med["round_trip"]
    section = "SDK 3.x client.search.memories, in-process emulator, zero latency"
    rows = [
        Row(section, "(1) uninstrumented round trip (baseline)", base, "ns", 1.0),
        Row(section, "(2) hit, instrument(), no SDK providers", med["hit"], "ns",
            med["hit"] / base, 0.5),
        Row(section, "(3) hit, SDK providers, span per hit", med["hit_spans"], "ns",
            med["hit_spans"] / base, note="info"),
        Row(section, "(4) hit, SDK providers, trace_hits=False", med["hit_no_spans"], "ns",
            med["hit_no_spans"] / base, note="info"),
    ]  # fmt: skip
    floor = "middleware cost: a hit vs the SDK's own floor (request returns a stored copy)"
    rows += [
        Row(floor, "(0) SDK floor, no middleware", med["floor"], "ns", 1.0),
        Row(floor, "(2) / (0): hit through the SDK", med["hit"], "ns",
            med["hit"] / med["floor"], 1.35),
        Row(floor, "(4) / (0): hit, SDK providers, no hit spans", med["hit_no_spans"], "ns",
            med["hit_no_spans"] / med["floor"], note="info"),
    ]  # fmt: skip
    versus = "telemetry cost: (4) vs (2), (3) vs (2)"
    rows += [
        Row(versus, "(4) / (2): SDK metrics, no hit spans", med["hit_no_spans"], "ns",
            med["hit_no_spans"] / med["hit"], 1.10),
        Row(versus, "(3) / (2): SDK metrics and a span per hit", med["hit_spans"], "ns",
            med["hit_spans"] / med["hit"], note="info"),
    ]  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(__doc__, argv, quick="fewer rounds: a smoke test")
    cfg = QUICK if args.quick else FULL
    if not supermemory.__version__.startswith("3."):
        print(f"bench_sdk needs supermemory 3.x, found {supermemory.__version__}")
        return 2
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    ):
        os.environ.pop(name, None)
    print(
        f"wm_middleware bench_sdk: Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, supermemory {supermemory.__version__}, "
        f"{'quick' if args.quick else 'full'} run; median over {cfg.rounds} interleaved rounds"
    )
    started = time.perf_counter()
    with EmulatorServer(seed=1) as server:
        server.seed(
            API_KEY, ["User eats porridge for breakfast", "User likes tea"], container_tag=TAG
        )
        rows = bench(cfg, server)
    elapsed = time.perf_counter() - started
    report(rows, arguments=args, config=cfg, seconds=elapsed, label_width=46, ratio_digits=3)
    return 0  # a missed goal is a finding, not a failure of the program


if __name__ == "__main__":
    raise SystemExit(main())
