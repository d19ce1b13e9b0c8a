"""docs/shared-tier.md says only what is true: its Python blocks run and print what they say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "shared-tier.md"
# Blocks that need no SDK (``<!-- env: any... -->``); tests/test_readme.py runs the page's others
# in the environment they name.
BLOCKS = re.findall(
    r"<!-- env: any[^>]*-->\n```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S
)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_python_block_of_the_page_runs_and_prints_what_it_says(
    code: str, redis_url: str
) -> None:
    root = str(PAGE.parents[1])
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": root}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    printed = iter(done.stdout.splitlines())  # in order; log lines may come between
    for start in re.findall(r"# -> (.*)$", code, re.M):
        assert any(line.startswith(start) for line in printed), (start, done.stdout)
    shown = re.search(r"^# (WARNING:.*?) \.\.\.$", code, re.M)
    if shown:
        assert shown.group(1) in done.stdout + done.stderr
