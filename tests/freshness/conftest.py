"""Fixtures of the freshness tests: a fake clock, bounded waits, the emulator with a pipeline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from wm_middleware.emulator import EmulatorServer


class FakeClock:
    """A monotonic clock that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def wait_until(predicate: Callable[[], object], limit: float = 20.0) -> None:
    """Return once ``predicate()`` holds; fail past ``limit`` seconds (a bound, never reached in
    a passing run, not a measurement)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


@pytest.fixture(scope="session")
def emulator_server() -> Iterator[EmulatorServer]:
    with EmulatorServer(seed=5) as server:
        yield server


@pytest.fixture
def emulator(emulator_server: EmulatorServer) -> Iterator[EmulatorServer]:
    """A clean emulator; the test sets its indexing delay."""
    emulator_server.reset()
    emulator_server.set_latency(None)
    emulator_server.set_indexing_delay(0.0)
    yield emulator_server
    emulator_server.set_indexing_delay(0.0)
