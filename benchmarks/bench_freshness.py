"""Freshness after writes in four agent loops: requests vs uncached, and lag in turns.

Run from the repository root, with the venv of the SDK generation to measure::

    python benchmarks/bench_freshness.py                 # the real run: 0.5 s turns
    python benchmarks/bench_freshness.py --scale 0.2     # every duration x0.2, for a quick look
    python benchmarks/bench_freshness.py --delays 2 --shapes guide,tools --json out.json

Loop shapes (the issue's table), ``WRITING_TURNS`` turns of 0.5 s each:

* ``guide``: ``profile`` + ``search`` before the model, ``add`` of a new fact after it, every
  turn (Supermemory's LangGraph guide);
* ``tools``: ``profile`` + the same ``search`` 3x (a tool loop), ``add`` every turn;
* ``sparse``: ``profile`` + ``search``, ``add`` every 4th turn;
* ``read-only``: ``profile`` + ``search``.

After the writing turns the loop reads on (same reads, no writes) until the uncached agent has
had ``TAIL`` turns to see the last fact. The emulator indexes each write over ``--delays``
seconds. Modes, each in fresh processes against one emulator:

* ``uncached``: the installed supermemory SDK as it is;
* ``instrument()``: the same loop with ``wm_middleware.instrument()`` (defaults);
* ``shared x3``: three processes with ``instrument(shared=url)`` on one valkey-server serving
  the turns in turn (turn ``k`` in process ``k % 3``), like an agent behind a load balancer;
* ``guide`` only: ``uncached x2`` / ``shared x2``: two processes that both make the guide's
  reads every turn, one of which adds every turn.

Per row: every request the emulator answered (writes and status checks included) in the
writing turns, and over the whole run, each against the uncached mode of the same process
count; the lag: turns from the first turn that begins after a fact is indexed (the write's
turn start + the delay: the turn in which an uncached agent sees it) until the fact first shows
(the largest over the facts; the uncached rows show 0). ``--scale`` multiplies every duration
(turn, delays) and passes ``settle_interval=scale``, so a quick run keeps the same ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from wm_middleware.emulator import EmulatorServer

TURN = 0.5
WRITING_TURNS = 14
TAIL = 4  # turns after the uncached agent could first see the last fact
API_KEY = "sk-bench-freshness"
TAG = "user-1"
QUERY = "what does the user like?"
SPAWN = multiprocessing.get_context("spawn")
# shape -> (searches per turn, add every n-th turn; 0: never)
SHAPES: dict[str, tuple[int, int]] = {
    "guide": (1, 1),
    "tools": (3, 1),
    "sparse": (1, 4),
    "read-only": (1, 0),
}


def fact_of(turn: int) -> str:
    return f"fact{turn}x"


# -- one agent process -----------------------------------------------------------------------
def _agent(
    cached: bool, base_url: str, redis_url: str | None, scale: float, inbox: Any, outbox: Any
) -> None:
    """Serve turns: profile + the searches, then the add the turn carries; reply with the facts
    seen."""
    import supermemory

    import wm_middleware

    if cached:
        wm_middleware.instrument(shared=redis_url, settle_interval=1.0 * scale)
    client = supermemory.Supermemory(api_key=API_KEY, base_url=base_url, max_retries=0)
    major = _major()
    outbox.put("ready")
    while True:
        order = inbox.get()
        if order is None:
            break
        searches, fact = order
        if major == "3":
            answers = [client.profile(container_tag=TAG)]
            for _ in range(searches):
                answers.append(client.search.memories(q=QUERY, container_tag=TAG))
        else:
            answers = [client.profile(TAG)]
            for _ in range(searches):
                answers.append(client.search(TAG, query=QUERY))
        text = " ".join(str(answer.model_dump()) for answer in answers)
        written = time.time() if fact else None
        if fact:
            content = f"The user likes {fact}"
            if major == "3":
                client.add(content=content, container_tag=TAG)
            else:
                client.add(TAG, content=content)
        outbox.put((text, written))


def _major() -> str:
    from importlib.metadata import version

    return version("supermemory").split(".")[0]


# -- one row ---------------------------------------------------------------------------------
@dataclass
class Row:
    shape: str
    delay: float
    mode: str
    turns: int
    shown: dict[str, int] = field(default_factory=dict)  # fact -> turns after its write
    indexed: dict[str, int] = field(default_factory=dict)  # fact -> first turn after indexing
    writing_requests: int = 0  # in the writing turns
    writing_checks: int = 0
    requests: int = 0  # the whole run
    checks: int = 0
    lag: int | None = None  # max turns beyond the first turn after indexing
    writing_ratio: float | None = None
    ratio: float | None = None


def _checks(server: EmulatorServer) -> int:
    return server.count("GET", "/v3/documents/*") + server.count("GET", "/ns/*/document/*")


def _start(processes: int, cached: bool, server: EmulatorServer, redis: str | None, scale: float):
    agents = []
    for _ in range(processes):
        inbox, outbox = SPAWN.Queue(), SPAWN.Queue()
        process = SPAWN.Process(
            target=_agent, args=(cached, server.base_url, redis, scale, inbox, outbox)
        )
        process.start()
        agents.append((process, inbox, outbox))
    for _, _, outbox in agents:
        assert outbox.get(timeout=120) == "ready"
    return agents


def _run(
    shape: str, delay: float, mode: str, scale: float, server: EmulatorServer, redis: str | None
) -> Row:
    server.reset()
    server.set_indexing_delay(delay * scale)
    searches, every = SHAPES[shape]
    writes = [t for t in range(WRITING_TURNS) if every and t % every == 0]
    turns = WRITING_TURNS + (math.ceil(delay / TURN) + TAIL if writes else 0)
    processes = {"shared x3": 3, "uncached x2": 2, "shared x2": 2}.get(mode, 1)
    together = mode.endswith("x2")  # both processes read every turn; process 0 writes
    shared = redis if mode.startswith("shared") else None
    agents = _start(processes, not mode.startswith("uncached"), server, shared, scale)
    server.reset_counts()
    row = Row(shape, delay, mode, turns)
    indexed_at: dict[str, float] = {}  # wall clock: just before the add, plus the delay
    try:
        for turn in range(turns):
            started = time.monotonic()
            wall = time.time()
            for name, at in indexed_at.items():
                if name not in row.indexed and wall >= at:
                    row.indexed[name] = turn
            fact = fact_of(turn) if turn in writes else ""
            serving = range(processes) if together else [turn % processes]
            for index in serving:
                _, inbox, outbox = agents[index]
                inbox.put((searches, fact if index == serving[0] else ""))
                text, written = outbox.get(timeout=120)
                if written is not None:
                    indexed_at[fact] = written + delay * scale
                if index == serving[0]:
                    for write in writes:
                        if (
                            write < turn
                            and fact_of(write) not in row.shown
                            and fact_of(write) in text
                        ):
                            row.shown[fact_of(write)] = turn - write
            if turn == WRITING_TURNS - 1:
                row.writing_requests = sum(server.counts.values())
                row.writing_checks = _checks(server)
            time.sleep(max(0.0, started + TURN * scale - time.monotonic()))
    finally:
        for process, inbox, _ in agents:
            inbox.put(None)
            process.join(30)
    row.requests = sum(server.counts.values())
    row.checks = _checks(server)
    return row


def _compare(rows: list[Row]) -> None:
    for row in rows:
        base_mode = "uncached x2" if row.mode.endswith("x2") else "uncached"
        base = next(
            r for r in rows if (r.shape, r.delay, r.mode) == (row.shape, row.delay, base_mode)
        )
        lags = [
            row.shown.get(f, row.turns - write) - (row.indexed.get(f, row.turns) - write)
            for f, write in ((f, int(f[4:-1])) for f in base.shown)
        ]
        row.lag = max(lags, default=0)
        row.writing_ratio = row.writing_requests / base.writing_requests
        row.ratio = row.requests / base.requests


GOALS: dict[str, float] = {"guide": 1.0, "tools": 0.65, "sparse": 0.7, "read-only": 0.15}
FLEET_GOAL = 0.7  # shared x2 against uncached x2


def _goal(row: Row) -> float | None:
    if row.mode.startswith("uncached"):
        return None
    return FLEET_GOAL if row.mode == "shared x2" else GOALS[row.shape]


def _table(rows: list[Row]) -> str:
    lines = [
        f"| loop | delay (s) | mode | requests in {WRITING_TURNS} turns (checks) | vs uncached "
        "| whole run (checks) | vs uncached | lag after the API (turns) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.shape} | {row.delay:g} | {row.mode} "
            f"| {row.writing_requests} ({row.writing_checks}) | {row.writing_ratio:.2f}x "
            f"| {row.requests} ({row.checks}) | {row.ratio:.2f}x | {row.lag} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", default="0.5,2,6,20", help="indexing delays, seconds")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="loop shapes")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration")
    parser.add_argument("--no-shared", action="store_true", help="skip the shared-tier rows")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    shapes = args.shapes.split(",")
    redis_server = None
    redis_url = None
    if not args.no_shared:
        from tests.shared.servers import Server

        redis_server = Server().start()
        redis_url = redis_server.url
    rows: list[Row] = []
    try:
        with EmulatorServer(seed=16) as server:
            for shape in shapes:
                for delay in delays:
                    modes = ["uncached", "instrument()"]
                    if not args.no_shared:
                        modes.append("shared x3")
                        if shape == "guide":
                            modes += ["uncached x2", "shared x2"]
                    for mode in modes:
                        if redis_server is not None:
                            redis_server.client().flushall()
                        rows.append(_run(shape, delay, mode, args.scale, server, redis_url))
                        print(f"  {shape}, {mode} at {delay:g} s: done", file=sys.stderr)
    finally:
        if redis_server is not None:
            redis_server.close()
    _compare(rows)
    from importlib.metadata import version

    print(
        f"supermemory {version('supermemory')}, turn {TURN * args.scale:g} s, scale {args.scale:g}"
    )
    print(_table(rows))
    judged = [(row, _goal(row)) for row in rows if _goal(row) is not None]
    met = [
        row.lag is not None
        and row.lag <= 1
        and row.writing_ratio is not None
        and row.ratio is not None
        and max(row.writing_ratio, row.ratio) <= goal  # type: ignore[operator]
        for row, goal in judged
    ]
    print(
        "goals (lag <= 1 turn; requests <= 1.0x guide, 0.65x tools, 0.7x sparse, 0.15x "
        f"read-only, 0.7x shared x2) met in {sum(met)} of {len(met)} rows"
    )
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2))


if __name__ == "__main__":
    main()
