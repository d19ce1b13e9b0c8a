"""Fixtures of the freshness tests: the SDK calls with this module's key and query, and a client
observed by a real OpenTelemetry SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from wm_middleware.emulator import EmulatorServer

from ..conftest import done as done
from ..conftest import wait_until as wait_until
from ..interception.conftest import Generation

# ``clock`` (a FakeClock), ``mode`` (sync, then async), ``emulator_server`` and ``emulator`` (the
# session's emulator, clean) are tests/conftest.py's; ``done`` and ``wait_until`` are importable
# from here as before.


async def read_until(read: Callable[[], Any], holds: Callable[[Any], object]) -> Any:
    """Read (``read()``, awaited if it returns an awaitable) every 10 ms until ``holds(answer)``;
    fail after 1500 reads (a bound, not a measurement). Status checks are made for reads: a
    test that waits for one reads meanwhile, as an agent does."""
    for _ in range(1500):
        answer = await done(read())
        if holds(answer):
            return answer
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


# -- the installed SDK generation ----------------------------------------------------------------
KEY = "sk-fresh"
TAG = "user-1"
QUERY = "what does the user like?"


class Sdk:
    """How a test drives the installed supermemory (3.x or 5.x), sync or async: the calls of
    :class:`~tests.interception.conftest.Generation`, with this module's key, query and facts."""

    def __init__(self, major: str) -> None:
        self.major = major
        self.generation = Generation(major)
        self.status_paths = (
            ("/v3/documents/processing", "/v3/documents/*")
            if major == "3"
            else ("/ns/*/document/*",)
        )

    def client(self, mode: str, base_url: str, api_key: str = KEY, **options: Any) -> Any:
        import supermemory

        cls = supermemory.AsyncSupermemory if mode == "async" else supermemory.Supermemory
        return cls(api_key=api_key, base_url=base_url, max_retries=0, **options)

    def search(self, client: Any, tag: str = TAG) -> Any:
        return self.generation.search(client, tag, query=QUERY)

    def profile(self, client: Any, tag: str = TAG) -> Any:
        return self.generation.profile(client, tag)

    def add(self, client: Any, content: str, tag: str = TAG) -> Any:
        return self.generation.add(client, tag, content=content)

    def reads(self, server: EmulatorServer) -> int:
        """Searches and profiles the emulator answered."""
        if self.major == "3":
            return server.count("POST", "/v4/search") + server.count("POST", "/v4/profile")
        return server.count("POST", "/ns/*/search") + server.count("POST", "/ns/*/profile")

    def status_checks(self, server: EmulatorServer) -> int:
        if self.major == "3":
            return server.count("GET", "/v3/documents/*")  # the processing list included
        return server.count("GET", "/ns/*/document/*")


@pytest.fixture(scope="session")
def sdk() -> Sdk:
    from importlib.metadata import version

    return Sdk(version("supermemory").split(".")[0])


def mentions(answer: Any, word: str) -> bool:
    """Whether a search or profile answer mentions ``word`` (any generation)."""
    dump = answer.model_dump() if hasattr(answer, "model_dump") else answer
    return word in str(dump)


class Observed:
    """A real OpenTelemetry SDK pair (spans in memory, metrics on demand) for one client."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))

    def wrap(self, client: Any, **options: Any) -> Any:
        import wm_middleware

        return wm_middleware.wrap(
            client,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **options,
        )

    def metric(self, name: str) -> list[Any]:
        """The data points of metric ``name`` collected now."""
        data = self.reader.get_metrics_data()
        points: list[Any] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points

    def pending(self) -> int:
        return int(sum(point.value for point in self.metric("wm.freshness.pending")))

    def status_checks(self, outcome: str | None = None) -> int:
        return int(
            sum(
                point.value
                for point in self.metric("wm.freshness.status_checks")
                if outcome is None or point.attributes.get("wm.freshness.outcome") == outcome
            )
        )


@pytest.fixture
def observed() -> Observed:
    return Observed()
