"""Settling scopes: a write the backend has accepted but not yet applied everywhere.

An eventually-consistent backend (Supermemory indexes every write asynchronously) answers reads
with the old state for a while after a write. A cache that refetches right after the write and
keeps that answer for its whole TTL pins the old state. A *settling* scope fixes that:

* every entry stored for the scope while it settles lives at most until the settle's deadline;
* when the settle ends (its condition holds, someone calls :meth:`Settle.end`, or the deadline
  passes) the scope is dropped, so the next read fetches the settled state.

Knows nothing of Supermemory, HTTP or OpenTelemetry: standard library only. One daemon thread per
registry runs deadlines and ``until`` conditions, only while something settles.

Concurrency: one lock guards the index and the handles. :meth:`Settlements.cap` runs under the
working memory's lock (when an entry is stored) and takes this lock inside it; this module never
calls back into the memory while holding its own lock, so the order is always memory -> settle.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterable

from .forks import reset_in_child
from .keys import normalise_query

__all__ = ["Settle", "Settlements", "as_scopes", "check_seconds"]

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Final, Literal

    EndReason = Literal["until", "ended", "deadline"]
    """Why a settle ended: its condition held, :meth:`Settle.end` was called, or it ran out."""

_MAX_SLEEP: Final = 0.25  # the thread re-reads the clock at least this often (fake clocks too)


def _log_exception(level: str, message: str) -> None:
    """Log ``message`` at ``level`` with the exception being handled. :mod:`logging` is imported
    here, when there is something to log, not with the core (see the package docstring)."""
    import logging

    getattr(logging.getLogger(__name__), level)(message, exc_info=True)


def as_scopes(scopes: Iterable[Hashable]) -> tuple[Hashable, ...]:
    """``scopes`` as the memory's scopes: a query (a str) normalised, anything else as it is."""
    return tuple(normalise_query(s) if isinstance(s, str) else s for s in scopes)


def check_seconds(name: str, value: object) -> float:
    """``value`` as a finite number of seconds > 0, or an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


class Settle:
    """One settle of some scopes, as :meth:`WorkingMemory.settle` returns it.

    ``deadline`` is on the memory's clock. ``reason`` is ``None`` while it settles, then the
    :data:`EndReason`. Written under the registry's lock; read anywhere. Compared by identity.
    """

    __slots__ = (
        "_done",
        "_drop",
        "_registry",
        "deadline",
        "every",
        "next_poll",
        "reason",
        "scopes",
        "until",
    )

    def __init__(
        self,
        registry: Settlements,
        scopes: tuple[Hashable, ...],
        deadline: float,
        until: Callable[[], object] | None,
        every: float,
        drop: Callable[[tuple[Hashable, ...]], object],
    ) -> None:
        self._registry = registry
        self.scopes = scopes
        self.deadline = deadline
        self.until = until
        self.every = every
        self._drop = drop
        self.next_poll = math.inf
        self.reason: EndReason | None = None
        self._done = threading.Event()

    @property
    def active(self) -> bool:
        """True while the scopes settle."""
        return self.reason is None

    def end(self) -> bool:
        """End the settle now and drop its scopes; False when it had ended already."""
        return self._registry.finish(self, "ended")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the settle has ended (True) or ``timeout`` seconds passed (False)."""
        return self._done.wait(timeout)

    def __repr__(self) -> str:
        state = "settling" if self.reason is None else f"ended: {self.reason}"
        return f"Settle(scopes={self.scopes!r}, {state})"


class Settlements:
    """The settling scopes of one working memory.

    Args:
        clock: the memory's monotonic clock; deadlines and caps are on it.
        drop: what ending a settle does to its scopes (the memory drops them everywhere).
    """

    def __init__(
        self, clock: Callable[[], float], drop: Callable[[tuple[Hashable, ...]], object]
    ) -> None:
        self._clock = clock
        self._drop = drop
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # lock: scope -> the active settles covering it.
        self._index: dict[Hashable, set[Settle]] = {}
        self._active: set[Settle] = set()
        self._thread: threading.Thread | None = None
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``forks.py``): a new lock, condition and events, and the
        thread started again if anything settles (the parent's does not run here)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread = None
        for settle in self._active:
            settle._done = threading.Event()  # not set: it still settles
        if self._active:
            with self._lock:
                self._start_locked()

    def __len__(self) -> int:
        return len(self._active)

    def begin(
        self,
        scopes: Iterable[Hashable],
        *,
        within: float,
        until: Callable[[], object] | None = None,
        every: float = 1.0,
        drop: Callable[[tuple[Hashable, ...]], object] | None = None,
    ) -> Settle:
        """Start settling ``scopes`` (see :func:`as_scopes`) for at most ``within`` seconds.

        See :meth:`WorkingMemory.settle`.
        """
        scopes = as_scopes(scopes)
        if not scopes:
            raise ValueError("settle needs at least one scope")
        for scope in scopes:
            hash(scope)  # TypeError for an unhashable scope, before anything changes
        within = check_seconds("within", within)
        every = check_seconds("every", every)
        if until is not None:
            if not callable(until):
                raise TypeError(f"until must be callable, not {type(until).__name__}")
            import inspect  # here: settling is rare, and inspect costs start-up time

            if inspect.iscoroutinefunction(until):
                raise TypeError("until must be a plain function returning a bool, not async")
        now = self._clock()
        settle = Settle(self, scopes, now + within, until, every, drop or self._drop)
        if until is not None:
            settle.next_poll = now + every
        with self._lock:
            self._active.add(settle)
            for scope in scopes:
                self._index.setdefault(scope, set()).add(settle)
            self._start_locked()
            self._wake.notify()
        return settle

    def cap(self, key: Hashable, scopes: tuple[Hashable, ...], ttl: float) -> float:
        """``ttl`` shortened so an entry of ``key`` / ``scopes`` stored now dies with the settle.

        ``key`` counts as a scope too: a plain query's entry is keyed by the query alone.
        """
        if not self._index:  # nothing settles: the common case costs one truth test
            return ttl
        deadline = self.deadline(scopes, key)
        if deadline is None:
            return ttl
        left = deadline - self._clock()
        return min(ttl, left) if left > 0 else ttl

    def deadline(self, scopes: Iterable[Hashable], key: Hashable = None) -> float | None:
        """The earliest deadline of the active settles covering ``scopes`` (or ``key``)."""
        if not self._index:
            return None
        found: float | None = None
        with self._lock:
            for scope in (*scopes, key) if key is not None else scopes:
                try:
                    settles = self._index.get(scope)
                except TypeError:
                    continue
                for settle in settles or ():
                    if found is None or settle.deadline < found:
                        found = settle.deadline
        return found

    def settling(self, scopes: Iterable[Hashable]) -> bool:
        """True when any of ``scopes`` (see :func:`as_scopes`) settles now."""
        if not self._index:  # the common case, on the traced hit path: nothing to normalise
            return False
        return self.deadline(as_scopes(scopes)) is not None

    def finish(self, settle: Settle, reason: EndReason) -> bool:
        """End ``settle`` for ``reason`` and drop its scopes (outside the lock)."""
        with self._lock:
            if settle.reason is not None:
                return False
            settle.reason = reason
            self._active.discard(settle)
            for scope in settle.scopes:
                covering = self._index.get(scope)
                if covering is not None:
                    covering.discard(settle)
                    if not covering:
                        del self._index[scope]
        try:
            settle._drop(settle.scopes)
        except Exception:  # an end never raises into whoever ended it
            _log_exception("warning", "wm_middleware: dropping settled scopes failed")
        finally:
            settle._done.set()
        return True

    # -- the thread: deadlines and ``until`` conditions ------------------------------------------
    def _start_locked(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="wm-middleware-settle", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._active:
                    self._thread = None
                    return
                now = self._clock()
                due = min(min(s.deadline, s.next_poll) for s in self._active)
                if due > now:
                    self._wake.wait(min(due - now, _MAX_SLEEP))
                    continue
                expired = [s for s in self._active if s.deadline <= now]
                polls = [s for s in self._active if s.next_poll <= now and s.deadline > now]
                for settle in polls:
                    settle.next_poll = now + settle.every
            for settle in expired:
                self.finish(settle, "deadline")
            for settle in polls:
                if self._holds(settle):
                    self.finish(settle, "until")

    @staticmethod
    def _holds(settle: Settle) -> bool:
        until = settle.until
        if until is None or settle.reason is not None:
            return False
        try:
            return bool(until())
        except Exception:  # a failing condition means "not yet"; the deadline still ends it
            _log_exception("debug", "wm_middleware: a settle condition raised")
            return False
