"""What the shadow mode shows: attributes on the miss's span, a counter by verdict, never the
query text unless content capture is on, and nothing at all (not even an import) when off."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import wm_middleware
from wm_middleware._telemetry.names import (
    CAPTURE_CONTENT_ENV,
    NEAR_COMPARISONS,
    NEAR_QUERY,
    NEAR_SIMILARITY,
    NEAR_VERDICT,
    NEAR_VETO,
)
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse

from ..conftest import python
from ..interception.conftest import KEY, TAG, Generation, done
from ..interception.conftest import generation as generation  # a fixture
from .test_shadow_mode import MEMORIES, search

CACHED = "when does the user meet Alice"
NEW = "when does the user meet Bob"


def same_vector(texts: Sequence[str]) -> list[list[float]]:
    return [[1.0, 0.0] for _ in texts]


class Seen:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def misses(self) -> list[dict[str, Any]]:
        return [
            dict(span.attributes or {})
            for span in self.spans.get_finished_spans()
            if (span.attributes or {}).get("wm.cache.result") == "miss"
        ]

    def verdicts(self) -> dict[str, int]:
        data = self.reader.get_metrics_data()
        found: dict[str, int] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == NEAR_COMPARISONS:
                        for point in metric.data.data_points:
                            found[str(point.attributes[NEAR_VERDICT])] = int(point.value)
        return found


@pytest.fixture
def seen(emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    emulator.seed(KEY, MEMORIES, container_tag=TAG)
    observed = Seen()
    yield observed
    wm_middleware.uninstrument()
    observed.tracer_provider.shutdown()
    observed.meter_provider.shutdown()


def instrument(seen: Seen, semantic: Any) -> None:
    wm_middleware.instrument(
        semantic=semantic,
        tracer_provider=seen.tracer_provider,
        meter_provider=seen.meter_provider,
    )


@pytest.mark.parametrize(
    ("vetoes", "verdict", "veto"), [((), "disagreed", None), (None, "vetoed", "name")]
)
async def test_the_miss_span_carries_similarity_verdict_and_veto(
    seen: Seen,
    emulator: EmulatorServer,
    generation: Generation,
    mode: str,
    vetoes: Any,
    verdict: str,
    veto: str | None,
) -> None:
    options: dict[str, Any] = {} if vetoes is None else {"vetoes": vetoes}
    instrument(seen, SemanticReuse(embed=same_vector, **options))
    client = generation.client(mode, emulator.base_url)
    await done(search(generation, client, CACHED))
    await done(search(generation, client, NEW))
    first, second = seen.misses()
    assert first[NEAR_VERDICT] == "none"
    assert NEAR_SIMILARITY not in first
    assert second[NEAR_VERDICT] == verdict
    assert second[NEAR_SIMILARITY] == pytest.approx(1.0)
    assert second.get(NEAR_VETO) == veto
    assert seen.verdicts() == {"none": 1, verdict: 1}
    shown = json.dumps([span.to_json() for span in seen.spans.get_finished_spans()])
    assert "Alice" not in shown
    assert "Bob" not in shown
    assert NEAR_QUERY not in shown


async def test_the_candidate_query_is_shown_only_with_content_capture(
    seen: Seen,
    emulator: EmulatorServer,
    generation: Generation,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    instrument(seen, "shadow")
    client = generation.client(mode, emulator.base_url)
    await done(search(generation, client, "What does the user drink?"))
    await done(search(generation, client, "what does the user drink"))
    assert seen.misses()[1][NEAR_QUERY] == "What does the user drink?"
    assert seen.misses()[1][NEAR_VERDICT] == "agreed"


def test_off_imports_nothing_of_the_shadow_mode(emulator: EmulatorServer) -> None:
    code = (
        "import wm_middleware, supermemory\n"
        "memory = wm_middleware.instrument()\n"
        "client = supermemory.Supermemory(api_key='sk-a', base_url=sys.argv[1], max_retries=0)\n"
        "search = (lambda: client.search.memories(q='tea', container_tag='u'))"
        " if supermemory.__version__.startswith('3.') else"
        " (lambda: client.search('u', query='tea'))\n"
        "search(); search()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('wm_middleware.semantic',"
        " 'wm_middleware._near')))\n"
        "print(json.dumps({'loaded': loaded, 'hits': memory.stats().hits}))\n"
    )
    done_run = python("import json, sys\n" + code, emulator.base_url)
    assert done_run.returncode == 0, done_run.stderr
    printed = json.loads(done_run.stdout.strip().splitlines()[-1])
    assert printed == {"loaded": [], "hits": 1}
    assert "wm_middleware.semantic" in sys.modules  # this process imported it, for the tests
