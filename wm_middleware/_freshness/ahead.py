"""Status checks ahead of need: started by a read answered from memory, run beside the reads.

A read never waits for a status check (that would be two upstream round trips in a row: the
check, then the fetch it decided on). A read of a settling scope that was answered from memory
(it earned a credit) starts one when what answers its key now will not answer the key's next
read; the check runs beside the reads and its answer is used only by reads that begin after it
(see :mod:`wm_middleware._freshness`). Where it runs:

* a sync read: a daemon thread of its own;
* an async read under asyncio: a task on the caller's loop (referenced here until it ends)
  that awaits its request through the async client (a round is three steps,
  ``Freshness._asking``, the request, ``Freshness._answered``: the task awaits the middle one),
  so no thread waits for an async client's check;
* anywhere else (trio, through anyio): nowhere; the next read fetches, as uncached.

Either way the check runs in an empty context: its span is a root of its own, linked to the
writes it asks about and to the span that was current when the read started it
(:data:`~.checks.LAUNCHED_BY`), not a child of a read that ended long before the check did.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    import asyncio

__all__ = ["ASYNC", "SYNC", "Launch", "Launcher"]

logger = logging.getLogger("wm_middleware._freshness")

Launch = Literal["thread", "task"] | None
"""Where a read's check may run: ``"thread"`` (a sync read), ``"task"`` (asyncio), ``None``."""
SYNC: Final[Launch] = "thread"
ASYNC: Final[Launch] = "task"


class Launcher:
    """Runs checks beside the reads. ``_tasks``: the asyncio tasks not yet done (a loop keeps
    only weak references to its tasks); added and discarded on their loop's thread."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def start(
        self,
        how: Launch,
        job: Callable[[], None],
        ajob: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> bool:
        """Run a check as ``how`` says: ``job`` in a thread, ``ajob`` as a task (neither
        raises); False: it could not be started."""
        try:
            if how == "thread":
                thread = threading.Thread(target=job, name="wm-middleware-check", daemon=True)
                thread.start()  # a new thread starts with an empty context
                return True
            if how == "task" and ajob is not None:
                import asyncio  # loaded already: the caller runs on it

                loop = asyncio.get_running_loop()
                task = loop.create_task(ajob(), context=contextvars.Context())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return True
        except Exception:  # no thread, no loop: the next read fetches
            logger.debug("wm_middleware: could not start a status check", exc_info=True)
        return False
