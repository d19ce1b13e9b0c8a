"""Spans on the terminal with no collector: ``OTEL_TRACES_EXPORTER=console``, as the README says.

Each test runs a program as a user would, in a fresh interpreter of this environment, with the
documented variable, against the emulator: the README's first Use snippet for the installed SDK
generation under plain ``python``, the same under ``opentelemetry-instrument`` with no SDK
configurator (the ``console`` extra installs the SDK, not the distro), and a process where the
SDK cannot be imported, which must be told once what to install and still be served.
"""

from __future__ import annotations

import json
import os
import re
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from wm_middleware._telemetry.console import MISSING_SDK
from wm_middleware.emulator import EmulatorServer

from ..conftest import SEARCH_TWICE, python
from ..demo._run import environment
from ..test_readme import README_PYTHON, _wants

GENERATION = f"sdk{version('supermemory').split('.')[0]}"
# The README's first Use snippet for this session's SDK: what a reader runs first.
SNIPPET = next(block.text for block in README_PYTHON if _wants(block)[0] == GENERATION)
NO_SDK = "import sys; sys.modules['opentelemetry.sdk'] = None  # as if it were not installed\n"


@pytest.fixture
def demo_memories(emulator: EmulatorServer) -> EmulatorServer:
    emulator.seed("sk-wm-demo", ["Alex has a severe peanut allergy."], container_tag="user-alex")
    return emulator


def _spans(stdout: str) -> list[dict[str, object]]:
    """The spans ConsoleSpanExporter printed: one indented JSON object per span."""
    return [json.loads(text) for text in re.findall(r"^\{\n.*?^\}$", stdout, re.M | re.S)]


def _reads(stdout: str) -> list[object]:
    spans = [span for span in _spans(stdout) if span["name"] == "search_memory"]
    return [span["attributes"]["wm.cache.result"] for span in spans]  # type: ignore[index]


def test_the_readme_snippet_prints_its_spans_with_the_console_variable(
    demo_memories: EmulatorServer,
) -> None:
    env = environment(
        SUPERMEMORY_BASE_URL=demo_memories.base_url,
        SUPERMEMORY_API_KEY="sk-wm-demo",
        OTEL_TRACES_EXPORTER="console",
    )

    result = python(SNIPPET, env=env)

    assert _reads(result.stdout) == ["miss", "hit"], result.stdout
    assert result.stderr == ""


def test_opentelemetry_instrument_prints_spans_without_a_configurator(
    emulator: EmulatorServer,
) -> None:
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WM_MIDDLEWARE_"))}
    # The console extra brings the SDK and no distro, so no configurator reads the variable: a
    # configurator name that matches none stands for that here (this environment has the distro).
    env |= {"OTEL_TRACES_EXPORTER": "console", "OTEL_PYTHON_CONFIGURATOR": "not-installed"}

    result = python(SEARCH_TWICE, emulator.base_url, env=env, launcher=launcher)

    assert _reads(result.stdout) == ["miss", "hit"], result.stdout


def test_without_the_sdk_the_console_variable_is_told_once_what_to_install(
    demo_memories: EmulatorServer,
) -> None:
    twice = "wm_middleware.uninstrument()\nmemory = wm_middleware.instrument()\n"
    code = NO_SDK + SNIPPET.replace("wm_middleware.uninstrument()\n", twice, 1)
    env = environment(
        SUPERMEMORY_BASE_URL=demo_memories.base_url,
        SUPERMEMORY_API_KEY="sk-wm-demo",
        OTEL_TRACES_EXPORTER="console",
    )

    result = python(code, env=env)

    assert result.stderr.splitlines() == [MISSING_SDK]
    assert "pip install 'wm-middleware[console]'" in MISSING_SDK
    assert "CacheStats(hits=1, misses=1" in result.stdout  # served all the same
