"""Shadow mode in a forked child: the parent's embedding workers do not run there.

A child forked while every embedding worker hangs must still embed its own misses, through the
real SDK against the emulator (a worker counted busy in the child would be busy for ever).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from wm_middleware.emulator import EmulatorServer
from wm_middleware.semantic import SemanticReuse

from ..conftest import FORKS, in_forked_child
from ..interception.conftest import Generation
from ..interception.conftest import generation as generation  # a fixture
from .test_shadow_mode import near_index, search
from .test_shadow_mode import seeded as seeded  # a fixture
from .test_shadow_mode import shadow as shadow  # a fixture


@pytest.mark.parametrize("how", FORKS)
def test_a_child_forked_while_every_embedding_hangs_embeds_its_own_misses(
    seeded: EmulatorServer, generation: Generation, shadow: Any, how: str
) -> None:
    parent, release = os.getpid(), threading.Event()

    def hanging_in_the_parent(texts: Sequence[str]) -> list[list[float]]:
        if os.getpid() == parent:
            release.wait(60)  # released by the test
        return [[1.0, 0.0] for _ in texts]

    memory = shadow(semantic=SemanticReuse(embed=hanging_in_the_parent, vetoes=(), timeout=0.05))
    client = generation.client("sync", seeded.base_url)
    try:
        for query in ("green tea", "coffee", "Alice", "Bob"):  # every worker hangs now
            assert search(generation, client, query).results
        assert memory.stats().near_errors == 4

        def child() -> int:
            assert search(generation, client, "window seats").results
            index = near_index()
            for _ in range(2000):  # its late vector is indexed by an embedding of the child's
                if len(index):
                    return 0
                threading.Event().wait(0.01)
            return 2

        assert in_forked_child(child, how) == 0
    finally:
        release.set()
