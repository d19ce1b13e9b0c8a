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

import _conversation as script
import supermemory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.graph import END, START, StateGraph

ADVISORS = ("chef", "nutritionist", "planner")


class Turn(TypedDict, total=False):
    question: str
    context: Annotated[list[str], operator.add]  # each advisor branch appends its findings
    answer: str


def build_graph(client: supermemory.Supermemory) -> Any:
    """recall (three advisors in parallel) -> model -> remember."""
    model = FakeListChatModel(responses=["A peanut-free noodle bowl.", "Noted."])

    def advisor(name: str) -> Callable[[Turn], Turn]:
        def recall(state: Turn) -> Turn:
            profile = client.profile(script.CONTAINER_TAG)
            found = client.search(script.CONTAINER_TAG, query=script.QUERY)
            facts = [fact.memory for fact in profile.profile.static]
            facts += [result.memory or "" for result in found.results]
            return {"context": [f"{name}: {fact}" for fact in facts]}

        return recall

    def answer(state: Turn) -> Turn:
        prompt = "\n".join([*state["context"], f"user: {state['question']}"])
        return {"answer": str(model.invoke(prompt).content)}

    def remember(state: Turn) -> Turn:
        content = script.to_remember(state["question"])
        if content is not None:
            client.add(script.CONTAINER_TAG, content=content)
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


def converse(cached: bool) -> None:
    with script.against_the_emulator(cached=cached) as run:
        client = supermemory.Supermemory(api_key=script.API_KEY, base_url=run.base_url)
        graph = build_graph(client)
        for number, question in enumerate(script.TURNS, start=1):
            state = graph.invoke({"question": question, "context": []})
            run.saw(number, state["context"])
            time.sleep(script.PAUSE)


def main() -> None:
    script.header()
    converse(cached=False)
    converse(cached=True)


if __name__ == "__main__":
    main()
