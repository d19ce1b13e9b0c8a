"""Shared fixtures of the interception tests: the emulator and an active ``instrument()``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

from ..conftest import SDK_MAJOR
from ..conftest import done as done

# ``emulator_server`` (the session's) and ``emulator`` (clean, per test) are in tests/conftest.py,
# with ``mode`` (sync, then async) and ``done``; ``done`` is importable from here as before.


@contextmanager
def instrumentation(**options: Any) -> Iterator[WorkingMemory[Any]]:
    """``wm_middleware.instrument(**options)`` for the block, ``uninstrument()`` after it."""
    memory = wm_middleware.instrument(**options)
    try:
        yield memory
    finally:
        wm_middleware.uninstrument()


@pytest.fixture
def instrumented() -> Iterator[WorkingMemory[Any]]:
    """``wm_middleware.instrument()`` for the test, ``uninstrument()`` after it."""
    with instrumentation() as memory:
        yield memory


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's own retries still happen; only their back-off sleep is shortened."""
    if SDK_MAJOR == "3":
        import supermemory._base_client as base_client

        monkeypatch.setattr(base_client, "INITIAL_RETRY_DELAY", 0.0)
    else:
        import supermemory.core.http_client as http_client

        monkeypatch.setattr(http_client, "INITIAL_RETRY_DELAY_SECONDS", 0.0)


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
        return make_client(mode, base_url, api_key, **options)

    def search(self, client: Any, tag: str = TAG, *, query: str = QUERY) -> Any:
        """A search of ``tag`` (3.x: container tag; 5.x: namespace); sync or awaitable."""
        if self.major == "3":
            return client.search.memories(q=query, container_tag=tag)
        return client.search(tag, query=query)

    def profile(self, client: Any, tag: str = TAG) -> Any:
        """The profile of ``tag``; sync or awaitable."""
        if self.major == "3":
            return client.profile(container_tag=tag)
        return client.profile(tag)

    def add(self, client: Any, tag: str = TAG, *, content: str = "User now prefers coffee") -> Any:
        """A write of ``content`` to ``tag``; sync or awaitable."""
        if self.major == "3":
            return client.add(content=content, container_tag=tag)
        return client.add(tag, content=content)

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


# -- driving a client sync or async: one set of helpers for every test module here --------------
def make_client(mode: str, base_url: str, api_key: str = KEY, **options: Any) -> Any:
    """A ``Supermemory`` (``mode="sync"``) or ``AsyncSupermemory`` of the installed SDK."""
    import supermemory

    cls = supermemory.AsyncSupermemory if mode == "async" else supermemory.Supermemory
    return cls(api_key=api_key, base_url=base_url, **options)
