"""A lock of the package held by another thread when the process forks is a new one in the child.

The thread that held it does not run in the child, so the old lock would stay held there for
ever. Each case holds one lock in a thread of the parent (the rest of the suite reaches these
locks only for a moment, too briefly to fork inside), forks, and calls in the child what takes
that lock. The memory, the flights, the freshness state and the shadow index have tests of their
own (``tests/*/test_fork.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from .conftest import in_forked_child


@contextmanager
def held_by_another_thread(lock: Any) -> Iterator[None]:
    """``lock`` acquired by a thread of its own for the block."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            done.wait(60)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30), "the lock was never taken"
    try:
        yield
    finally:
        done.set()
        thread.join(30)


def _first_call() -> tuple[Any, Callable[[], object]]:
    """A value made at its first call (the instrumentor's runtime is one), being made by a
    thread of the parent at the fork: its lock is held."""
    from wm_middleware._core.lazy import OnFirstCall

    made = OnFirstCall(lambda: "made")
    return made._lock, lambda: made() == "made"


def _delivery_count() -> tuple[Any, Callable[[], object]]:
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from wm_middleware._telemetry.otlp import DeliveryCount

    count = DeliveryCount(InMemorySpanExporter())
    return count._lock, lambda: count.export([]) == SpanExportResult.SUCCESS


def _outage() -> tuple[Any, Callable[[], object]]:
    from wm_middleware._telemetry.outage import Outage

    outage = Outage("127.0.0.1:1", "http/protobuf")  # nothing listens: it says so, locked
    return outage._lock, lambda: outage.reachable() is False


def _import_hooks() -> tuple[Any, Callable[[], object]]:
    from wm_middleware._adapters import import_hooks

    def hook_and_discard() -> bool:
        import_hooks.when_imported("wm_middleware_never_imported", print)
        import_hooks.discard("wm_middleware_never_imported", print)
        return True

    return import_hooks._LOCK, hook_and_discard


def _status_check_instruments() -> tuple[Any, Callable[[], object]]:
    from wm_middleware import WorkingMemory
    from wm_middleware._freshness import checks
    from wm_middleware._runtime import Runtime
    from wm_middleware._telemetry import Telemetry

    return checks._INSTRUMENTS_LOCK, lambda: Runtime(WorkingMemory(), Telemetry()) is not None


def _instrumentation() -> tuple[Any, Callable[[], object]]:
    """The parent is instrumented (its patch table shares the lock); the child instruments
    again, differently, which reverts that table first."""
    import wm_middleware
    from wm_middleware._instrumentor import INSTRUMENTATION

    wm_middleware.instrument()

    def instrument_and_back() -> bool:
        wm_middleware.instrument(ttl=5.0)
        wm_middleware.uninstrument()
        return True

    return INSTRUMENTATION.lock, instrument_and_back


CASES = {
    "instrument()": _instrumentation,
    "a value made at its first call": _first_call,
    "the OTLP delivery count": _delivery_count,
    "the collector outage report": _outage,
    "the import hooks": _import_hooks,
    "the status checks' instruments": _status_check_instruments,
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_lock_held_by_another_thread_at_a_fork_is_free_in_the_child(case: str) -> None:
    import wm_middleware

    lock, takes_it = CASES[case]()
    try:
        with held_by_another_thread(lock):
            assert in_forked_child(lambda: 0 if takes_it() else 2, limit=30) == 0
    finally:
        wm_middleware.uninstrument()  # a no-op but for instrument()'s case
