"""Checks for the observability stack: otel-collector.yaml and examples/observability/.

No Docker engine runs here, so this tests what can be tested for real:

* the collector, Jaeger, Prometheus, compose and Grafana files parse and are wired together;
* every PromQL expression in the Grafana dashboard returns data from a real ``prometheus``
  (Debian's package; the test skips without it) scraping metrics recorded through the
  OpenTelemetry SDK and the Python ``opentelemetry-exporter-prometheus`` exporter.

The metrics come from :func:`emit_library_metrics` (wm_middleware's own telemetry, recording
reads through the real supermemory 3.x SDK on SDK providers) or from the demo's own traffic.
Running ``prometheus`` and the dashboard's queries is ``telemetry/_prometheus_server``'s.
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import subprocess
import threading
import urllib.request
import weakref
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the stack's config files")

from .telemetry._prometheus_server import (  # noqa: E402
    DASHBOARD,
    load_dashboard,
    panel_queries,
    prometheus,
    scrape_job,
)

REPO = Path(__file__).resolve().parent.parent
COLLECTOR_CONFIG = REPO / "otel-collector.yaml"
STACK = REPO / "examples" / "observability"
COMPOSE = STACK / "docker-compose.yml"
PROMETHEUS_CONFIG = STACK / "prometheus.yml"
JAEGER_CONFIG = STACK / "jaeger" / "config.yaml"
GRAFANA_DATASOURCES = STACK / "grafana" / "provisioning" / "datasources" / "datasources.yml"
GRAFANA_PROVIDERS = STACK / "grafana" / "provisioning" / "dashboards" / "dashboards.yml"

# Prometheus names of the contract's instruments, as both the collector's prometheus
# exporter and the Python PrometheusMetricReader translate them (unit `s` -> `_seconds`,
# `{...}` annotations dropped, monotonic sums -> `_total`).
PROMETHEUS_NAMES = {
    "wm.cache.requests": "wm_cache_requests_total",
    "wm.search.duration": "wm_search_duration_seconds",
    "wm.cache.size": "wm_cache_size",
    "wm.cache.inflight": "wm_cache_inflight",
    "wm.cache.evictions": "wm_cache_evictions_total",
    "wm.cache.expirations": "wm_cache_expirations_total",
    "wm.cache.invalidations": "wm_cache_invalidations_total",
    "gen_ai.client.operation.duration": "gen_ai_client_operation_duration_seconds",
}
CACHED_JOB = "agent-cached"
UNCACHED_JOB = "agent-uncached"


def _load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


def _default(value: str) -> str:
    """The default of ``${env:VAR:-default}`` (how the configs say an address that the local
    stack substitutes), or ``value`` itself."""
    match = re.fullmatch(r"\$\{env:[A-Z0-9_]+:-(.*)\}", value)
    return match.group(1) if match else value


def _component_type(name: str) -> str:
    """`otlp_grpc/jaeger` -> `otlp_grpc` (collector component ids are type[/name])."""
    return name.split("/", 1)[0]


def _go_duration_seconds(text: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    total = 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    assert "".join(n + u for n, u in parts) == text, f"not a Go duration: {text!r}"
    assert parts, f"empty duration: {text!r}"
    for number, unit in parts:
        total += float(number) * units[unit]
    return total


# --------------------------------------------------------------------------- collector


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    return _load_yaml(COLLECTOR_CONFIG)


def test_collector_pipelines_reference_defined_components(collector: dict[str, Any]) -> None:
    pipelines = collector["service"]["pipelines"]
    assert {"traces", "metrics"} <= {_component_type(p) for p in pipelines}
    defined = {
        kind: set(collector.get(kind) or {})
        for kind in ("receivers", "processors", "exporters", "connectors")
    }
    connectors = defined["connectors"]
    used_as_exporter: set[str] = set()
    used_as_receiver: set[str] = set()
    for name, pipeline in pipelines.items():
        assert pipeline.get("receivers"), f"pipeline {name} has no receivers"
        assert pipeline.get("exporters"), f"pipeline {name} has no exporters"
        for receiver in pipeline["receivers"]:
            assert receiver in defined["receivers"] | connectors, f"{name}: unknown {receiver}"
            if receiver in connectors:
                used_as_receiver.add(receiver)
        for processor in pipeline.get("processors", []):
            assert processor in defined["processors"], f"{name}: unknown processor {processor}"
        for exporter in pipeline["exporters"]:
            assert exporter in defined["exporters"] | connectors, f"{name}: unknown {exporter}"
            if exporter in connectors:
                used_as_exporter.add(exporter)
    assert used_as_exporter == connectors, "every connector must be a pipeline exporter"
    assert used_as_receiver == connectors, "every connector must be a pipeline receiver"


def test_collector_spanmetrics_buckets_equal_the_library_histogram_buckets(
    collector: dict[str, Any],
) -> None:
    """The collector config states the buckets on its own (as Go durations), so the library's
    table is pinned by a second, independently written copy: a change must touch both."""
    from wm_middleware._telemetry import DURATION_BUCKETS

    histogram = collector["connectors"]["span_metrics"]["histogram"]
    buckets = tuple(_go_duration_seconds(b) for b in histogram["explicit"]["buckets"])
    assert buckets == pytest.approx(DURATION_BUCKETS)


def test_collector_receivers_bind_all_interfaces(collector: dict[str, Any]) -> None:
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert _default(protocols["grpc"]["endpoint"]) == "0.0.0.0:4317"
    assert _default(protocols["http"]["endpoint"]) == "0.0.0.0:4318"


def test_collector_processors_and_jaeger_export(collector: dict[str, Any]) -> None:
    assert {"memory_limiter", "batch"} <= set(collector["processors"])
    for pipeline in collector["service"]["pipelines"].values():
        assert pipeline["processors"][0] == "memory_limiter", "memory_limiter must come first"
    exporters = collector["exporters"]
    # collector-contrib >= 0.144 names: otlp_grpc / otlp_http (otlp / otlphttp are deprecated).
    assert not any(_component_type(e) in {"otlp", "otlphttp"} for e in exporters)
    jaeger = [e for e in exporters if _component_type(e) == "otlp_grpc"]
    assert len(jaeger) == 1
    assert _default(exporters[jaeger[0]]["endpoint"]) == "jaeger:4317"
    assert exporters[jaeger[0]]["tls"]["insecure"] is True
    assert jaeger[0] in collector["service"]["pipelines"]["traces"]["exporters"]


def test_collector_spanmetrics_connector(collector: dict[str, Any]) -> None:
    spanmetrics = collector["connectors"]["span_metrics"]
    dimensions = [d["name"] for d in spanmetrics["dimensions"]]
    assert "wm.cache.result" in dimensions
    assert "supermemory.operation" in dimensions
    buckets = [_go_duration_seconds(b) for b in spanmetrics["histogram"]["explicit"]["buckets"]]
    assert buckets == sorted(buckets)
    assert buckets[0] < 0.001, "cache hits need a first bucket below 1 ms"
    pipelines = collector["service"]["pipelines"]
    assert "span_metrics" in pipelines["traces"]["exporters"]
    assert "span_metrics" in pipelines["metrics"]["receivers"]


def test_collector_prometheus_exporter(collector: dict[str, Any]) -> None:
    prometheus = collector["exporters"]["prometheus"]
    assert _default(prometheus["endpoint"]) == "0.0.0.0:8889"
    assert prometheus["enable_open_metrics"] is True
    assert prometheus["resource_to_telemetry_conversion"]["enabled"] is True
    assert collector["service"]["pipelines"]["metrics"]["exporters"] == ["prometheus"]


# --------------------------------------------------------------------------- compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load_yaml(COMPOSE)


def _bind_mounts(service: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    for volume in service.get("volumes", []):
        source, target = str(volume).split(":")[:2]
        if source.startswith((".", "/")):
            yield (STACK / source).resolve(), target


def test_compose_bind_mounts_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"otel-collector", "jaeger", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        for source, target in _bind_mounts(service):
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"


def test_compose_images_are_pinned(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        image = service["image"]
        assert ":" in image, f"{name}: unpinned {image}"
        assert not image.endswith(":latest"), f"{name}: unpinned {image}"
    collector_image = services["otel-collector"]["image"]
    assert collector_image.startswith("otel/opentelemetry-collector-contrib:")
    major, minor = (int(x) for x in collector_image.rsplit(":", 1)[1].split(".")[:2])
    assert (major, minor) >= (0, 144), "otlp_grpc exporter name needs collector-contrib >= 0.144"
    assert re.fullmatch(r"jaegertracing/jaeger:2\.\d+\.\d+", services["jaeger"]["image"])


def test_compose_pins_the_releases_the_stack_session_builds(compose: dict[str, Any]) -> None:
    """The images are the releases that ``nox -s stack`` builds from ``stack/`` and runs the
    project's config files with; the Go modules pin the same releases."""
    from stack import COLLECTOR, JAEGER

    services = compose["services"]
    collector_image = f"otel/opentelemetry-collector-contrib:{COLLECTOR.release}"
    assert services["otel-collector"]["image"] == collector_image
    assert services["jaeger"]["image"] == f"jaegertracing/jaeger:{JAEGER.release}"
    collector_mod = (COLLECTOR.directory / "go.mod").read_text(encoding="utf-8")
    contrib = re.findall(r"opentelemetry-collector-contrib/\S+ (v\S+)", collector_mod)
    assert contrib
    assert set(contrib) == {f"v{COLLECTOR.release}"}
    # The module's v1.75.0 is the commit tagged v2.12.0 (later v2 tags have no v1 twin).
    assert JAEGER.release == "2.12.0"
    jaeger_mod = (JAEGER.directory / "go.mod").read_text(encoding="utf-8")
    assert re.search(r"^\s*github.com/jaegertracing/jaeger v1\.75\.0\b", jaeger_mod, re.MULTILINE)
    assert re.search(r"^tool github.com/jaegertracing/jaeger/cmd/jaeger$", jaeger_mod, re.MULTILINE)


def test_the_telemetry_page_says_what_to_compare_and_links_the_p95_graph() -> None:
    """The page's ready link is the query the stack session checks, on the default port."""
    from stack import MONITOR_OPERATION, p95_graph_url

    page = (REPO / "docs" / "telemetry.md").read_text(encoding="utf-8")
    assert f"**`{MONITOR_OPERATION}`**" in page
    assert p95_graph_url("http://localhost:9090") in page
    assert "python3 -m stack" in page


def test_compose_wiring(compose: dict[str, Any]) -> None:
    services = compose["services"]
    collector = services["otel-collector"]
    mounts = dict(_bind_mounts(collector))
    assert mounts.get(COLLECTOR_CONFIG.resolve()) is not None, (
        "collector must mount the repo config"
    )
    config_path = mounts[COLLECTOR_CONFIG.resolve()]
    assert any(config_path in str(arg) for arg in collector.get("command", []))
    assert {"4317:4317", "4318:4318"} <= {str(p) for p in collector["ports"]}

    jaeger = services["jaeger"]
    assert "16686:16686" in {str(p) for p in jaeger["ports"]}
    jaeger_mounts = dict(_bind_mounts(jaeger))
    assert jaeger_mounts.get(JAEGER_CONFIG.resolve()) in jaeger["command"]

    prometheus = services["prometheus"]
    assert "--enable-feature=exemplar-storage" in prometheus["command"]
    assert dict(_bind_mounts(prometheus)).get(PROMETHEUS_CONFIG.resolve())

    grafana = services["grafana"]
    env = dict(str(e).split("=", 1) for e in grafana["environment"])
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Admin"
    grafana_mounts = {target: source for source, target in _bind_mounts(grafana)}
    assert grafana_mounts["/etc/grafana/provisioning/datasources"] == GRAFANA_DATASOURCES.parent
    assert grafana_mounts["/etc/grafana/provisioning/dashboards"] == GRAFANA_PROVIDERS.parent
    providers = _load_yaml(GRAFANA_PROVIDERS)["providers"]
    provider_paths = {p["options"]["path"] for p in providers}
    assert len(provider_paths) == 1
    dashboards_dir = grafana_mounts[provider_paths.pop()]
    assert (dashboards_dir / DASHBOARD.name).resolve() == DASHBOARD.resolve()


def test_prometheus_config_scrapes_collector() -> None:
    config = _load_yaml(PROMETHEUS_CONFIG)
    jobs = config["scrape_configs"]
    collector_jobs = [j for j in jobs if "otel-collector:8889" in j["static_configs"][0]["targets"]]
    assert len(collector_jobs) == 1
    # job = service.name as set by the collector's exporter (the dashboard's $job variable).
    assert collector_jobs[0]["honor_labels"] is True
    promtool = shutil.which("promtool")
    if promtool:
        subprocess.run([promtool, "check", "config", str(PROMETHEUS_CONFIG)], check=True)


def test_jaeger_config_wires_spm_to_prometheus(collector: dict[str, Any]) -> None:
    config = _load_yaml(JAEGER_CONFIG)
    query = config["extensions"]["jaeger_query"]["storage"]
    storage = config["extensions"]["jaeger_storage"]
    assert query["traces"] in storage["backends"]
    prometheus = storage["metric_backends"][query["metrics"]]["prometheus"]
    assert _default(prometheus["endpoint"]) == "http://prometheus:9090"
    # Must match the span_metrics connector's namespace and histogram unit.
    spanmetrics = collector["connectors"]["span_metrics"]
    assert prometheus["metric_namespace"] == spanmetrics["namespace"].replace(".", "_")
    assert prometheus["latency_unit"] == spanmetrics["histogram"]["unit"]
    protocols = config["receivers"]["otlp"]["protocols"]
    assert _default(protocols["grpc"]["endpoint"]) == "0.0.0.0:4317"


def test_grafana_datasources() -> None:
    datasources = {d["uid"]: d for d in _load_yaml(GRAFANA_DATASOURCES)["datasources"]}
    assert datasources["prometheus"]["type"] == "prometheus"
    assert datasources["prometheus"]["url"] == "http://prometheus:9090"
    assert datasources["jaeger"]["type"] == "jaeger"
    assert datasources["jaeger"]["url"] == "http://jaeger:16686"
    used = {
        node["uid"]
        for node in _walk(load_dashboard())
        if isinstance(node, dict) and "uid" in node and "type" in node
    }
    assert used <= set(datasources), f"dashboard uses unknown datasources {used - set(datasources)}"


# --------------------------------------------------------------------------- dashboard


def _walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_dashboard_panels() -> None:
    dashboard = load_dashboard()
    assert dashboard["title"] == "Working memory: cached vs uncached"
    panels: dict[str, dict[str, Any]] = {p["title"].lower(): p for p in dashboard["panels"]}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))

    def panel(*words: str) -> dict[str, Any]:
        found = [p for title, p in panels.items() if all(w in title for w in words)]
        assert found, f"no panel titled with {words}"
        return found[0]

    latency = " ".join(t["expr"] for t in panel("latency")["targets"])
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}," in latency
    assert "wm_search_duration_seconds_bucket" in latency
    assert "by (job, wm_cache_result, le)" in latency
    hit_ratio = panel("hit ratio")["targets"][0]["expr"]
    assert 'wm_cache_result="hit"' in hit_ratio
    saved_panel = panel("upstream", "saved")
    saved = saved_panel["targets"][0]["expr"]
    assert 'wm_cache_result=~"hit|coalesced"' in saved
    # An exact count: increase() extrapolates to the range edges and overstates short runs.
    assert "increase(" not in saved
    assert "exact" in saved_panel["title"].lower()
    assert 'wm_cache_result="coalesced"' in panel("coalesced calls")["targets"][0]["expr"]
    assert "wm_cache_size" in panel("cache size")["targets"][0]["expr"]
    assert "wm_cache_evictions_total" in panel("evictions")["targets"][0]["expr"]

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["job"]["multi"]
    assert variables["job"]["includeAll"]
    for title, expr in panel_queries(dashboard):
        assert '"$job"' in expr, f"{title}: query ignores the $job variable"


def test_dashboard_uses_contract_metric_names() -> None:
    known = set(PROMETHEUS_NAMES.values()) | {
        PROMETHEUS_NAMES[histogram] + suffix
        for histogram in ("wm.search.duration", "gen_ai.client.operation.duration")
        for suffix in ("_bucket", "_sum", "_count")
    }
    labels = {"wm_cache_result", "gen_ai_operation_name"}
    for title, expr in panel_queries(load_dashboard()):
        names = set(re.findall(r"\b((?:wm|gen_ai)_[a-z_]+)\b", expr)) - labels
        assert names, f"{title}: no wm_* or gen_ai_* metric"
        assert names <= known, f"{title}: unknown metrics {names - known}"


# --------------------------------------------------------------------------- real Prometheus


@dataclass
class _LibraryTelemetry:
    """Instruments plus the plain counters the observable instruments report."""

    requests: Any
    duration: Any
    rng: random.Random
    size: int = 0
    inflight: int = 0
    evictions: int = 0
    expirations: int = 0
    invalidations: int = 0


_TELEMETRY: weakref.WeakKeyDictionary[Any, _LibraryTelemetry] = weakref.WeakKeyDictionary()


def emit_library_metrics(meter_provider: Any, *, cached: bool = True) -> None:
    """Drive one round of memory reads through wm_middleware and the real supermemory 3.x SDK.

    The library records its own metrics on ``meter_provider``: a ``Runtime`` (working memory +
    ``Telemetry`` on that provider) per provider, applied to real 3.x clients with the 3.x
    adapter's ``wrap`` (two providers run at once here, and ``instrument()`` is one per
    process), against one in-process emulator. A round makes hits, misses, coalesced calls,
    an upstream error, expirations (a fake clock), evictions (a small cache) and an
    invalidation (a write). ``cached=False`` is the uncached run: ``cache=False``, so every read
    goes upstream and is recorded as ``wm.cache.result="bypass"``.
    """
    import asyncio
    import atexit
    import importlib.metadata
    import itertools

    if not importlib.metadata.version("supermemory").startswith("3."):
        pytest.skip("drives the supermemory 3.x SDK")
    import supermemory

    from wm_middleware import WorkingMemory
    from wm_middleware._adapters import sdk3
    from wm_middleware._runtime import Runtime
    from wm_middleware._telemetry import Telemetry
    from wm_middleware.emulator import EmulatorServer

    shared: dict[str, Any] = emit_library_metrics.__dict__.setdefault("shared", {})
    if "server" not in shared:  # one emulator for every provider, each its own tenant
        server = EmulatorServer(seed=7).start()
        atexit.register(server.stop)
        shared["server"] = server
        shared["states"] = weakref.WeakKeyDictionary()
        shared["tenants"] = itertools.count()
    server = shared["server"]
    state = shared["states"].get(meter_provider)
    if state is None:
        api_key = f"sk-observability-{next(shared['tenants'])}"
        server.seed(
            api_key, ["User has a severe peanut allergy", "User likes tea"], container_tag="u1"
        )
        now = [0.0]
        memory: WorkingMemory[Any] = WorkingMemory(max_entries=4, ttl=60.0, clock=lambda: now[0])
        runtime = Runtime(memory, Telemetry(None, meter_provider), cache=cached)
        client = supermemory.Supermemory(api_key=api_key, base_url=server.base_url, max_retries=0)
        state = {
            "key": api_key,
            "now": now,
            "runtime": runtime,
            "client": sdk3.wrap(client, runtime),
            "round": itertools.count(),
        }
        shared["states"][meter_provider] = state
    n = next(state["round"])
    state["now"][0] += 61.0  # last round's entries expire: found expired below
    client = state["client"]
    reads: Iterable[Callable[[str], Any]] = (
        lambda q: client.search.memories(q=q, container_tag="u1"),
        lambda q: client.profile(container_tag="u1", q=q),
    )
    for read in reads:
        for _ in range(6):
            read("peanut")  # a miss (after an expiration), then hits
        read(f"round {n}")  # a miss; a new key each round keeps the LRU evicting

    async def coalesce() -> None:
        async_client = supermemory.AsyncSupermemory(
            api_key=state["key"], base_url=server.base_url, max_retries=0
        )
        wrapped = sdk3.wrap(async_client, state["runtime"])
        try:
            query = f"together {n}"
            await asyncio.gather(
                *[wrapped.search.memories(q=query, container_tag="u1") for _ in range(3)],
                *[wrapped.profile(container_tag="u1", q=query) for _ in range(3)],
            )
        finally:
            await async_client.close()

    asyncio.run(coalesce())  # per operation: one miss (leader) + two coalesced
    server.fail_next(1, 500, path="/v4/search", method="POST")
    try:
        client.search.memories(q=f"failing {n}", container_tag="u1")
    except supermemory.InternalServerError:
        pass  # recorded with error.type
    client.add(content=f"note {n}", container_tag="u1")  # invalidates u1's entries


_EMIT_LOCK = threading.Lock()


@dataclass
class _Exporter:
    job: str
    port: int
    stop: Callable[[], None]


def _serve_metrics(job: str) -> tuple[Any, int, Callable[[], None]]:
    """An SDK MeterProvider + PrometheusMetricReader served on a loopback port."""
    prometheus_client = pytest.importorskip("prometheus_client")
    exporter_module = pytest.importorskip(
        "opentelemetry.exporter.prometheus", reason="opentelemetry-exporter-prometheus missing"
    )
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    registry = prometheus_client.CollectorRegistry(auto_describe=True)
    reader = exporter_module.PrometheusMetricReader(registry=registry)
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": job})
    )
    server, thread = prometheus_client.start_http_server(0, addr="127.0.0.1", registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        provider.shutdown()

    return provider, int(server.server_port), stop


def _start_exporter(job: str, *, cached: bool) -> _Exporter:
    """Metrics of :func:`emit_library_metrics` rounds, driven every 0.2 s, served for scraping."""
    provider, port, stop_serving = _serve_metrics(job)
    done = threading.Event()

    def emit() -> None:
        # One at a time: the two runs share the emulator, and one run's injected 500 must not
        # reach the other's request.
        with _EMIT_LOCK:
            emit_library_metrics(provider, cached=cached)

    def drive() -> None:  # keep counters moving so rate() is non-zero
        while not done.wait(0.2):
            emit()

    emit()
    driver = threading.Thread(target=drive, name=f"emit-{job}", daemon=True)
    driver.start()

    def stop() -> None:
        done.set()
        driver.join(timeout=5)
        stop_serving()

    return _Exporter(job=job, port=port, stop=stop)


DEMO_SECONDS = 120.0
"""A bound: the demo plays until the test has its data and stops it, well before this."""


async def _until_stopped(demo: Coroutine[Any, Any, Any], stop: threading.Event) -> None:
    """Run ``demo`` until it ends or ``stop`` is set, then cancel it (a cancelled run raises
    nothing; anything else it raises is raised here)."""
    import asyncio

    task = asyncio.ensure_future(demo)
    while not task.done() and not stop.is_set():
        await asyncio.wait({task}, timeout=0.1)
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    elif not task.cancelled():
        task.result()


def _start_demo() -> list[_Exporter]:
    """``wm-middleware demo --duration``'s own traffic: both deployments side by side, each
    recording the library's metrics on a provider served for scraping, until the test stops it."""
    import asyncio
    import importlib.util

    if importlib.util.find_spec("supermemory_openai") is None:
        pytest.skip("the demo needs supermemory 3.x and supermemory-openai-sdk")
    from wm_middleware.demo.runner import DemoOptions, run_demo

    served = {
        name: _serve_metrics(job)
        for name, job in (("cached", CACHED_JOB), ("uncached", UNCACHED_JOB))
    }
    options = DemoOptions(turns=4, latency_ms=20.0, duration=DEMO_SECONDS)
    failures: list[BaseException] = []
    stopped = threading.Event()

    def play() -> None:
        meters = {n: s[0] for n, s in served.items()}
        try:
            asyncio.run(_until_stopped(run_demo(options, meter_providers=meters), stopped))
        except BaseException as error:  # reported by stop()
            failures.append(error)

    player = threading.Thread(target=play, name="demo", daemon=True)
    player.start()

    def stopper(stop_serving: Callable[[], None]) -> Callable[[], None]:
        def stop() -> None:
            stopped.set()
            player.join(timeout=60)
            assert not player.is_alive(), "the demo did not stop"
            stop_serving()
            assert not failures, failures

        return stop

    return [
        _Exporter(job=job, port=served[name][1], stop=stopper(served[name][2]))
        for name, job in (("cached", CACHED_JOB), ("uncached", UNCACHED_JOB))
    ]


@pytest.fixture
def exporters() -> Iterator[list[_Exporter]]:
    started: list[_Exporter] = []
    try:
        started.append(_start_exporter(CACHED_JOB, cached=True))
        started.append(_start_exporter(UNCACHED_JOB, cached=False))
        yield started
    finally:
        for exporter in started:
            exporter.stop()


@pytest.fixture(params=["synthetic driver", "demo traffic"])
def traffic(request: pytest.FixtureRequest) -> Iterator[list[_Exporter]]:
    """The two jobs' metrics: from the synthetic driver, or from the demo's own two
    deployments (``--duration``)."""
    if request.param == "synthetic driver":
        yield request.getfixturevalue("exporters")
        return
    started = _start_demo()
    try:
        yield started
    finally:
        for exporter in started:
            exporter.stop()


def test_python_exporter_names(exporters: list[_Exporter]) -> None:
    """The Python exporter's exposition carries the names the dashboard queries."""
    with urllib.request.urlopen(f"http://127.0.0.1:{exporters[0].port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for name in PROMETHEUS_NAMES.values():
        assert re.search(rf"^# TYPE {name} ", text, re.MULTILINE), f"{name} missing:\n{text}"
    first_bucket = r'^wm_search_duration_seconds_bucket\{[^}]*le="5e-05"'
    assert re.search(first_bucket, text, re.MULTILINE), "the 50 us bucket is missing"


def test_dashboard_queries_return_data_from_real_prometheus(
    traffic: list[_Exporter], tmp_path: Path
) -> None:
    scrapes = [scrape_job(exporter.job, exporter.port) for exporter in traffic]
    with prometheus(tmp_path, scrapes, "--enable-feature=exemplar-storage") as server:
        server.wait_for_dashboard_data()
        # Both runs are there to compare, told apart by job (the OTel service.name).
        assert server.jobs("sum by (job) (wm_cache_requests_total)") == {CACHED_JOB, UNCACHED_JOB}
        bypass = 'sum by (job) (wm_cache_requests_total{wm_cache_result="bypass"})'
        assert server.jobs(bypass) == {UNCACHED_JOB}
