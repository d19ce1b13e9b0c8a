"""Whether the shared tier can be reached, said once per outage in the ``wm_middleware`` log.

A call never fails because of the tier, so without a log line a sick tier looks like no tier at
all. The first failure to reach the server logs one WARNING; the first success after it logs one
INFO. Calls in between (and the subscriber's reconnection attempts) log nothing.
"""

from __future__ import annotations

import logging
import threading

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .urls import masked

__all__ = ["Health", "logger", "unreachable"]

logger = logging.getLogger("wm_middleware.shared")


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the server cannot be reached (rather than refusing a command)."""
    return isinstance(error, (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError))


class Health:
    """Reachable or not; logs the changes. Thread-safe; the common case takes no lock."""

    __slots__ = ("_down", "_lock", "_shown")

    def __init__(self, shown: str) -> None:
        self._shown = shown
        self._down = False
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._down

    def failed(self, error: BaseException) -> None:
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

    def succeeded(self) -> None:
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            self._down = False
        logger.info("shared tier %s is reachable again", self._shown)
