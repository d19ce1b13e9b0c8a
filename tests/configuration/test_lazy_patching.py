"""``instrument()`` imports no client library: each is patched when the application imports it.

Every case runs in a fresh interpreter, the only place where "not imported yet" is true, against
the emulator of this process on loopback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from wm_middleware.emulator import EmulatorServer

from ..interception.conftest import Generation

CLIENT_LIBRARIES = ("supermemory", "supermemory_openai", "openai")

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


def test_instrument_imports_no_client_library() -> None:
    found = _run(
        "import wm_middleware\n"
        "wm_middleware.instrument()\n"
        f"names = {CLIENT_LIBRARIES!r}\n"
        "print(json.dumps({'imported': sorted(m for m in names if m in sys.modules)}))\n"
    )
    assert found == {"imported": []}


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


def test_a_library_imported_after_instrument_is_patched_and_caches(
    two_searches: TwoSearches,
) -> None:
    found = two_searches(
        "memory = wm_middleware.instrument()\nbefore = 'supermemory' in sys.modules\n",
        "stats = memory.stats()\n"
        "print(json.dumps({'before': before, 'hits': stats.hits, 'misses': stats.misses}))\n",
    )
    assert found == ({"before": False, "hits": 1, "misses": 1}, 1)


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
