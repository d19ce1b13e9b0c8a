"""What an application's first supermemory call pays with ``instrument()`` over without it.

Run from the repository root, with the venv of the SDK generation to measure::

    python benchmarks/bench_first_call.py              # 15 rounds
    python benchmarks/bench_first_call.py --rounds 5   # a quick look
    python benchmarks/bench_first_call.py --modules    # and what the first call imports

Method. Every sample is a fresh interpreter that imports the SDK (then ``instrument()`` in the
cached candidate, the order most applications use), makes a client, and times its first search
and its second (a different query: a miss again), against one emulator answering at once. The
candidates are interleaved and rotated round by round; a figure is the median over rounds.
Bytecode is written and used (``PYTHONDONTWRITEBYTECODE`` is dropped, as ``pip install``
compiles it; without it every module the first call imports is compiled again). The
goal: the cached first search at most 5 ms of CPU over the uncached one (the first patched
call makes the runtime: its telemetry, freshness and the OpenTelemetry API); the verdict is on
CPU time, which a loaded machine inflates much less than the wall time (printed too). The CPU
the first search spent in garbage collections (``gc.callbacks``) is printed beside it: the
imports of the first patched call allocate enough to set off a full collection of the heap the
SDK's import left (under 5.x most of the difference), one the uncached run has not set off by then.
``--modules`` prints, for one cached sample, the modules the first search imported and the time
``-X importtime`` gives them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from benchmarks._common import rotated
from wm_middleware.emulator import EmulatorServer

ROOT = Path(__file__).resolve().parent.parent
GOAL_MS = 5.0
API_KEY = "sk-bench-first-call"

_SAMPLE = """
import gc, sys, time
import supermemory
{instrument}
collecting = [0.0, 0.0]  # CPU ms spent in garbage collections; when the one running began
def collected(phase, info):
    if phase == "start":
        collecting[1] = time.process_time()
    else:
        collecting[0] += (time.process_time() - collecting[1]) * 1000
client = supermemory.Supermemory(api_key={key!r}, base_url={url!r}, max_retries=0)
v3 = supermemory.__version__.startswith("3.") if hasattr(supermemory, "__version__") else False
def search(q):
    if v3:
        return client.search.memories(q=q, container_tag="user-1")
    return client.search("user-1", query=q)
before = set(sys.modules)
took = []
gc.callbacks.append(collected)
for q in ("tea", "coffee"):
    started, cpu = time.perf_counter(), time.process_time()
    search(q)
    took += [(time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000]
    if q == "tea":
        loaded = sorted(set(sys.modules) - before)
        took.append(collecting[0])
print(*took, len(loaded))
if {modules}:
    print("\\n".join(loaded), file=sys.stderr)
"""

CANDIDATES = {"uncached": "", "instrument()": "import wm_middleware; wm_middleware.instrument()"}


# first: wall, CPU, of which garbage collection; second: wall, CPU (ms); modules the first loaded
Sample = tuple[float, float, float, float, float, int]


def _sample(name: str, url: str, modules: bool = False) -> tuple[Sample, str]:
    code = _SAMPLE.format(instrument=CANDIDATES[name], key=API_KEY, url=url, modules=modules)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_MIDDLEWARE_", "OTEL_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: pip compiles; else each compiles
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, *(["-X", "importtime"] if modules else []), "-c", code]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    *took, count = done.stdout.split()
    wall, cpu, collecting, wall2, cpu2 = map(float, took)
    return (wall, cpu, collecting, wall2, cpu2, int(count)), done.stderr


def _imported(stderr: str) -> list[tuple[float, str]]:
    """The modules the first search loaded, with their cumulative import time (ms)."""
    lines = stderr.splitlines()
    loaded = {line for line in lines if not line.startswith("import time:")}
    found: list[tuple[float, str]] = []
    for line in lines:
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if name.strip() in loaded and not name.startswith("  "):
                found.append((int(cumulative) / 1000, name.strip()))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--modules", action="store_true", help="what the first search imports")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    samples: dict[str, list[Sample]] = {name: [] for name in CANDIDATES}
    with EmulatorServer(seed=5) as server:
        server.seed(API_KEY, ["User likes green tea"], container_tag="user-1")
        for name in CANDIDATES:
            _sample(name, server.base_url)  # writes the bytecode, warms the OS caches
        for order in rotated(list(CANDIDATES), args.rounds):
            for name in order:
                samples[name].append(_sample(name, server.base_url)[0])
        detail = _sample("instrument()", server.base_url, modules=True) if args.modules else None
    keys = (
        "first_ms",
        "first_cpu_ms",
        "first_gc_ms",
        "second_ms",
        "second_cpu_ms",
        "modules_loaded",
    )
    figures = {
        name: {key: statistics.median(s[i] for s in got) for i, key in enumerate(keys)}
        for name, got in samples.items()
    }
    for name, f in figures.items():
        print(
            f"{name:>14}: first search {f['first_ms']:6.1f} ms ({f['first_cpu_ms']:5.1f} ms CPU, "
            f"{f['first_gc_ms']:4.1f} in garbage collection), "
            f"second {f['second_ms']:5.1f} ms ({f['second_cpu_ms']:4.1f} ms CPU); the first "
            f"loaded {f['modules_loaded']:.0f} modules"
        )
    cached, uncached = figures["instrument()"], figures["uncached"]
    extra = cached["first_ms"] - uncached["first_ms"]
    extra_cpu = cached["first_cpu_ms"] - uncached["first_cpu_ms"]
    verdict = "PASS" if extra_cpu <= GOAL_MS else "MISS"
    print(
        f"first search with instrument(): {extra:+.1f} ms wall, {extra_cpu:+.1f} ms CPU "
        f"(goal <= {GOAL_MS:g} ms of CPU) {verdict}; {args.rounds} rounds, medians"
    )
    collections = cached["first_gc_ms"] - uncached["first_gc_ms"]
    print(
        f"  of which garbage collection: {collections:+.1f} ms CPU (a full collection the "
        "allocations of the first call's imports set off, of the heap the SDK import left)"
    )
    if detail is not None:
        print("\nimported by the first cached search (cumulative ms, -X importtime):")
        for ms, name in _imported(detail[1])[:25]:
            print(f"  {ms:7.1f}  {name}")
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": args.rounds, **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
