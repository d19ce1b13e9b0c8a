"""Shared fixtures of the core tests."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest


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


def wait_for(predicate: Callable[[], object], what: str) -> None:
    """Poll ``predicate`` until it holds (bounded by a count, not by a clock)."""
    for _ in range(10_000):
        if predicate():
            return
        threading.Event().wait(0.001)
    raise AssertionError(what)
