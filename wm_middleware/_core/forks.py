"""What a forked child must not inherit: the objects that reset themselves in it.

After ``os.fork()`` (multiprocessing's fork start method, Celery's prefork pool, gunicorn's
preload) only the thread that forked runs in the child. A lock another thread held at that moment
stays held there for ever; a fetch or a request another thread was making never ends, so whoever
waits for it waits for ever; a pooled connection is one TCP stream that two processes would
write to. An object that holds such things registers itself with :func:`reset_in_child` when it
is made; in the child, before ``fork()`` returns there, the forking thread calls each registered
object's ``_after_fork()``, or the function it was registered with (through
``os.register_at_fork``).

What an ``_after_fork`` does, and does not:

* it touches its own object's fields only, so the order in which they run does not matter;
* it replaces a lock, event or condition, never releases one (the parent's threads are gone);
* it forgets a connection without closing it: closing talks on the stream the parent still
  uses (a TLS ``close_notify``, a pool's goodbye); the child's copy of the socket goes with the
  object that held it;
* it makes no request (the next call does, if it needs one), and starts a thread only to carry
  on work the child has of its own (the deadlines of what settles);
* it raises nothing; one that does is logged and the others still run.

Objects are held weakly: registering keeps nothing alive.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Any

__all__ = ["reset_in_child"]

# id -> (a weak reference to a live holder, its reset or None for its _after_fork). By identity:
# equal holders are still two. Dict item operations are atomic: safe from any thread.
_REGISTERED: dict[int, tuple[weakref.ref[Any], Callable[[Any], None] | None]] = {}


def reset_in_child(holder: Any, reset: Callable[[Any], None] | None = None) -> None:
    """Call ``holder._after_fork()``, or ``reset(holder)``, in every process forked from this one
    from now on, while ``holder`` lives (see the module docstring)."""
    key = id(holder)

    def forget(ref: weakref.ref[Any]) -> None:  # called as the holder goes, before its id is free
        if _REGISTERED.get(key, (None,))[0] is ref:
            _REGISTERED.pop(key, None)

    _REGISTERED[key] = (weakref.ref(holder, forget), reset)


def _in_child() -> None:
    for ref, reset in list(_REGISTERED.values()):
        holder = ref()
        if holder is None:
            continue
        try:
            if reset is None:
                holder._after_fork()
            else:
                reset(holder)
        except Exception:  # the others still reset; logging is imported only to say so
            import logging

            logging.getLogger(__name__).warning(
                "wm_middleware: %r did not reset itself after a fork", holder, exc_info=True
            )


os.register_at_fork(after_in_child=_in_child)
