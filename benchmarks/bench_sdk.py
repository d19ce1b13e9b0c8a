"""Cost of a cache hit through the real supermemory SDKs (3.x, 5.x), with and without telemetry.

Run from the repository root; it measures the installed generation, and with ``--other PYTHON``
also the other one, in a child process of that interpreter (an environment with the other SDK)::

    python benchmarks/bench_sdk.py            # full run
    python benchmarks/bench_sdk.py --quick    # smoke test: fewer rounds, same rows
    python benchmarks/bench_sdk.py --json results.json
    /work/venv3/bin/python benchmarks/bench_sdk.py --other /work/venv5/bin/python

SDK 3.x. Every call is ``client.search.memories(q=..., container_tag=...)`` of a real
``Supermemory`` client against the emulator served in this process with no added latency, so
the round trip is the cheapest one possible (loopback HTTP, uvicorn in a thread): the hit
ratios are upper bounds of what a real network gives.

Rows: (1) uninstrumented round trip (the baseline); (2) a hit under ``instrument()`` with no SDK
providers (the API's no-op tracer and meter); (3) a hit with SDK providers and a span per hit
(TracerProvider + BatchSpanProcessor to a no-op exporter, MeterProvider with a reader); (4) the
same providers with ``trace_hits=False``; (0) the SDK's own floor: the same call with
``SyncAPIClient.request`` wrapped (wrapt, as ``instrument()`` does) to return a stored copy
(``pickle.loads`` of the response, as a hit does) without any middleware. Goals: (2) <= 0.5x (1);
(4) <= 1.10x (2); (2) <= 1.35x (0), i.e. the middleware adds at most 35% to the SDK's own work
(the regression guard of issue 15).

SDK 5.x. Every call is ``client.search(namespace, query=...)`` of a real ``Supermemory``. (5.0)
the SDK's own floor: the call with an ``httpx`` transport that answers at once with a stored
body (no network, no server: the SDK's whole work and nothing else); (5.2) a hit under
``instrument()`` with no SDK providers; (5.4) with SDK providers and ``trace_hits=False``.
Goal: (5.2) <= 0.3x (5.0), a hit costs at most 30% of the SDK's own call.

Method as in bench_core.py: each sample is a tight loop of the one call with the garbage
collector off; candidates are interleaved, every round running each once in a rotated order;
a figure is the median over rounds. ``instrument()`` is one per process, so each sample
instruments (untimed, then one untimed miss fills the cache) and uninstruments after.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

import pickle

import httpx
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


def _search3(client: Any) -> Any:
    return client.search.memories(q=QUERY, container_tag=TAG)


def _search5(client: Any) -> Any:
    return client.search(TAG, query=QUERY)


# One search of the installed generation (3.x: by container tag; 5.x: by namespace).
_search = _search3 if supermemory.__version__.startswith("3.") else _search5


def _loop(client: Any, count: int) -> float:
    """Nanoseconds per call of ``count`` searches.

    3.x: the bound method is looked up once, as before. 5.x: ``client.search`` each time, as
    callers do (the SDK's ``_compat`` layer rebuilds the bound method on every access).
    """
    if _search is _search5:
        started = time.perf_counter_ns()
        for _ in range(count):
            client.search(TAG, query=QUERY)
        return (time.perf_counter_ns() - started) / count
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


def _timed(client: Any, count: int) -> float:
    _search(client)  # untimed: fills the cache (a miss) or warms the connection
    gc.collect()
    gc.disable()
    try:
        return _loop(client, count)
    finally:
        gc.enable()


def _providers() -> tuple[TracerProvider, MeterProvider]:
    """SDK providers: spans batched to a no-op exporter, metrics to an in-memory reader."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(NoOpExporter()))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


def bench(cfg: Config, server: EmulatorServer) -> list[Row]:
    """SDK 3.x: the round trip, the hits and the SDK's floor."""
    tracer_provider, meter_provider = _providers()
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
        samples = _measure(cfg, lambda: server.count("POST", "/v4/search"), client, candidates)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
    return _rows({name: statistics.median(values) for name, values in samples.items()})


def _measure(
    cfg: Config,
    sent: Callable[[], int],
    client: Any,
    candidates: dict[str, Candidate],
) -> dict[str, list[float]]:
    """Every candidate's samples, interleaved in a rotated order each round; ``sent`` counts
    the searches that reached upstream."""
    before = sent()
    counts = {
        name: max(20, int(cfg.sample_ns / max(_sample(client, c, 20), 1.0)))
        for name, c in candidates.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    upstream: dict[str, int] = dict.fromkeys(candidates, 0)
    for order in rotated(list(candidates), cfg.rounds):
        for name in order:
            seen = sent()
            samples[name].append(_sample(client, candidates[name], counts[name]))
            upstream[name] += sent() - seen
    # Every instrumented sample made exactly one upstream call (its untimed miss): hits only.
    for name in candidates:
        if name.startswith("hit"):
            assert upstream[name] == cfg.rounds, (name, upstream[name])
    assert sent() > before
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


class Instant(httpx.BaseTransport):
    """Answers every request at once with one stored body, and counts them."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return httpx.Response(200, content=self.body, headers={"content-type": "application/json"})


def bench5(cfg: Config, server: EmulatorServer) -> list[Row]:
    """SDK 5.x: the hits against the SDK's own floor, its call with an instant transport."""
    answer = httpx.post(
        f"{server.base_url}/ns/{TAG}/search",
        json={"query": QUERY},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    answer.raise_for_status()
    transport = Instant(answer.content)
    client = supermemory.Supermemory(
        api_key=API_KEY,
        base_url=server.base_url,
        max_retries=0,
        http_client=httpx.Client(transport=transport),
    )
    tracer_provider, meter_provider = _providers()
    sdk = {"tracer_provider": tracer_provider, "meter_provider": meter_provider}
    candidates = {
        "floor": Candidate(None),  # uninstrumented: the SDK's whole call, answered at once
        "hit": Candidate({}),
        "hit_no_spans": Candidate({**sdk, "trace_hits": False}),
    }
    try:
        samples = _measure(cfg, lambda: transport.requests, client, candidates)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
    med = {name: statistics.median(values) for name, values in samples.items()}
    section = (
        "SDK 5.x client.search: a hit vs the SDK's own floor (a transport that answers at once)"
    )
    return [
        Row(section, "(5.0) SDK floor, no middleware", med["floor"], "ns", 1.0),
        Row(section, "(5.2) / (5.0): hit through the SDK", med["hit"], "ns",
            med["hit"] / med["floor"], 0.3),
        Row(section, "(5.4) / (5.0): hit, SDK providers, no spans", med["hit_no_spans"],
            "ns", med["hit_no_spans"] / med["floor"], note="info"),
    ]  # fmt: skip


def _other(python: str, quick: bool) -> list[Row]:
    """The rows of this script run by ``python`` (an environment with the other SDK)."""
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "rows.json"
        command = [python, str(Path(__file__).resolve()), "--json", str(results)]
        subprocess.run([*command, *(["--quick"] if quick else [])], check=True, stdout=DEVNULL)
        rows = json.loads(results.read_text())["rows"]
    return [Row(**{k: v for k, v in row.items() if k != "result"}) for row in rows]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    other = None
    if "--other" in argv:  # the one option of this script alone: taken off before the others
        at = argv.index("--other")
        other = argv[at + 1] if at + 1 < len(argv) else None
        del argv[at : at + 2]
        if other is None:
            print("--other needs the path of a Python with the other supermemory generation")
            return 2
    args = parse_arguments(__doc__, argv, quick="fewer rounds: a smoke test")
    cfg = QUICK if args.quick else FULL
    generation = supermemory.__version__.split(".")[0]
    if generation not in ("3", "5"):
        print(f"bench_sdk needs supermemory 3.x or 5.x, found {supermemory.__version__}")
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
        rows = bench(cfg, server) if generation == "3" else bench5(cfg, server)
    if other is not None:
        rows += _other(other, args.quick)
    elapsed = time.perf_counter() - started
    report(rows, arguments=args, config=cfg, seconds=elapsed, label_width=46, ratio_digits=3)
    return 0  # a missed goal is a finding, not a failure of the program


if __name__ == "__main__":
    raise SystemExit(main())
