"""Shared fixtures of the interception tests: the emulator and an active ``instrument()``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer


@pytest.fixture(scope="session")
def emulator_server() -> Iterator[EmulatorServer]:
    """One emulator for the session; use ``emulator`` for a clean one per test."""
    with EmulatorServer(seed=3) as server:
        yield server


@pytest.fixture
def emulator(emulator_server: EmulatorServer) -> EmulatorServer:
    """The emulator with no data, no request counts, no faults and no added latency."""
    emulator_server.reset()
    emulator_server.set_latency(None)
    return emulator_server


@pytest.fixture
def instrumented() -> Iterator[WorkingMemory[Any]]:
    """``wm_middleware.instrument()`` for the test, ``uninstrument()`` after it."""
    memory = wm_middleware.instrument()
    try:
        yield memory
    finally:
        wm_middleware.uninstrument()
