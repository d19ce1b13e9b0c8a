"""``gen_ai.memory.record.count`` of a read: what its route's rule finds in the answer, on a miss
and on a hit alike, through a plain httpx client and the caching transport (the rule is the
route table's, the same for every adapter)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from wm_middleware import CachingTransport
from wm_middleware.emulator import EmulatorServer

from .conftest import Otel, make_runtime

KEY = "sk-a"
TAG = "user-1"


def _search_results(answer: dict[str, Any]) -> int:
    return len(answer["results"])


def _profile_facts(answer: dict[str, Any]) -> int:
    return len(answer["profile"]["static"]) + len(answer["profile"]["dynamic"])


READS = {
    "search": (
        "/v4/search",
        {"q": "what does the user drink", "containerTag": TAG},
        _search_results,
    ),
    "profile": ("/v4/profile", {"containerTag": TAG}, _profile_facts),
    "profile with a query": (
        "/v4/profile",
        {"containerTag": TAG, "q": "drink"},
        lambda answer: len(answer["searchResults"]["results"]),
    ),
}


@pytest.mark.parametrize("read", list(READS))
def test_a_read_span_counts_the_records_its_route_says_the_answer_lists(
    emulator: EmulatorServer, otel: Otel, read: str
) -> None:
    emulator.seed(
        KEY,
        [
            "User drinks green tea",
            "User drinks coffee at work",
            {"content": "User is allergic to peanuts", "static": True},
        ],
        container_tag=TAG,
    )
    path, body, expected = READS[read]
    transport = CachingTransport(runtime=make_runtime(otel))
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=emulator.base_url, headers=headers, transport=transport) as client:
        answers = [client.post(path, json=body).json() for _ in range(2)]  # a miss, then a hit
    assert answers[0] == answers[1]
    counts = [(s.attributes or {}).get("gen_ai.memory.record.count") for s in otel.reads()]
    results = [(s.attributes or {}).get("wm.cache.result") for s in otel.reads()]
    assert results == ["miss", "hit"]
    assert counts == [expected(answers[0])] * 2
    assert counts[0] > 0
