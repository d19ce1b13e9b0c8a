"""What ``import wm_middleware`` and ``instrument()`` add to an application's start-up.

Run from the repository root, in the environment to measure (``/work/venvs/sdk3`` has
supermemory-openai-sdk, whose import pulls in ``openai``)::

    python benchmarks/bench_startup.py              # 21 rounds
    python benchmarks/bench_startup.py --rounds 5   # a quick look
    python benchmarks/bench_startup.py --json startup.json

Method. Every sample is a fresh interpreter (``sys.executable -c ...``) timed from spawn to exit,
with this checkout first on ``PYTHONPATH`` and no ``WM_MIDDLEWARE_*`` / ``OTEL_*`` variables. The
candidates are interleaved: each round runs every one of them once, in a rotated order, so that
drift in machine load hits them alike; one round runs first unmeasured (warming the OS caches).
A figure is the MEDIAN over rounds; a difference is the difference of two medians.

Rows:

* ``python -c pass``: the interpreter alone, the baseline;
* ``import wm_middleware``;
* ``import wm_middleware; instrument()``: the goal row, at most 40 ms over ``pass`` would be ideal
  and ``instrument()`` itself must add little over the import, whatever is installed;
* ``import supermemory_openai``: what an eager ``instrument()`` used to import (when installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CANDIDATES: dict[str, str] = {
    "pass": "pass",
    "import": "import wm_middleware",
    "instrument": "import wm_middleware; wm_middleware.instrument()",
}
if importlib.util.find_spec("supermemory_openai") is not None:
    CANDIDATES["import supermemory_openai"] = "import supermemory_openai"

GOAL_MS = 40.0


def _environment() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("WM_MIDDLEWARE_", "OTEL_", "PYTHON"))
    }
    env["PYTHONPATH"] = str(ROOT)
    return env


def _once(code: str, env: dict[str, str]) -> float:
    """Seconds from spawning ``python -c code`` to its exit."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    return time.perf_counter() - start


def measure(rounds: int) -> dict[str, list[float]]:
    env = _environment()
    names = list(CANDIDATES)
    for name in names:  # warm-up, not counted
        _once(CANDIDATES[name], env)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_once(CANDIDATES[name], env))
    return samples


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=21, help="measured rounds (default 21)")
    parser.add_argument("--json", type=Path, help="also write the samples and medians here")
    options = parser.parse_args(argv)
    if options.rounds < 1:
        parser.error("--rounds must be >= 1")
    samples = measure(options.rounds)
    median = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{sys.executable}, {options.rounds} rounds, medians of fresh interpreters")
    for name, code in CANDIDATES.items():
        print(f"  {_ms(median[name])}  python -c {code!r}")
    imported = median["import"] - median["pass"]
    instrumented = median["instrument"] - median["import"]
    total = median["instrument"] - median["pass"]
    print(f"  import wm_middleware adds         {_ms(imported)}")
    print(f"  instrument() adds to the import   {_ms(instrumented)}")
    verdict = "met" if total * 1000 <= GOAL_MS else "missed"
    print(
        f"  both add to start-up              {_ms(total)}  (goal <= {GOAL_MS:.0f} ms: {verdict})"
    )
    if options.json is not None:
        options.json.write_text(
            json.dumps({"samples": samples, "median": median}, indent=2) + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
