"""``wm-middleware demo --semantic shadow`` ends with the shadow run's line for the cached run."""

from __future__ import annotations

import importlib.util
import re

import pytest

from ..demo._run import run


@pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)
def test_the_demo_prints_what_serving_near_duplicates_would_have_saved_and_risked() -> None:
    done = run(
        "-m", "wm_middleware", "demo", "--semantic", "shadow", "--latency-ms", "0",
        "--indexing-delay", "0", timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    found = re.fullmatch(
        r"near-duplicates, cached run: of (\d+) misses, (\d+) had a candidate: (\d+) agreed, "
        r"(\d+) disagreed \(disagreement <= [\d.]+% at 95%\).*",
        last,
    )
    assert found is not None, last
    misses, candidates, agreed, disagreed = map(int, found.groups())
    assert misses > 0
    assert candidates == agreed + disagreed
