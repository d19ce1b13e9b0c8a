"""``instrument()`` imports no client library: each is patched when the application imports it.

Every case of ``instrument()`` runs in a fresh interpreter, the only place where "not imported
yet" is true, against the emulator of this process on loopback. The post-import hooks that
patch a library on its import are checked in this process, each on a module of its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from wm_middleware._adapters import import_hooks
from wm_middleware.emulator import EmulatorServer

from ..interception.conftest import Generation

CLIENT_LIBRARIES = ("supermemory", "supermemory_openai", "openai")
# What instrument() leaves for the first client library's import to load: the HTTP stack, wrapt,
# OpenTelemetry (the API and the instrumentation package, whose BaseInstrumentor only the
# opentelemetry-instrument loader needs), asyncio, and the modules that need them.
HEAVY = (
    *CLIENT_LIBRARIES,
    "httpx",
    "wrapt",
    "asyncio",
    "opentelemetry.trace",
    "opentelemetry.metrics",
    "opentelemetry.instrumentation",
    "importlib.metadata",
    "wm_middleware._runtime",
    "wm_middleware._telemetry",
    "wm_middleware._loader",
)

_SEARCH = """
import supermemory
client = supermemory.Supermemory(api_key="sk-lazy", base_url=sys.argv[1], max_retries=0)
if supermemory.__version__.startswith("3."):
    search = lambda: client.search.memories(q="tea", container_tag="user-1")
else:
    search = lambda: client.search("user-1", query="tea")
search()
search()
"""


def _run(code: str, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WM_MIDDLEWARE_"))}
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys\n" + code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


TwoSearches = Callable[[str, str], tuple[dict[str, Any], int]]


@pytest.fixture
def two_searches(emulator: EmulatorServer, generation: Generation) -> TwoSearches:
    """``two_searches(before, after)``: what a fresh interpreter prints running ``before``, two
    identical searches (imports of the SDK included) and ``after``; and the searches the seeded
    emulator received."""
    generation.seed(emulator)

    def run(before: str, after: str) -> tuple[dict[str, Any], int]:
        found = _run("import wm_middleware\n" + before + _SEARCH + after, emulator.base_url)
        return found, generation.searches(emulator)

    return run


def test_instrument_imports_nothing_heavy_and_a_library_imported_later_is_patched(
    two_searches: TwoSearches,
) -> None:
    found = two_searches(
        "memory = wm_middleware.instrument()\n"
        f"before = sorted(m for m in {HEAVY!r} if m in sys.modules)\n",
        "stats = memory.stats()\n"
        "print(json.dumps({'before': before, 'hits': stats.hits, 'misses': stats.misses}))\n",
    )
    assert found == ({"before": [], "hits": 1, "misses": 1}, 1)


# What instrument() never needs to patch a client library already imported: the loader's
# instrumentation package, the shared tier (its import-light URL schemes apart, which the settings
# check a ``shared`` URL with; redis-py never), the emulator, the OTLP set-up, the adapters of
# libraries not imported or not asked for, and the stats dataclass.
NOT_FOR_PATCHING = (
    "opentelemetry.instrumentation",
    "opentelemetry.sdk",
    "wm_middleware._loader",
    "redis",
    "wm_middleware._redis.tier",
    "wm_middleware._redis.connections",
    "wm_middleware._redis.protocol",
    "wm_middleware.emulator",
    "wm_middleware.demo",
    "wm_middleware._telemetry.otlp",
    "wm_middleware._adapters.httpx_transport",
    "wm_middleware._adapters.openai_middleware",
    "wm_middleware._core.stats",
)


def test_with_the_sdk_imported_first_instrument_loads_only_what_the_patch_needs() -> None:
    """Most applications import the SDK first: ``instrument()`` then patches it at once and loads
    no module that the other order (``instrument()``, then the import) does not load too."""
    loaded = "sorted(set(sys.modules) - before)"
    first = _run(
        "import supermemory\n"
        "before = set(sys.modules)\n"
        "import wm_middleware\n"
        "memory = wm_middleware.instrument()\n"
        f"print(json.dumps({loaded}))\n"
    )
    later = _run(
        "before = set(sys.modules)\n"
        "import wm_middleware\n"
        "memory = wm_middleware.instrument()\n"
        "import supermemory\n"
        f"print(json.dumps({loaded}))\n"
    )
    assert "wm_middleware._adapters.sdk3" in first  # the patch is in place
    assert sorted(set(first) - set(later)) == []
    assert [name for name in first if name.startswith(NOT_FOR_PATCHING)] == []


# What an application setting up tracing runs: the global provider, its spans kept in memory.
SET_A_TRACER_PROVIDER = (
    "from opentelemetry import trace\n"
    "from opentelemetry.sdk.trace import TracerProvider, export\n"
    "from opentelemetry.sdk.trace.export import in_memory_span_exporter\n"
    "exporter = in_memory_span_exporter.InMemorySpanExporter()\n"
    "provider = TracerProvider()\n"
    "provider.add_span_processor(export.SimpleSpanProcessor(exporter))\n"
    "trace.set_tracer_provider(provider)\n"
)

# What the patch of an SDK imported already leaves to the first patched call: the runtime's
# freshness and telemetry modules, and OpenTelemetry's API with them (benchmarks/bench_startup.py).
MADE_BY_THE_FIRST_CALL = (
    "wm_middleware._freshness",
    "wm_middleware._telemetry",
    "opentelemetry.trace",
    "opentelemetry.metrics",
)


def test_with_the_sdk_imported_first_the_first_call_makes_the_runtime_and_is_cached_and_traced(
    two_searches: TwoSearches,
) -> None:
    # The tracer provider is set after instrument(), before the first call: the runtime made
    # then traces through it, as one made by instrument() does through the global provider.
    found = two_searches(
        f"later = {list(MADE_BY_THE_FIRST_CALL)!r}\n"
        "loaded = lambda names: [name for name in names if name in sys.modules]\n"
        "import supermemory\n"
        "memory = wm_middleware.instrument()\n"
        "deferred = loaded(later)\n" + SET_A_TRACER_PROVIDER + "runtime = loaded(later[:2])\n",
        "spans = exporter.get_finished_spans()\n"
        "results = [span.attributes.get('wm.cache.result') for span in spans]\n"
        "stats = memory.stats()\n"
        "wm_middleware.uninstrument()\n"
        "import wrapt\n"
        "left = [\n"
        "    name for module in list(sys.modules.values())\n"
        "    if getattr(module, '__name__', '').startswith('supermemory')\n"
        "    for name, value in vars(module).items() if isinstance(value, type)\n"
        "    for name, attribute in vars(value).items()\n"
        "    if isinstance(attribute, wrapt.FunctionWrapper)\n"
        "]\n"
        "print(json.dumps({'deferred': deferred, 'runtime': runtime, 'results': results,\n"
        "                  'hits': stats.hits, 'misses': stats.misses, 'left': left,\n"
        "                  'made': loaded(later)}))\n",
    )
    assert found == (
        {
            "deferred": [],  # instrument() put the patches in place and made no runtime
            "runtime": [],  # nor did setting up tracing
            "results": ["miss", "hit"],
            "hits": 1,
            "misses": 1,
            "left": [],  # uninstrument() put every original back
            "made": list(MADE_BY_THE_FIRST_CALL),
        },
        1,
    )


# Standard-library modules that cost an application tens of milliseconds of start-up, which
# neither ``import wm_middleware`` nor ``instrument()`` needs (benchmarks/bench_startup.py).
SLOW_STDLIB = ("typing", "re", "enum", "dataclasses", "inspect", "logging", "copy")


def test_instrument_loads_no_slow_standard_library_module_until_it_is_needed() -> None:
    found = _run(
        "before = set(sys.modules)\n"
        "import wm_middleware\n"
        "memory = wm_middleware.instrument()\n"
        f"loaded = sorted(m for m in {SLOW_STDLIB!r} if m in set(sys.modules) - before)\n"
        "memory.search('tea', lambda: ['green'])\n"
        "hit = memory.search('tea', lambda: ['black'])\n"
        "after_a_hit = sorted(m for m in ('dataclasses', 'copy') if m in sys.modules)\n"
        "stats = memory.stats()\n"
        "print(json.dumps({'loaded': loaded, 'hit': hit, 'after_a_hit': after_a_hit,\n"
        "                  'stats': [type(stats).__name__, stats.hits, stats.misses],\n"
        "                  'dataclasses': 'dataclasses' in sys.modules}))\n"
    )
    assert found == {
        "loaded": [],  # each of them is imported where first needed (see wm_middleware._core)
        "hit": ["green"],
        "after_a_hit": [],
        "stats": ["CacheStats", 1, 1],
        "dataclasses": True,  # CacheStats is a dataclass, loaded by the first stats()
    }


def test_without_logging_imported_a_debug_line_imports_nothing_and_a_warning_is_printed() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from wm_middleware import _logs\n"
            "_logs.debug('wm_middleware: not shown %s', 1)\n"
            "_logs.info('wm_middleware: not shown either')\n"
            "print('logging' in sys.modules)\n"
            "_logs.logger().warning('wm_middleware: shown %s', 2)\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert done.stderr.strip() == "wm_middleware: shown 2"


def test_with_logging_configured_debug_and_info_lines_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from wm_middleware import _logs

    with caplog.at_level(logging.DEBUG, logger="wm_middleware"):
        _logs.debug("wm_middleware: debug %s", 1)
        _logs.info("wm_middleware: info %s", 2)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "wm_middleware: debug 1"),
        (logging.INFO, "wm_middleware: info 2"),
    ]


def test_the_suppression_check_imports_no_opentelemetry_instrumentation(
    two_searches: TwoSearches,
) -> None:
    # opentelemetry.instrumentation loads the propagators' entry points: neither the start-up
    # nor the first read pays for it (the check reads the context key it shares).
    found = two_searches(
        "memory = wm_middleware.instrument()\n"
        "import supermemory\n"
        "with_the_library = 'opentelemetry.instrumentation' in sys.modules\n",
        "after_a_read = 'opentelemetry.instrumentation' in sys.modules\n"
        "print(json.dumps({'import': with_the_library, 'read': after_a_read,"
        " 'hits': memory.stats().hits}))\n",
    )
    assert found == ({"import": False, "read": False, "hits": 1}, 1)


def test_uninstrument_before_the_import_leaves_the_library_unpatched(
    two_searches: TwoSearches,
) -> None:
    found = two_searches(
        "memory = wm_middleware.instrument()\nwm_middleware.uninstrument()\n",
        "import wrapt\n"
        "patched = [\n"
        "    name for name, value in vars(supermemory).items()\n"
        "    if isinstance(value, type)\n"
        "    for attribute in vars(value).values()\n"
        "    if isinstance(attribute, wrapt.FunctionWrapper)\n"
        "]\n"
        "print(json.dumps({'lookups': memory.stats().lookups, 'patched': patched}))\n",
    )
    assert found == ({"lookups": 0, "patched": []}, 2)


def test_instrument_again_before_the_import_patches_once(two_searches: TwoSearches) -> None:
    found = two_searches(
        "wm_middleware.instrument()\n"
        "wm_middleware.uninstrument()\n"
        "memory = wm_middleware.instrument(ttl=30.0)\n",
        "stats = memory.stats()\nprint(json.dumps({'hits': stats.hits, 'misses': stats.misses}))\n",
    )
    assert found == ({"hits": 1, "misses": 1}, 1)


@pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None, reason="needs supermemory-openai-sdk"
)
def test_the_openai_middleware_is_patched_when_the_application_imports_it() -> None:
    found = _run(
        "import wm_middleware, wrapt\n"
        "wm_middleware.instrument()\n"
        "before = [m for m in ('openai', 'supermemory_openai') if m in sys.modules]\n"
        "from supermemory_openai import middleware\n"
        "search = lambda: vars(middleware)['supermemory_profile_search']\n"
        "patched = isinstance(search(), wrapt.FunctionWrapper)\n"
        "wm_middleware.uninstrument()\n"
        "after = isinstance(search(), wrapt.FunctionWrapper)\n"
        "print(json.dumps({'before': before, 'patched': patched, 'after': after}))\n"
    )
    assert found == {"before": [], "patched": True, "after": False}


# -- the post-import hooks themselves (in this process: each case imports a module of its own) --
@pytest.fixture
def new_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Write a module nobody has imported yet; its name is unique to the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(source: str) -> str:
        name = f"wm_hooked_{uuid.uuid4().hex}"
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


def test_a_hook_runs_once_after_the_module_ran_and_the_module_sees_its_own_loader(
    new_module: Callable[[str], str],
) -> None:
    name = new_module("loader = type(__loader__).__name__  # while the module runs\n")
    seen: list[str] = []
    import_hooks.when_imported(name, lambda module: seen.append(module.loader))
    module = importlib.import_module(name)
    importlib.reload(module)
    assert seen == ["SourceFileLoader"]
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    assert type(module.__spec__.loader).__name__ == "SourceFileLoader"


def test_a_hook_for_an_imported_module_runs_at_once() -> None:
    seen: list[str] = []
    import_hooks.when_imported("json", lambda module: seen.append(module.__name__))
    assert seen == ["json"]


def test_a_discarded_hook_never_runs(new_module: Callable[[str], str]) -> None:
    name = new_module("")
    seen: list[str] = []

    def hook(module: ModuleType) -> None:
        seen.append(module.__name__)

    import_hooks.when_imported(name, hook)
    import_hooks.discard(name, hook)
    importlib.import_module(name)
    assert seen == []


def test_a_failed_import_runs_no_hook_and_the_next_successful_one_does(
    new_module: Callable[[str], str], tmp_path: Path
) -> None:
    name = new_module("raise RuntimeError('not yet')\n")
    seen: list[str] = []
    import_hooks.when_imported(name, lambda module: seen.append(module.__name__))
    with pytest.raises(RuntimeError, match="not yet"):
        importlib.import_module(name)
    assert seen == []
    (tmp_path / f"{name}.py").write_text("", encoding="utf-8")
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    importlib.import_module(name)
    assert seen == [name]


def test_a_hook_that_raises_is_logged_and_the_import_succeeds(
    new_module: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    name = new_module("value = 1\n")

    def hook(module: ModuleType) -> None:
        raise ValueError("broken hook")

    import_hooks.when_imported(name, hook)
    with caplog.at_level(logging.WARNING, logger="wm_middleware"):
        assert importlib.import_module(name).value == 1
    (record,) = [r for r in caplog.records if r.name == "wm_middleware"]
    assert name in record.getMessage()
    assert record.exc_info is not None


def test_an_application_that_set_up_opentelemetry_gets_the_cache_metrics_before_any_client() -> (
    None
):
    # Its OpenTelemetry import is paid already: instrument() makes the runtime (and with it the
    # observable cache metrics) at once, not at the first patch.
    found = _run(
        "from opentelemetry import metrics\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "reader = InMemoryMetricReader()\n"
        "metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))\n"
        "import wm_middleware\n"
        "memory = wm_middleware.instrument()\n"
        "memory.search('tea', lambda: ['green'])\n"
        "data = reader.get_metrics_data()\n"
        "names = sorted({m.name for r in data.resource_metrics for s in r.scope_metrics"
        " for m in s.metrics}) if data else []\n"
        "print(json.dumps({'size': 'wm.cache.size' in names,"
        " 'client': 'supermemory' in sys.modules}))\n"
    )
    assert found == {"size": True, "client": False}


def test_hits_are_traced_once_the_application_sets_a_tracer_provider_after_they_began(
    two_searches: TwoSearches,
) -> None:
    """Hits made while no tracer provider is set make no span (the API's proxy records none);
    the hits that follow the application's provider are traced through it."""
    found = two_searches(
        "memory = wm_middleware.instrument()\n",
        SET_A_TRACER_PROVIDER + "search()\n"
        "search()\n"
        "spans = exporter.get_finished_spans()\n"
        "stats = memory.stats()\n"
        "print(json.dumps({'results': [s.attributes.get('wm.cache.result') for s in spans],\n"
        "                  'hits': stats.hits, 'misses': stats.misses}))\n",
    )
    assert found == ({"results": ["hit", "hit"], "hits": 3, "misses": 1}, 1)


def test_a_tracer_provider_that_fails_at_the_first_call_fails_no_call(
    two_searches: TwoSearches,
) -> None:
    """The runtime is made by the first patched call: a global provider that raises then is
    logged, and the calls are cached, untraced, as if no provider were set."""
    found = two_searches(
        "from opentelemetry import trace\n"
        "class Broken(trace.NoOpTracerProvider):\n"
        "    def get_tracer(self, *args, **kwargs):\n"
        "        raise RuntimeError('broken provider')\n"
        "trace.set_tracer_provider(Broken())\n"
        "import logging\n"
        "logged = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        logged.append(record.getMessage())\n"
        "logging.getLogger('wm_middleware').addHandler(Keep())\n"
        "memory = wm_middleware.instrument()\n",
        "stats = memory.stats()\n"
        "print(json.dumps({'hits': stats.hits, 'misses': stats.misses, 'logged': logged}))\n",
    )
    assert found == (
        {
            "hits": 1,
            "misses": 1,
            "logged": [
                "wm_middleware: telemetry could not be set up; calls are cached, not traced"
            ],
        },
        1,
    )
