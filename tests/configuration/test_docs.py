"""docs/configuration.md runs as written: each Python block in a fresh interpreter, and each
``print(...)  # -> text`` prints a line starting with ``text``, in order."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs" / "configuration.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOCS.read_text(encoding="utf-8"), re.M | re.S)


def test_the_page_has_python_blocks() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_a_block_runs_and_prints_what_it_says(block: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WM_MIDDLEWARE_"))}
    done = subprocess.run(
        [sys.executable, "-c", block], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    expected = re.findall(r"#\s*->\s*(.+)$", block, re.M)
    printed = done.stdout.splitlines()
    assert len(printed) == len(expected), done.stdout
    for line, text in zip(printed, expected, strict=True):
        assert line.startswith(text.strip())
