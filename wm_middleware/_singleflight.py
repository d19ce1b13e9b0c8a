"""Single-flight: one fetch per key, shared by every caller that asks for it while it runs.

Callers may be asyncio tasks on one loop, tasks on several loops in several threads, plain threads,
or a mix. A :class:`Flight` is the meeting point. Its owner (:class:`~wm_middleware.WorkingMemory`)
guards every mutable field with its own lock; once ``done`` is set the result fields are read-only
and may be read without the lock.

How a waiter is woken depends on what it is:

* a thread blocks on one shared :class:`threading.Event`;
* an asyncio task awaits a future of its own loop; the finisher wakes each loop's futures with one
  ``call_soon_threadsafe`` (or directly when it already runs on that loop), never touching a future
  from a foreign thread.

The hard cases, handled on purpose:

* **A waiter is cancelled.** Only its own future is cancelled, never the fetch. The fetch task is
  cancelled when the last waiter leaves (``abandon``), so nobody pays for work nobody wants.
* **The fetch is cancelled by someone else** (its loop shut down, or ``KeyboardInterrupt`` in the
  thread that ran it). The flight ends ``cancelled``; the waiters still there start again rather
  than fail for a reason that is not theirs.
* **The fetch raises.** Every current waiter gets the same exception; nothing is stored, and the
  waiters do not re-run the fetch one after another.
* **The key is invalidated mid-flight.** The flight is ``detached``: it leaves the in-flight table
  (new callers start a new fetch) and its result is delivered to its own waiters but never stored.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from typing import Any

__all__ = ["Flight", "running_loop"]


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or ``None`` (without raising and catching)."""
    return asyncio.events._get_running_loop()


def _wake(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class Flight:
    """One fetch in progress for one key.

    Fields marked *lock* are read and written only under the owning cache's lock until ``done``.
    """

    __slots__ = (
        "_event",
        "_futures",
        "cancelled",
        "detached",
        "done",
        "error",
        "info",
        "key",
        "loop",
        "refresh",
        "scopes",
        "task",
        "ttl",
        "value",
        "waiters",
    )

    def __init__(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        info: object,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        # Immutable after construction.
        self.key = key
        self.scopes = scopes
        self.ttl = ttl
        self.info = info  # the leader's handle (e.g. its span context), for followers to link to
        self.loop = loop  # the loop running the fetch task; None when a thread runs the fetch
        self.refresh = False  # a background refresh of a live entry (set before publication)
        # Written once by the leader right after the task is created; read by ``abandon``.
        self.task: asyncio.Task[Any] | None = None
        # lock: callers currently waiting (the leader included).
        self.waiters = 0
        # lock: invalidated or abandoned; its result must not be stored.
        self.detached = False
        # lock until done; then read-only.
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.cancelled = False
        # lock: how to wake waiters.
        self._event: threading.Event | None = None
        self._futures: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}

    # -- joining (lock held) -------------------------------------------------------------------
    def join_thread(self) -> threading.Event:
        """Register a blocking waiter; it waits on the returned event. Lock held."""
        self.waiters += 1
        if self._event is None:
            self._event = threading.Event()
        return self._event

    def join_async(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """Register a waiter on ``loop``; it awaits the returned future. Lock held."""
        self.waiters += 1
        future: asyncio.Future[None] = loop.create_future()
        self._futures.setdefault(loop, []).append(future)
        return future

    def leave_async(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> bool:
        """Unregister a cancelled waiter. True when it was the last one. Lock held."""
        futures = self._futures.get(loop)
        if futures is not None and future in futures:
            futures.remove(future)
        self.waiters -= 1
        return self.waiters == 0

    def blocks(self, loop: asyncio.AbstractEventLoop | None) -> bool:
        """True when a thread running ``loop`` must not block on this flight: it needs ``loop``."""
        return loop is not None and loop is self.loop

    # -- ending (lock held), then waking (lock released) ---------------------------------------
    def finish(self, value: Any, error: BaseException | None, cancelled: bool) -> None:
        """Record the outcome. Lock held; call :meth:`wake` after releasing it."""
        self.value = value
        self.error = error
        self.cancelled = cancelled
        self.done = True

    def wake(self) -> None:
        """Wake every waiter registered before :meth:`finish`. Lock released."""
        if self._event is not None:
            self._event.set()
        here = running_loop()
        for loop, futures in self._futures.items():
            if not futures:
                continue
            if loop is here:
                _wake(futures)
                continue
            try:
                loop.call_soon_threadsafe(_wake, futures)
            except RuntimeError:
                pass  # that loop is closed, and its waiting tasks with it

    def abandon(self) -> None:
        """Cancel the fetch task: its last waiter left. Lock held (cancel is only scheduled)."""
        self.detached = True
        task, loop = self.task, self.loop
        if task is None or loop is None or task.done():
            return
        if loop is running_loop():
            task.cancel()
            return
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:
            pass  # loop closed: the task can no longer run anyway
