"""End-to-end benchmark: the demo's agent loop, uncached vs cached, and the peer approaches.

Run from the repository root::

    python benchmarks/bench_agent_loop.py            # 4 turns at 100 ms emulated latency
    python benchmarks/bench_agent_loop.py --quick    # smoke run: 2 turns at 20 ms
    python benchmarks/bench_agent_loop.py --json results.json

One process, one emulator, the same workload for every row: the scripted agent of
``wm-middleware demo`` (``wm_middleware.demo``) executing its tool calls through
supermemory-openai-sdk's ``SupermemoryTools``. Rows:

* ``no cache``: the tools as they are;
* ``cachetools TTLCache + lock``: the tool's search function memoised by hand in a ``TTLCache``
  guarded by an ``asyncio.Lock``, cleared after ``add_memory``;
* ``async-lru alru_cache``: the same with ``@alru_cache(ttl=...)``, ``cache_clear()`` after adds;
* ``wm_middleware instrument()``: the tools unchanged, the SDK instrumented.

Before each row the emulator's data is reset and reseeded, and its request counter zeroed.
Ratios are against ``no cache`` measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from async_lru import alru_cache
from cachetools import TTLCache
from cachetools.keys import hashkey
from supermemory_openai import SupermemoryTools

import wm_middleware
from wm_middleware.demo import (
    CONTAINER_TAG,
    REPEATED_QUERY,
    AgentRun,
    Executor,
    TurnRecord,
    run_agent,
    supermemory_tools_executor,
    turns,
)
from wm_middleware.demo.runner import DEMO_API_KEY, seed_emulator
from wm_middleware.emulator import EmulatorServer

TTL = 60.0
MAX_ENTRIES = 100


def memoised_executor(
    tools: Any, search: Callable[..., Any], clear: Callable[[], None]
) -> Executor:
    """Searches through ``search`` (a hand-cached tool function); adds clear the cache."""

    async def execute(tool_call: dict[str, Any]) -> str:
        name = tool_call["function"]["name"]
        arguments = json.loads(tool_call["function"]["arguments"])
        if name == "search_memories":
            return json.dumps(await search(**arguments))
        result = await tools.add_memory(**arguments)
        clear()  # a hand-made cache knows nothing of writes: the application must clear it
        return json.dumps(result)

    return execute


def cachetools_executor(tools: Any) -> Executor:
    cache: TTLCache[Any, Any] = TTLCache(maxsize=MAX_ENTRIES, ttl=TTL)
    lock = asyncio.Lock()

    async def search(**arguments: Any) -> Any:
        key = hashkey(**arguments)
        async with lock:
            if key in cache:
                return cache[key]
        result = await tools.search_memories(**arguments)  # concurrent duplicates all go upstream
        async with lock:
            cache[key] = result
        return result

    return memoised_executor(tools, search, cache.clear)


def async_lru_executor(tools: Any) -> Executor:
    @alru_cache(maxsize=MAX_ENTRIES, ttl=TTL)
    async def search(information_to_get: str, limit: int = 10) -> Any:
        return await tools.search_memories(information_to_get, limit=limit)

    return memoised_executor(tools, search, search.cache_clear)


APPROACHES: dict[str, Callable[[Any], Executor] | None] = {
    "no cache": supermemory_tools_executor,
    "cachetools TTLCache + lock": cachetools_executor,
    "async-lru alru_cache": async_lru_executor,
    "wm_middleware instrument()": None,  # the plain tools, instrumented
}


def repeated_upstream(server: EmulatorServer) -> int:
    """Upstream searches for the repeated query seen by the emulator so far."""
    return sum(
        1
        for r in server.requests
        if r.path == "/v4/search" and isinstance(r.json, dict) and r.json.get("q") == REPEATED_QUERY
    )


async def run_approach(
    name: str, server: EmulatorServer, turn_count: int
) -> tuple[AgentRun, int, int]:
    """(run, upstream requests, upstream searches for the repeated query in turn 1)."""
    server.reset()
    seed_emulator(server)
    tools = SupermemoryTools(
        DEMO_API_KEY, {"base_url": server.base_url, "container_tags": [CONTAINER_TAG]}
    )
    factory = APPROACHES[name]
    instrumented = factory is None
    if instrumented:
        wm_middleware.instrument(max_entries=MAX_ENTRIES, ttl=TTL)
    repeated: list[int] = []

    def on_turn(record: TurnRecord) -> None:
        if record.index == 1:
            repeated.append(repeated_upstream(server))

    try:
        executor = (factory or supermemory_tools_executor)(tools)
        run = await run_agent(turns(turn_count), executor, upstream=server.count, on_turn=on_turn)
    finally:
        if instrumented:
            wm_middleware.uninstrument()
        await tools.client.close()
    if run.errors:
        raise RuntimeError(f"{name}: {len(run.errors)} tool calls failed: {run.errors[0].error}")
    return run, server.count(), repeated[0]


def _ratio(value: float, base: float) -> float:
    return round(value / base, 3) if base else 0.0


async def bench(turn_count: int, latency_ms: float) -> dict[str, Any]:
    latency = latency_ms / 1000.0
    rows: dict[str, Any] = {}
    # Fixed latency (no jitter): the ratios compare approaches, not luck.
    async with EmulatorServer(seed=7, latency=latency or None) as server:
        runs = {name: await run_approach(name, server, turn_count) for name in APPROACHES}
    base_run, _, _ = runs["no cache"]
    for name, (run, upstream, repeated) in runs.items():
        rows[name] = {
            "upstream_requests": upstream,
            "repeated_query_searches": sum(
                1 for c in run.calls if c.turn == 1 and c.query == REPEATED_QUERY
            ),
            "repeated_query_upstream": repeated,
            "turn_wall_ms": [round(t.seconds * 1000, 1) for t in run.turns],
            "turn_wall_ratio": [
                _ratio(t.seconds, b.seconds) for t, b in zip(run.turns, base_run.turns, strict=True)
            ],
            "search_p95_ms": round(run.search_latency(0.95) * 1000, 2),
            "search_p95_ratio": _ratio(run.search_latency(0.95), base_run.search_latency(0.95)),
            "search_p50_ms": round(run.search_latency(0.50) * 1000, 2),
            "wall_ratio": _ratio(run.seconds, base_run.seconds),
        }
    return {
        "python": platform.python_version(),
        "turns": [t.title for t in turns(turn_count)],
        "latency_ms": latency_ms,
        "searches": len(base_run.searches),
        "rows": rows,
    }


def print_table(results: dict[str, Any]) -> None:
    titles = results["turns"]
    headers = [
        "approach",
        "upstream",
        "10 repeats ->",
        *(f"turn {i} ({t})" for i, t in enumerate(titles, start=1)),
        "p95 search",
        "wall",
    ]
    lines = []
    for name, row in results["rows"].items():
        lines.append(
            [
                name,
                str(row["upstream_requests"]),
                f"{row['repeated_query_searches']} -> {row['repeated_query_upstream']}",
                *(f"{r:.2f}x" for r in row["turn_wall_ratio"]),
                f"{row['search_p95_ms']:.1f} ms ({row['search_p95_ratio']:.2f}x)",
                f"{row['wall_ratio']:.2f}x",
            ]
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    print(
        f"bench_agent_loop: Python {results['python']}, {results['latency_ms']:g} ms emulated "
        f"latency, {results['searches']} search_memories calls per run; "
        "ratios are against 'no cache' (lower is better)"
    )
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))
    ours = results["rows"]["wm_middleware instrument()"]
    first = ours["turn_wall_ratio"][0]
    print()
    repeated = ours["repeated_query_upstream"]
    print(
        f"goal: {ours['repeated_query_searches']} repeated searches -> 1 upstream request: "
        f"{repeated} ({'met' if repeated == 1 else 'MISSED'})"
    )
    print(
        f"goal: repeated-query turn wall-time ratio <= 0.15: {first:.2f} "
        f"({'met' if first <= 0.15 else 'MISSED'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 turns at 20 ms")
    parser.add_argument("--turns", type=int, default=None, help="agent turns (default 4)")
    parser.add_argument("--latency-ms", type=float, default=None, help="default 100")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    turn_count = args.turns or (2 if args.quick else 4)
    latency_ms = args.latency_ms if args.latency_ms is not None else (20.0 if args.quick else 100.0)
    results = asyncio.run(bench(turn_count, latency_ms))
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
