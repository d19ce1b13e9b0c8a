"""LangGraph: memory nodes around the model node, and parallel branches searching one query.

    python examples/langgraph_agent.py

Each turn runs a graph: three advisor branches in parallel (LangGraph's fan-out), each fetching
the user's profile and searching the same query, then the model node (langchain-core's scripted
``FakeListChatModel``: no account, no network), then a node that adds what the user asked to
remember. The conversation runs twice against the bundled emulator, uncached and then under
``wm_middleware.instrument()``: the parallel branches share one request per query
(single-flight), repeats are answered from memory, and the write in turn 2 drops what it could
have changed.

Environment: the supermemory 5.x one, ``.venv5`` (see the README), with this example's extra:
``.venv5/bin/python -m pip install -e '.[langgraph]'``, then
``.venv5/bin/python examples/langgraph_agent.py``.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import supermemory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.graph import END, START, StateGraph

import wm_middleware
from wm_middleware.emulator import EmulatorServer

API_KEY = "sk-example"
CONTAINER_TAG = "user-alex"
MEMORIES = [
    {"content": "Alex has a severe peanut allergy.", "static": True},
    "Alex likes Japanese food.",
]
NEW_MEMORY = "Alex eats vegetarian food only, since this week."
QUERY = "what food Alex eats"
REMEMBER = "Please remember: "
TURNS = [
    "What should I cook tonight?",
    f"{REMEMBER}{NEW_MEMORY}",
    "What should I cook tonight?",
    "What should I cook tonight?",
]
ADVISORS = ("chef", "nutritionist", "planner")
PAUSE = 0.6  # seconds between turns: the user reading and typing
INDEXING_DELAY = 1.0  # seconds before the emulator returns a new memory from a search


class Turn(TypedDict, total=False):
    question: str
    context: Annotated[list[str], operator.add]  # each advisor branch appends its findings
    answer: str


def build_graph(client: supermemory.Supermemory) -> Any:
    """recall (three advisors in parallel) -> model -> remember."""
    model = FakeListChatModel(responses=["A peanut-free noodle bowl.", "Noted."])

    def advisor(name: str) -> Callable[[Turn], Turn]:
        def recall(state: Turn) -> Turn:
            profile = client.profile(CONTAINER_TAG)
            found = client.search(CONTAINER_TAG, query=QUERY)
            facts = [fact.memory for fact in profile.profile.static]
            facts += [result.memory or "" for result in found.results]
            return {"context": [f"{name}: {fact}" for fact in facts]}

        return recall

    def answer(state: Turn) -> Turn:
        prompt = "\n".join([*state["context"], f"user: {state['question']}"])
        return {"answer": str(model.invoke(prompt).content)}

    def remember(state: Turn) -> Turn:
        if state["question"].startswith(REMEMBER):
            client.add(CONTAINER_TAG, content=state["question"].removeprefix(REMEMBER))
        return {}

    graph = StateGraph(Turn)
    for name in ADVISORS:
        graph.add_node(name, advisor(name))
        graph.add_edge(START, name)
    graph.add_node("model", answer)
    graph.add_node("remember", remember)
    graph.add_edge(list(ADVISORS), "model")  # the model waits for every branch
    graph.add_edge("model", "remember")
    graph.add_edge("remember", END)
    return graph.compile()


def converse(cached: bool) -> tuple[int, int | None]:
    """The conversation against a fresh emulator: (upstream requests, first turn that saw the
    new memory)."""
    with EmulatorServer(latency=0.02, indexing_delay=INDEXING_DELAY) as server:
        server.seed(API_KEY, MEMORIES, container_tag=CONTAINER_TAG)
        memory = wm_middleware.instrument() if cached else None
        try:
            client = supermemory.Supermemory(api_key=API_KEY, base_url=server.base_url)
            graph = build_graph(client)
            seen: int | None = None
            for number, question in enumerate(TURNS, start=1):
                state = graph.invoke({"question": question, "context": []})
                if seen is None and any(NEW_MEMORY in line for line in state["context"]):
                    seen = number
                time.sleep(PAUSE)
            if memory is not None:
                stats = memory.stats()
                print(f"  {stats.hits} hits, {stats.misses} misses, {stats.coalesced} coalesced")
            return server.count(), seen
        finally:
            if cached:
                wm_middleware.uninstrument()


def main() -> None:
    print(f"(using the emulator: {INDEXING_DELAY:g} s indexing delay, {len(TURNS)} turns)")
    uncached, uncached_seen = converse(cached=False)
    print(f"uncached: {uncached} upstream requests; new memory first seen in turn {uncached_seen}")
    cached, cached_seen = converse(cached=True)
    print(f"cached: {cached} upstream requests; new memory first seen in turn {cached_seen}")


if __name__ == "__main__":
    main()
