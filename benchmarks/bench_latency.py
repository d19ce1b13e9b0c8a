"""Per-read latency in four agent loops, cached (``instrument()``) against uncached.

Run from the repository root, with the venv of the SDK generation to measure::

    python benchmarks/bench_latency.py                  # the real run: 0.5 s turns, 100 ms
    python benchmarks/bench_latency.py --scale 0.2      # every duration x0.2, for a quick look
    python benchmarks/bench_latency.py --shapes sparse --modes async --json out.json

The loops are ``bench_freshness.py``'s (``guide``: profile + search, add every turn; ``tools``:
profile + the same search 3x, add every turn; ``sparse``: profile + search, add every 4th turn;
``read-only``: profile + search), run for the same turns, sync (``Supermemory``) and async
(``AsyncSupermemory`` on one event loop), each agent in a fresh process against one emulator
that answers every request after ``LATENCY`` (100 ms) and indexes each write over ``--delays``
seconds. Every profile and search call is timed where the agent makes it.

Per row: the reads, their p50 / p95 / p99 / max in milliseconds (nearest rank, over every
read), the first read of the process (the SDK's own first call, and with ``instrument()`` what
the patch adds to it) and how many reads after the first took over 1.5x the upstream latency
(a read that waited on two requests in a row, or on something slower than one); the cached
rows also give their p95 and p99 against the uncached row of the same loop. Goals: the cached
p95 and p99 within 5% or 10 ms of uncached, and no cached read after the first over 1.5x the
upstream latency. ``--scale`` multiplies every duration (turn,
latency, delays) and passes ``settle_interval=scale``, so a quick run keeps the same shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from benchmarks.bench_freshness import QUERY, SHAPES, TAG, TAIL, TURN, WRITING_TURNS
from wm_middleware.emulator import EmulatorServer

LATENCY = 0.1  # seconds the emulator takes to answer any request
SLOW = 1.5  # a read over this many upstream latencies waited on more than its own request
API_KEY = "sk-bench-latency"
SPAWN = multiprocessing.get_context("spawn")
MODES = ("uncached", "instrument()")


# -- one agent process -----------------------------------------------------------------------
class _Agent:
    """The calls of one turn, through the installed SDK; each read timed, in seconds."""

    def __init__(self, asynchronous: bool, base_url: str) -> None:
        import supermemory

        cls = supermemory.AsyncSupermemory if asynchronous else supermemory.Supermemory
        self.client: Any = cls(api_key=API_KEY, base_url=base_url, max_retries=0)
        self.v3 = _major() == "3"

    def reads(self, searches: int) -> list[Any]:
        client = self.client
        if self.v3:
            return [lambda: client.profile(container_tag=TAG)] + [
                lambda: client.search.memories(q=QUERY, container_tag=TAG)
            ] * searches
        return [lambda: client.profile(TAG)] + [lambda: client.search(TAG, query=QUERY)] * searches

    def write(self, content: str) -> Any:
        if self.v3:
            return self.client.add(content=content, container_tag=TAG)
        return self.client.add(TAG, content=content)


def _agent(cached: bool, asynchronous: bool, base_url: str, scale: float, inbox: Any, outbox: Any):
    """Serve turns: profile + the searches, each timed, then the add the turn carries."""
    import wm_middleware

    if cached:
        wm_middleware.instrument(settle_interval=1.0 * scale)
    agent = _Agent(asynchronous, base_url)
    loop = asyncio.new_event_loop() if asynchronous else None
    outbox.put("ready")
    while True:
        order = inbox.get()
        if order is None:
            break
        searches, content = order
        if loop is None:
            outbox.put(_turn(agent, searches, content))
        else:
            outbox.put(loop.run_until_complete(_aturn(agent, searches, content)))


def _turn(agent: _Agent, searches: int, content: str) -> list[float]:
    took: list[float] = []
    for read in agent.reads(searches):
        started = time.perf_counter()
        read()
        took.append(time.perf_counter() - started)
    if content:
        agent.write(content)
    return took


async def _aturn(agent: _Agent, searches: int, content: str) -> list[float]:
    took: list[float] = []
    for read in agent.reads(searches):
        started = time.perf_counter()
        await read()
        took.append(time.perf_counter() - started)
    if content:
        await agent.write(content)
    return took


def _major() -> str:
    from importlib.metadata import version

    return version("supermemory").split(".")[0]


# -- one row ---------------------------------------------------------------------------------
@dataclass
class Row:
    shape: str
    delay: float
    calls: str  # sync | async
    mode: str
    took: list[float] = field(default_factory=list, repr=False)  # ms, every read in turn order
    p50: float = 0.0
    p95: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    first: float = 0.0  # the process's first read
    slow: int = 0  # reads after the first over SLOW x the upstream latency
    p95_ratio: float | None = None
    p99_ratio: float | None = None
    met: bool | None = None

    def summarise(self, latency_ms: float) -> None:
        ordered = sorted(self.took)
        self.p50, self.p95, self.p99 = (_rank(ordered, p) for p in (0.5, 0.95, 0.99))
        self.max, self.first = ordered[-1], self.took[0]
        self.slow = sum(ms > SLOW * latency_ms for ms in self.took[1:])


def _rank(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``ordered``."""
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _run(
    shape: str, delay: float, calls: str, mode: str, scale: float, server: EmulatorServer
) -> Row:
    server.reset()
    server.set_latency(LATENCY * scale)
    server.set_indexing_delay(delay * scale)
    searches, every = SHAPES[shape]
    writes = {t for t in range(WRITING_TURNS) if every and t % every == 0}
    turns = WRITING_TURNS + (math.ceil(delay / TURN) + TAIL if writes else 0)
    inbox, outbox = SPAWN.Queue(), SPAWN.Queue()
    arguments = (mode != "uncached", calls == "async", server.base_url, scale, inbox, outbox)
    process = SPAWN.Process(target=_agent, args=arguments)
    process.start()
    row = Row(shape, delay, calls, mode)
    try:
        assert outbox.get(timeout=120) == "ready"
        for turn in range(turns):
            started = time.monotonic()
            inbox.put((searches, f"The user likes fact{turn}x" if turn in writes else ""))
            row.took += [seconds * 1000 for seconds in outbox.get(timeout=120)]
            time.sleep(max(0.0, started + TURN * scale - time.monotonic()))
    finally:
        inbox.put(None)
        process.join(30)
    row.summarise(LATENCY * scale * 1000)
    return row


def _compare(rows: list[Row]) -> None:
    """Each cached row against the uncached row of its loop: the ratios and the goals."""
    for row in rows:
        if row.mode == "uncached":
            continue
        base = next(
            r
            for r in rows
            if (r.shape, r.delay, r.calls, r.mode) == (row.shape, row.delay, row.calls, "uncached")
        )
        row.p95_ratio, row.p99_ratio = row.p95 / base.p95, row.p99 / base.p99
        row.met = row.slow == 0 and all(
            mine <= max(theirs * 1.05, theirs + 10)
            for mine, theirs in ((row.p95, base.p95), (row.p99, base.p99))
        )


def _table(rows: list[Row]) -> str:
    lines = [
        "| loop | delay (s) | calls | mode | reads | p50 / p95 / p99 / max (ms) | first (ms) "
        f"| later over {SLOW:g}x latency | p95, p99 vs uncached |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratios = (
            ""
            if row.p95_ratio is None or row.p99_ratio is None
            else f"{row.p95_ratio:.2f}x, {row.p99_ratio:.2f}x{'' if row.met else ' (missed)'}"
        )
        lines.append(
            f"| {row.shape} | {row.delay:g} | {row.calls} | {row.mode} | {len(row.took)} "
            f"| {row.p50:.0f} / {row.p95:.0f} / {row.p99:.0f} / {row.max:.0f} | {row.first:.0f} "
            f"| {row.slow} | {ratios} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", default="2,6", help="indexing delays, seconds")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="loop shapes")
    parser.add_argument("--modes", default="sync,async", help="sync and/or async calls")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    begun = time.monotonic()
    rows: list[Row] = []
    with EmulatorServer(seed=17) as server:
        for shape in args.shapes.split(","):
            for delay in delays:
                for calls in args.modes.split(","):
                    for mode in MODES:
                        rows.append(_run(shape, delay, calls, mode, args.scale, server))
                    print(f"  {shape}, {calls} at {delay:g} s: done", file=sys.stderr)
    _compare(rows)
    from importlib.metadata import version

    print(
        f"supermemory {version('supermemory')}, turn {TURN * args.scale:g} s, upstream "
        f"{LATENCY * args.scale * 1000:g} ms, scale {args.scale:g}"
    )
    print(_table(rows))
    judged = [row.met for row in rows if row.met is not None]
    print(
        f"goals (cached p95 and p99 within 5% or 10 ms of uncached, no cached read after the "
        f"first over {SLOW:g}x the upstream latency) met in {sum(judged)} of {len(judged)} rows "
        f"({time.monotonic() - begun:.0f} s)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2) + "\n")


if __name__ == "__main__":
    main()
