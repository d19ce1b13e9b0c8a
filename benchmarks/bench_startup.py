"""What ``import wm_middleware`` and ``instrument()`` add to an application's start-up.

Run from the repository root, in the environment to measure (``/work/venv3`` has
supermemory-openai-sdk, whose import pulls in ``openai``)::

    python benchmarks/bench_startup.py              # 21 rounds
    python benchmarks/bench_startup.py --rounds 5   # a quick look
    python benchmarks/bench_startup.py --json startup.json

Method. Every sample is a fresh interpreter (``sys.executable -c ...``) timed from spawn to exit,
run in this checkout's root with it on ``PYTHONPATH``, and no ``WM_MIDDLEWARE_*`` / ``OTEL_*``
variables. The candidates are interleaved: each round runs every one of them once, in a rotated
order, so that drift in machine load hits them alike; one round runs first unmeasured (warming
the OS caches).
A figure is the MEDIAN over rounds, of the wall time and of the CPU time (user + system) the
child used; a difference is the difference of two medians. On a loaded machine the wall time
includes waiting for a core, the CPU time much less so: the goal's verdict is on CPU time. The
differences are also printed between the minimum CPU times over rounds, which a loaded machine
inflates least.

Rows:

* ``python -c pass``: the interpreter alone, the baseline;
* the standard library ``import wm_middleware; instrument()`` imports (``threading``,
  ``collections``, ``contextlib``, ``contextvars``, ``importlib``, ``math``...): the floor they
  pay, for reference. ``typing``, ``dataclasses``, ``inspect``, ``logging`` and ``copy`` would
  cost tens of milliseconds more; they wait for their first use (see ``wm_middleware._core``);
* ``import wm_middleware``;
* ``import wm_middleware; instrument()``: the goal is at most 40 ms of CPU over ``pass``,
  whatever client libraries are installed; the verdict is printed for ``instrument()`` over the
  import and for both over ``pass``;
* ``import supermemory`` alone, then after ``instrument()``: what the patch costs when the
  application imports the SDK (wrapt and the adapters are loaded then; the runtime, with its
  telemetry, freshness and the OpenTelemetry API, waits for the first patched call);
* ``import supermemory``, then ``import wm_middleware; instrument()``: the order most
  applications use (the SDK imported at the top, ``instrument()`` called later). The goal is the
  same 40 ms of CPU, over ``import supermemory``;
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

INSTRUMENT = "import wm_middleware; wm_middleware.instrument()"
# What ``import wm_middleware; instrument()`` imports from the standard library
# (tests/configuration/test_lazy_patching.py keeps the slow ones out).
STDLIB = "import collections, contextlib, contextvars, functools, importlib, math, threading, types"

CANDIDATES: dict[str, str] = {
    "pass": "pass",
    "stdlib": STDLIB,
    "import": "import wm_middleware",
    "instrument": INSTRUMENT,
}
if importlib.util.find_spec("supermemory") is not None:
    CANDIDATES["supermemory"] = "import supermemory"
    # Fails the run if no adapter loaded on the import: the row would measure nothing.
    ADAPTED = "assert 'wm_middleware._adapters.sdk3' in sys.modules"
    CANDIDATES["patched"] = f"{INSTRUMENT}; import supermemory, sys; {ADAPTED}"
    # The order most applications use; fails the run as well if nothing was patched.
    CANDIDATES["supermemory first"] = f"import supermemory, sys; {INSTRUMENT}; {ADAPTED}"
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


def _once(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawning ``python -c code`` to its exit, and the CPU seconds it used."""
    start = time.perf_counter()
    # cwd: ``-c`` puts the working directory first on sys.path, ahead of PYTHONPATH.
    process = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, code)
    return wall, usage.ru_utime + usage.ru_stime


def measure(rounds: int) -> dict[str, dict[str, list[float]]]:
    """``{"wall": {candidate: seconds per round}, "cpu": {...}}``."""
    env = _environment()
    names = list(CANDIDATES)
    for name in names:  # warm-up, not counted
        _once(CANDIDATES[name], env)
    samples: dict[str, dict[str, list[float]]] = {
        "wall": {name: [] for name in names},
        "cpu": {name: [] for name in names},
    }
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = _once(CANDIDATES[name], env)
            samples["wall"][name].append(wall)
            samples["cpu"][name].append(cpu)
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
    median = {
        kind: {name: statistics.median(values) for name, values in by_name.items()}
        for kind, by_name in samples.items()
    }
    wall, cpu = median["wall"], median["cpu"]
    print(f"{sys.executable}, {options.rounds} rounds, medians of fresh interpreters")
    print("        wall         cpu")
    for name, code in CANDIDATES.items():
        print(f"  {_ms(wall[name])} {_ms(cpu[name])}  python -c {code!r}")
    rows = [
        ("the standard library they import adds", "stdlib", "pass"),
        ("import wm_middleware adds", "import", "pass"),
        ("instrument() adds to the import", "instrument", "import"),
        ("both add to start-up", "instrument", "pass"),
        ("wm_middleware's own code adds, over that standard library", "instrument", "stdlib"),
    ]
    goals = rows[2:4]
    if "patched" in CANDIDATES:
        rows.append(
            ("instrument(), then import supermemory (patched), adds", "patched", "supermemory")
        )
        after = ("import supermemory, then instrument(): instrument() adds", "supermemory first")
        rows.append((*after, "supermemory"))
        goals.append(rows[-1])
    # The minimum over rounds: what a process costs when nothing else slows it down.
    least = {name: min(values) for name, values in samples["cpu"].items()}
    print("        wall         cpu     cpu min")
    for label, this, base in rows:
        print(
            f"  {_ms(wall[this] - wall[base])} {_ms(cpu[this] - cpu[base])} "
            f"{_ms(least[this] - least[base])}  {label}"
        )
    for label, this, base in goals:
        added = (cpu[this] - cpu[base]) * 1000
        verdict = "met" if added <= GOAL_MS else "missed"
        print(f"  goal: {label} <= {GOAL_MS:.0f} ms of CPU time (median): {verdict}")
    if options.json is not None:
        options.json.write_text(
            json.dumps({"samples": samples, "median": median, "min_cpu": least}, indent=2) + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
