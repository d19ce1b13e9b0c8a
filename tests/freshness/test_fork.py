"""A worker forked while writes are pending starts with none of its parent's freshness state.

The parent's pending writes, its status rounds (a tenant's lock held across a request by one of
its threads) and its copies stay the parent's; the child's reads fetch for themselves, through
the real SDK against the emulator. The status request is held at the emulator (a hang, released
when the emulator stops) and has reached it before the fork.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Iterator

import pytest

import wm_middleware
from wm_middleware.emulator import EmulatorServer

from ..conftest import FORKS, in_forked_child, wait_until
from .conftest import Observed, Sdk


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

    def reading() -> None:  # an agent's reads, until one's status check is held
        while not stop.is_set():
            try:
                sdk.search(cached)
            except Exception:  # the server stopped under it, at the end of the test
                return

    def child() -> int:
        sdk.search(cached)
        return 0

    thread = threading.Thread(target=reading)
    thread.start()
    try:
        wait_until(lambda: sdk.status_checks(held_server) == 1, what="a held status check")
        reads = sdk.reads(held_server)
        assert in_forked_child(child, how) == 0
        assert sdk.reads(held_server) == reads + 1  # the child's own search
        assert sdk.status_checks(held_server) == 1  # the child made no check of the parent's
        assert thread.is_alive()  # the parent's check is still held: the child did not wait
    finally:
        stop.set()
        held_server.stop()
        thread.join(30)


def test_a_child_makes_its_status_checks_on_connections_of_its_own(
    sdk: Sdk, emulator: EmulatorServer, observed: Observed
) -> None:
    """The parent's status check leaves its connection in its client's pool; a child's check
    opens one of its own (two processes writing to one TCP stream would read each other's
    answers)."""
    emulator.set_indexing_delay(3600.0)
    cached = observed.wrap(sdk.client("sync", emulator.base_url), settle_interval=0.2)

    def checked_once_more() -> bool:
        """Read (writing first, as a worker's turn does) until this process made a check."""
        checks = observed.status_checks()
        sdk.add(cached, "The user likes espresso")
        for _ in range(1500):
            sdk.search(cached)
            if observed.status_checks() > checks:
                return True
            time.sleep(0.01)
        return False

    assert checked_once_more()
    assert in_forked_child(lambda: 0 if checked_once_more() else 2) == 0
    peers = [r.peer for r in emulator.requests if r.method == "GET" and _is_status(sdk, r.path)]
    assert len(peers) == 2
    assert peers[0] != peers[1]


def _is_status(sdk: Sdk, path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in sdk.status_paths)
