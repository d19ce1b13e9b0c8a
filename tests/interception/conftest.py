"""Shared fixtures of the interception tests: the emulator and an active ``instrument()``."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

# ``emulator_server`` (the session's) and ``emulator`` (clean, per test) are in tests/conftest.py.


@pytest.fixture
def instrumented() -> Iterator[WorkingMemory[Any]]:
    """``wm_middleware.instrument()`` for the test, ``uninstrument()`` after it."""
    memory = wm_middleware.instrument()
    try:
        yield memory
    finally:
        wm_middleware.uninstrument()


# -- the installed SDK generation, for tests that state a behaviour both generations share --------
KEY = "sk-a"
OTHER_KEY = "sk-b"
TAG = "user-1"
OTHER_TAG = "user-2"
QUERY = "what does the user drink?"


@dataclass(frozen=True)
class Generation:
    """How a test drives the installed supermemory (3.x or 5.x): the same behaviour, its calls."""

    major: str

    def client(self, mode: str, base_url: str, api_key: str = KEY, **options: Any) -> Any:
        import supermemory

        cls = supermemory.AsyncSupermemory if mode == "async" else supermemory.Supermemory
        return cls(api_key=api_key, base_url=base_url, **options)

    def search(self, client: Any, tag: str = TAG) -> Any:
        """A search of ``tag`` (3.x: container tag; 5.x: namespace); sync or awaitable."""
        if self.major == "3":
            return client.search.memories(q=QUERY, container_tag=tag)
        return client.search(tag, query=QUERY)

    def add(self, client: Any, tag: str = TAG) -> Any:
        if self.major == "3":
            return client.add(content="User now prefers coffee", container_tag=tag)
        return client.add(tag, content="User now prefers coffee")

    def searches(self, server: EmulatorServer) -> int:
        """Searches the emulator received, of any tag."""
        return server.count("POST", "/v4/search" if self.major == "3" else "/ns/*/search")

    def seed(self, server: EmulatorServer) -> None:
        for key in (KEY, OTHER_KEY):
            for tag in (TAG, OTHER_TAG):
                server.seed(key, ["User likes green tea", "User drinks coffee"], container_tag=tag)


@pytest.fixture(scope="session")
def generation() -> Generation:
    """The installed SDK generation; tests using it run once per environment (3.x, 5.x)."""
    major = version("supermemory").split(".")[0]
    if major not in ("3", "5"):  # pragma: no cover
        pytest.skip(f"needs supermemory 3.x or 5.x, found {major}")
    return Generation(major)


async def done(value: Any) -> Any:
    """The result of a client call, sync or async."""
    return await value if inspect.isawaitable(value) else value


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)
