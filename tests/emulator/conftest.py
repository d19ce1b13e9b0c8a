"""The emulator's own tests: the session emulator (tests/conftest.py), seeded, and SDK clients.

Tests for the SDK generation that is not installed in the running venv are skipped: run these
in both venvs (supermemory 3.x and 5.x).
"""

from __future__ import annotations

from typing import Any

import pytest

from wm_middleware.emulator import EmulatorServer, SeedMemory

from ..conftest import sdk_client

KEY = "sk-test-alice"
OTHER_KEY = "sk-test-bob"
TAG = "user-1"

SEEDS: list[Any] = [
    SeedMemory("User has a severe peanut allergy", container_tag=TAG, metadata={"kind": "health"}),
    SeedMemory("User likes hiking in the Alps on weekends", container_tag=TAG),
    SeedMemory("User lives in Berlin with two cats", container_tag=TAG, metadata={"kind": "home"}),
    SeedMemory("User's name is Ada Lovelace", container_tag=TAG, static=True),
    SeedMemory("User prefers vegetarian food", container_tag=TAG, bucket="food"),
    "Another user is allergic to shellfish",  # goes to the "other-user" tag below
]


@pytest.fixture
def server(emulator: EmulatorServer) -> EmulatorServer:
    """The clean session emulator with :data:`SEEDS` for :data:`KEY`."""
    emulator.seed(KEY, SEEDS[:-1])
    emulator.seed(KEY, SEEDS[-1:], container_tag="other-user")
    return emulator


def sync_client(server: EmulatorServer, **kw: Any) -> Any:
    """A ``Supermemory`` client of ``server`` (no retries unless ``max_retries`` is given)."""
    kw.setdefault("max_retries", 0)
    return sdk_client("sync", server.base_url, kw.pop("api_key", KEY), **kw)


def async_client(server: EmulatorServer, **kw: Any) -> Any:
    """An ``AsyncSupermemory`` client of ``server`` (no retries unless asked)."""
    kw.setdefault("max_retries", 0)
    return sdk_client("async", server.base_url, kw.pop("api_key", KEY), **kw)
