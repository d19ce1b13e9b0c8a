"""Lexical ranking and the store's search scope, limit and threshold."""

from __future__ import annotations

from wm_middleware.emulator import Emulator
from wm_middleware.emulator.text import rank, tokenize

from .conftest import KEY, OTHER_KEY, SEEDS, TAG


def test_ranking_is_lexical_with_light_stemming() -> None:
    assert tokenize("What are my allergies?") == ["allergy"]
    scores = rank("allergies", ["peanut allergy", "hiking in the Alps", "lives in Berlin"])
    assert scores[0] > 0.5
    assert scores[1] == scores[2] == 0.0
    assert all(0.0 <= s <= 1.0 for s in rank("user lives Berlin", ["User lives in Berlin", "x"]))


def test_store_search_limit_threshold_and_scope() -> None:
    em = Emulator(seed=1)
    em.seed(KEY, SEEDS[:-1])
    hits = em.store.search_memories(KEY, "user", container_tags=[TAG], limit=2)
    assert len(hits) == 2
    assert em.store.search_memories(KEY, "allergy", container_tags=["nope"]) == []
    assert em.store.search_memories(OTHER_KEY, "allergy") == []
    assert em.store.search_memories(KEY, "peanut hiking cats", threshold=0.99) == []
