"""``bench_semantic.py --serve``: the pairs replayed through serve mode against the emulator.

Every pair of both data sets gets a partition of its own (a container tag, or a 5.x namespace)
seeded with the lexical form of each of its queries as a memory (one, when the forms are equal)
and two fillers, so the emulator ranks per query: a trap's two queries get different answers
wherever its words differ in what the emulator reads, and a retyped query (``um``, ``hi``,
case, punctuation) the same. A round asks every pair's cached query, then its new one, in a
shuffled order; the memory is cleared between rounds and the evidence kept, as in one process
that runs for a long time. Requests are counted by the emulator; the wrong answers by comparing
each near hit with the uncached answer of the same query.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

import wm_middleware
from wm_middleware._near.answers import agree, ids_of
from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse, lexical_form

KEY = "sk-bench"
FILLERS = ("The office plant needs water on Fridays", "Parking is on level two")
MAJOR = version("supermemory").split(".")[0]


def search(client: Any, tag: str, query: str) -> Any:
    if MAJOR == "3":
        return client.search.memories(q=query, container_tag=tag)
    return client.search(tag, query=query)


def searches(server: EmulatorServer) -> int:
    return server.count("POST", "/v4/search" if MAJOR == "3" else "/ns/*/search")


def client_of(server: EmulatorServer) -> Any:
    import supermemory

    return supermemory.Supermemory(api_key=KEY, base_url=server.base_url)


def replay(
    name: str, pairs: list[dict[str, Any]], semantic: SemanticReuse, rounds: int
) -> dict[str, Any]:
    """One data set, one configuration: the counts of the replay."""
    with EmulatorServer(seed=3) as server:
        tags = [f"pair-{number}" for number in range(len(pairs))]
        for tag, pair in zip(tags, pairs, strict=True):
            forms = dict.fromkeys((lexical_form(pair["a"]), lexical_form(pair["b"])))
            server.seed(KEY, [*forms, *FILLERS], container_tag=tag)
        plain = client_of(server)
        client = wm_middleware.wrap(
            client_of(server), semantic=semantic, max_entries=100_000, ttl=3600.0
        )
        memory = client.working_memory
        order = list(range(len(pairs)))
        served: list[tuple[int, Any]] = []  # (pair, the answer served for its new query)
        first_at: int | None = None  # verdicts collected before the first near hit
        calls, start = 0, searches(server)
        for round_number in range(rounds):
            random.Random(round_number).shuffle(order)
            memory.clear()
            for index in order:
                pair, tag = pairs[index], tags[index]
                search(client, tag, pair["a"])
                before = memory.stats()
                answer = search(client, tag, pair["b"])
                calls += 2
                if memory.stats().near_served > before.near_served:
                    served.append((index, answer))
                    if first_at is None:
                        first_at = before.near_agreed + before.near_disagreed
        stats = memory.stats()
        due = sum(
            math.ceil(n * semantic.verify_share - 1e-9)
            > math.ceil((n - 1) * semantic.verify_share - 1e-9)
            for n in range(1, stats.near_served + 1)
        )
        deadline = time.monotonic() + 60
        while memory.stats().near_verified < due and time.monotonic() < deadline:
            time.sleep(0.01)  # the verifications run beside the callers
        made = searches(server) - start
        stats = memory.stats()
        wrong = exact = traps = 0
        for index, answer in served:
            truth = search(plain, tags[index], pairs[index]["b"])
            wrong += not agree(ids_of(answer), ids_of(truth))
            exact += ids_of(answer) != ids_of(truth)
            traps += not pairs[index]["same_answer"] or bool(pairs[index].get("ambiguous"))
    return {
        "data": name,
        "pairs": len(pairs),
        "calls": calls,
        "requests": made,
        "saved": calls - made,
        "served": stats.near_served,
        "verified": stats.near_verified,
        "wrong": wrong,
        "exact": exact,
        "traps": traps,
        "first": "-" if first_at is None else str(first_at),
        "bound": stats.near_served_bound,
        "agreed": stats.near_agreed,
        "disagreed": stats.near_disagreed,
    }


def replay_all(
    data: dict[str, list[dict[str, Any]]],
    arguments: argparse.Namespace,
    embed: Callable[[Sequence[str]], Sequence[Sequence[float]]] | None,
) -> None:
    """Print the table of ``--serve``: one row per configuration, both data sets replayed
    together (one process's evidence)."""
    print(f"{arguments.rounds} rounds through supermemory {MAJOR}.x, verify_share 0.1")
    configurations = [("lexical form (default)", SemanticReuse(serve=True))]
    if embed is not None:
        configurations.append(
            (
                f"{arguments.embed} >= {arguments.min_similarity}",
                SemanticReuse(embed=embed, min_similarity=arguments.min_similarity, serve=True),
            )
        )
    print(
        "| data set | configuration | calls | requests (uncached: calls) | saved | near hits "
        "served (verified) | wrong answers served | traps served | verdicts before the first "
        "near hit | highest bound served under | verdicts agreed / disagreed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    name = " + ".join(data)
    pairs = [pair for found in data.values() for pair in found]
    for label, semantic in configurations:
        row = replay(name, pairs, semantic, arguments.rounds)
        print(
            f"| {name} | {label} | {row['calls']} | {row['requests']} | {row['saved']} | "
            f"{row['served']} ({row['verified']}) | {row['wrong']} (ids differing: "
            f"{row['exact']}) | {row['traps']} | {row['first']} | {row['bound']:.3%} | "
            f"{row['agreed']} / {row['disagreed']} |"
        )
