"""Whether the shared tier can be used, said in the ``wm_middleware.shared`` log.

A call never fails because of the tier, so without a log line a sick tier looks like no tier at
all. Two ways it cannot be used, each said at WARNING:

* **Unreachable** (no connection, a timeout): the first failure logs one WARNING, the first
  success after it one INFO. Calls in between (and the subscriber's reconnection attempts) log
  nothing.
* **Refused**: the server answers with an error (a database it does not have, an ACL user
  without a command it needs, ``NOPERM``, wrong credentials, out of memory). A success of another
  command says nothing about the refused one, so there is no "back" line: each cause (the error's
  type and text) is said once, again only after :data:`SAY_AGAIN` seconds if it still happens,
  and at most :data:`CAUSES` causes are kept, so that a stream of refusals cannot flood the log.
  Every refusal is still counted in ``RedisTier.errors``.
"""

from __future__ import annotations

import logging
import threading
import time

from redis.exceptions import AuthenticationError, AuthorizationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .urls import masked

__all__ = ["CAUSES", "SAY_AGAIN", "BreakerOpen", "Health", "logger", "refused", "unreachable"]

logger = logging.getLogger("wm_middleware.shared")

SAY_AGAIN = 3600.0
"""Seconds before a refusal already logged is logged again (if it still happens)."""
CAUSES = 16
"""Causes of refusals a tier keeps (and so logs); later ones are only counted."""


class BreakerOpen(ConnectionError):
    """A tier operation the circuit breaker skipped: a consequence of earlier failures, whose
    causes were said when they happened, never a cause of its own."""


def refused(error: BaseException) -> bool:
    """Whether ``error`` is the server's answer refusing a command (rather than no answer)."""
    return isinstance(error, (ResponseError, AuthenticationError, AuthorizationError, MemoryError))


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the server cannot be reached (rather than refusing a command)."""
    return not refused(error) and isinstance(
        error, (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)
    )


class Health:
    """Reachable or not, and the refusals said; logs as the module says. Thread-safe; the
    common case takes no lock."""

    __slots__ = ("_down", "_lock", "_said", "_shown")

    def __init__(self, shown: str) -> None:
        self._shown = shown
        self._down = False
        self._lock = threading.Lock()  # guards the two fields below
        self._said: dict[tuple[str, str], float] = {}  # cause -> monotonic time it was logged

    @property
    def down(self) -> bool:
        return self._down

    def failed(self, error: BaseException) -> None:
        if isinstance(error, BreakerOpen):
            return
        if refused(error):
            self._refused(error)
            return
        if self._down or not unreachable(error):
            return
        with self._lock:
            if self._down:
                return
            self._down = True
        logger.warning(
            "shared tier %s cannot be reached (%s: %s); calls fetch directly until it is back",
            self._shown,
            type(error).__name__,
            masked(str(error)),
        )

    def _refused(self, error: BaseException) -> None:
        cause = (type(error).__name__, masked(str(error)))
        now = time.monotonic()
        with self._lock:
            said = self._said.get(cause)
            if said is not None and now - said < SAY_AGAIN:
                return
            if said is None and len(self._said) >= CAUSES:
                return
            self._said[cause] = now
        logger.warning(
            "shared tier %s refuses a command (%s: %s): what needs it goes without the tier "
            "(reads fetch directly); every refusal is counted in RedisTier.errors, this cause "
            "is logged once",
            self._shown,
            *cause,
        )

    def succeeded(self) -> None:
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            self._down = False
        logger.info("shared tier %s is reachable again", self._shown)
