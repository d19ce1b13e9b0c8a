"""Shared helpers of the core tests: a fetch held until released, threads, bounded waits.

``clock`` (a :class:`~tests.conftest.FakeClock`) is tests/conftest.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from wm_middleware import WorkingMemory

from ..conftest import FakeClock


class Held:
    """A sync fetch that blocks until :meth:`release`, then returns ``value`` (or raises
    ``error``). Records the name of the thread of each call."""

    def __init__(self, value: Any = "v", error: BaseException | None = None) -> None:
        self.value = value
        self.error = error
        self.threads: list[str] = []
        self.released = threading.Event()

    @property
    def calls(self) -> int:
        return len(self.threads)

    def __call__(self) -> Any:
        self.threads.append(threading.current_thread().name)
        self.released.wait(timeout=30)
        if self.error is not None:
            raise self.error
        return self.value

    def release(self) -> None:
        self.released.set()


def old_entry(clock: FakeClock) -> WorkingMemory[str]:
    """A memory on ``clock`` (TTL 60 s, refresh after 10 s) holding ``q`` = ``"v1"``, stored 11 s
    ago: the next hit of ``q`` serves it and starts a refresh."""
    wm: WorkingMemory[str] = WorkingMemory(ttl=60.0, refresh_after=10.0, clock=clock)
    wm.search("q", lambda: "v1")
    clock.advance(11.0)
    return wm


@contextmanager
def running(*targets: Callable[[], object]) -> Iterator[None]:
    """Each of ``targets`` on a thread of its own, started on entry and joined on exit."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for thread in threads:
            thread.join(timeout=30)


def raising_into(errors: list[BaseException], call: Callable[[], object]) -> Callable[[], None]:
    """``call`` for a thread: what it raises (``KeyboardInterrupt`` too) goes to ``errors``."""

    def run() -> None:
        try:
            call()
        except BaseException as error:
            errors.append(error)

    return run


def wait_for(predicate: Callable[[], object], what: str) -> None:
    """Poll ``predicate`` until it holds (bounded by a count, not by a clock)."""
    for _ in range(10_000):
        if predicate():
            return
        threading.Event().wait(0.001)
    raise AssertionError(what)
