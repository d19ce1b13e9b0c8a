"""A worker forked while writes are pending starts with none of its parent's freshness state.

The parent's pending writes, its status rounds (a tenant's lock held across a request by one of
its threads) and its copies stay the parent's; the child's reads fetch for themselves, through
the real SDK against the emulator. The status request is held at the emulator (a hang, released
when the emulator stops) and has reached it before the fork.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import wm_middleware
from wm_middleware.emulator import EmulatorServer

from ..conftest import FORKS, in_forked_child, wait_until
from .conftest import Sdk


@pytest.fixture
def held_server() -> Iterator[EmulatorServer]:
    """An emulator of this test's own: stopping it releases the request it holds."""
    with EmulatorServer(seed=3) as server:
        yield server


@pytest.mark.parametrize("how", FORKS)
def test_a_child_forked_during_a_status_check_reads_for_itself(
    sdk: Sdk, held_server: EmulatorServer, how: str
) -> None:
    held_server.set_indexing_delay(3600.0)  # the write stays pending
    cached = wm_middleware.wrap(sdk.client("sync", held_server.base_url), settle_interval=0.2)
    for _ in range(3):
        sdk.search(cached)  # one fetch, two hits: credits for a status check
    sdk.add(cached, "The user likes espresso")
    held_server.hang_next(1, 600.0, path=sdk.status_paths[0], method="GET")
    stop = threading.Event()

    def reading() -> None:  # an agent's reads, until one of them started a status check
        while not stop.is_set():
            try:
                sdk.search(cached)
            except Exception:  # the server stopped under it, at the end of the test
                return

    def child() -> int:
        sdk.profile(cached)  # a read the parent never made: nothing in memory answers it
        return 0

    thread = threading.Thread(target=reading)
    thread.start()
    try:
        wait_until(lambda: sdk.status_checks(held_server) == 1, what="a held status check")
        stop.set()  # the parent's reads go on beside its held check: stopped before the fork
        thread.join(30)
        reads = sdk.reads(held_server)
        assert in_forked_child(child, how) == 0
        assert sdk.reads(held_server) == reads + 1  # the child's own read
        assert sdk.status_checks(held_server) == 1  # the child made no check of the parent's
    finally:
        stop.set()
        held_server.stop()
        thread.join(30)
