"""Freshness after writes: issue 16's agent loop, uncached vs cached, at several indexing delays.

Run from the repository root::

    python benchmarks/bench_freshness.py                 # the real run: 0.5 s turns, ~4 min
    python benchmarks/bench_freshness.py --scale 0.2     # the same, every time x0.2 (~1 min)
    python benchmarks/bench_freshness.py --delays 2 --json out.json

The loop Supermemory's LangChain / LangGraph guides recommend: each turn ``profile`` and
``search`` before the model, then (every 4 turns, turns 2, 6 and 10) ``add`` of a new fact; a
turn lasts 0.5 s. It runs on after the last write until the uncached agent has had 4 turns to
see it. The emulator indexes each write over ``--delays`` seconds (``EmulatorServer(
indexing_delay=...)``). Rows, each in fresh processes against one emulator:

* ``uncached``: the installed supermemory SDK as it is;
* ``instrument()``: the same loop with ``wm_middleware.instrument()`` (defaults:
  ``settle_interval=1.0``, ``settle_max=60``);
* ``shared x3``: three processes with ``instrument(shared=url)`` on one valkey-server, serving
  the turns in turn (turn ``k`` in process ``k % 3``), like an agent behind a load balancer.

Per row: the turns from each write until its fact first shows in a profile or search answer, the
lag beyond the uncached agent (goal: <= 1 turn for every fact), and every upstream request the
emulator answered, status checks included (goal: <= 0.7x uncached). ``--scale`` multiplies
every duration (turn, delays, ``settle_interval``) so a quick run keeps the same ratios.
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
FACT_TURNS = {2: "espresso", 6: "kayaking", 10: "sourdough"}
TAIL = 4  # turns after the uncached agent could first see the last fact
API_KEY = "sk-bench-freshness"
TAG = "user-1"
QUERY = "what does the user like?"
SPAWN = multiprocessing.get_context("spawn")


# -- one agent process -----------------------------------------------------------------------
def _agent(
    mode: str, base_url: str, redis_url: str | None, interval: float, inbox: Any, outbox: Any
) -> None:
    """Serve turns: profile + search, then the add the turn carries; reply with the facts seen."""
    import supermemory

    import wm_middleware

    if mode != "uncached":
        wm_middleware.instrument(shared=redis_url, settle_interval=interval)
    client = supermemory.Supermemory(api_key=API_KEY, base_url=base_url, max_retries=0)
    major = _major()
    outbox.put("ready")
    while True:
        fact = inbox.get()
        if fact is None:
            break
        if major == "3":
            answers = [
                client.profile(container_tag=TAG),
                client.search.memories(q=QUERY, container_tag=TAG),
            ]
        else:
            answers = [client.profile(TAG), client.search(TAG, query=QUERY)]
        text = " ".join(str(answer.model_dump()) for answer in answers)
        seen = [word for word in FACT_TURNS.values() if word in text]
        if fact:
            content = f"The user likes {fact}"
            if major == "3":
                client.add(content=content, container_tag=TAG)
            else:
                client.add(TAG, content=content)
        outbox.put(seen)


def _major() -> str:
    from importlib.metadata import version

    return version("supermemory").split(".")[0]


# -- one row ---------------------------------------------------------------------------------
@dataclass
class Row:
    delay: float
    mode: str
    turns: int
    shown_after: dict[str, int | None] = field(default_factory=dict)  # fact -> turns after write
    lag: int | None = None  # max turns beyond uncached
    requests: int = 0
    status_checks: int = 0
    ratio: float | None = None


def _run(
    mode: str, delay: float, scale: float, server: EmulatorServer, redis_url: str | None
) -> Row:
    server.reset()
    server.set_indexing_delay(delay * scale)
    turns = max(FACT_TURNS) + math.ceil(delay / TURN) + TAIL
    processes = 3 if mode == "shared x3" else 1
    agents = []
    for _ in range(processes):
        inbox, outbox = SPAWN.Queue(), SPAWN.Queue()
        process = SPAWN.Process(
            target=_agent, args=(mode, server.base_url, redis_url, 1.0 * scale, inbox, outbox)
        )
        process.start()
        agents.append((process, inbox, outbox))
    for _, _, outbox in agents:
        assert outbox.get(timeout=60) == "ready"
    server.reset_counts()
    row = Row(delay, mode, turns, dict.fromkeys(FACT_TURNS.values()))
    written = {fact: turn for turn, fact in FACT_TURNS.items()}
    try:
        for turn in range(turns):
            started = time.monotonic()
            _, inbox, outbox = agents[turn % processes]
            inbox.put(FACT_TURNS.get(turn, ""))
            for fact in outbox.get(timeout=60):
                if row.shown_after[fact] is None:
                    row.shown_after[fact] = turn - written[fact]
            time.sleep(max(0.0, started + TURN * scale - time.monotonic()))
    finally:
        for process, inbox, _ in agents:
            inbox.put(None)
            process.join(30)
    row.requests = sum(server.counts.values())
    row.status_checks = server.count("GET", "/v3/documents/*") + server.count(
        "GET", "/ns/*/document/*"
    )
    return row


def _compare(rows: list[Row]) -> None:
    base = {row.delay: row for row in rows if row.mode == "uncached"}
    for row in rows:
        uncached = base[row.delay]
        lags = [
            (row.shown_after[f] if row.shown_after[f] is not None else row.turns)
            - (uncached.shown_after[f] or 0)
            for f in FACT_TURNS.values()
        ]
        row.lag = max(lags)
        row.ratio = row.requests / uncached.requests if uncached.requests else None


def _table(rows: list[Row]) -> str:
    lines = [
        "| delay (s) | mode | turns | turns until each fact shows | lag beyond uncached "
        "| requests (status checks) | vs uncached |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        shown = ", ".join("never" if v is None else str(v) for v in row.shown_after.values())
        lines.append(
            f"| {row.delay:g} | {row.mode} | {row.turns} | {shown} | {row.lag} "
            f"| {row.requests} ({row.status_checks}) | {row.ratio:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", default="0.5,2,6,20", help="indexing delays, seconds")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration")
    parser.add_argument("--no-shared", action="store_true", help="skip the 3-process row")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    modes = ["uncached", "instrument()"] + ([] if args.no_shared else ["shared x3"])
    redis_server = None
    redis_url = None
    if not args.no_shared:
        from tests.shared.servers import Server

        redis_server = Server().start()
        redis_url = redis_server.url
    rows: list[Row] = []
    try:
        with EmulatorServer(seed=16) as server:
            for delay in delays:
                for mode in modes:
                    if redis_server is not None:
                        redis_server.client().flushall()
                    rows.append(_run(mode, delay, args.scale, server, redis_url))
                    print(f"  {mode} at {delay:g} s: done", file=sys.stderr)
    finally:
        if redis_server is not None:
            redis_server.close()
    _compare(rows)
    print(f"supermemory {_major()}.x, turn {TURN * args.scale:g} s, scale {args.scale:g}")
    print(_table(rows))
    goals = [
        row.lag is not None and row.lag <= 1 and row.ratio is not None and row.ratio <= 0.7
        for row in rows
        if row.mode != "uncached"
    ]
    print(f"goals (lag <= 1 turn, requests <= 0.7x) met in {sum(goals)} of {len(goals)} rows")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2))


if __name__ == "__main__":
    main()
