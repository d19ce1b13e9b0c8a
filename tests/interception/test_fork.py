"""A worker forked while a search is in flight (gunicorn's preload, Celery's prefork pool,
multiprocessing's fork start method) searches for itself, through the real SDK.

The parent's search is held at the emulator (a hang, released when the emulator stops) and has
reached it before the fork: the flight is in progress in the parent, and its leader thread does
not exist in the child. The child's search of the same key makes a request of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from wm_middleware.emulator import EmulatorServer

from ..conftest import FORKS, in_forked_child, wait_until
from .conftest import Generation, instrumentation


@pytest.fixture
def held_server() -> Iterator[EmulatorServer]:
    """An emulator of this test's own: stopping it releases the search it holds."""
    with EmulatorServer(seed=3) as server:
        yield server


@pytest.mark.parametrize("how", FORKS)
def test_a_child_forked_during_a_search_makes_its_own_request(
    held_server: EmulatorServer, generation: Generation, how: str
) -> None:
    generation.seed(held_server)
    search_path = "/v4/search" if generation.major == "3" else "/ns/*/search"
    held_server.hang_next(1, 600.0, path=search_path)  # until the server stops
    results: list[Any] = []

    def search() -> None:
        client = generation.client("sync", held_server.base_url, max_retries=0)
        try:
            results.append(generation.search(client))
        except Exception as error:  # the server stopped under it, at the end of the test
            results.append(error)

    def child() -> int:
        # A client of the child's own, as a worker makes; the same key as the parent's search.
        client = generation.client("sync", held_server.base_url, max_retries=0)
        found = generation.search(client)
        return 0 if found.results else 2

    with instrumentation() as memory:
        thread = threading.Thread(target=search)
        thread.start()
        try:
            wait_until(lambda: generation.searches(held_server) == 1, what="the parent's search")
            assert memory.stats().inflight == 1
            assert in_forked_child(child, how) == 0
            assert generation.searches(held_server) == 2  # the child's own request
            assert thread.is_alive()  # the parent's search is still held: the child did not wait
        finally:
            held_server.stop()
            thread.join(30)
    assert len(results) == 1
