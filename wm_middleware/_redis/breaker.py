"""The circuit breaker that keeps a sick Redis from slowing calls down."""

from __future__ import annotations

import threading
import time
from typing import Literal

__all__ = ["Breaker"]


class Breaker:
    """Closed -> open after ``limit`` consecutive failures -> one probe after ``cooldown``.

    ``allow`` is asked before a tier operation; exactly one of ``succeeded`` / ``failed`` follows
    every allowed one. The lock guards the three fields below it; it is never held across I/O.
    """

    __slots__ = ("_failures", "_lock", "_open_until", "_probing", "cooldown", "limit")

    def __init__(self, limit: int, cooldown: float) -> None:
        # Set here, never written again.
        self.limit = limit  # consecutive failures that open the breaker
        self.cooldown = cooldown  # seconds it stays open before one probe is allowed
        self._lock = threading.Lock()
        self._failures = 0
        self._open_until = 0.0  # monotonic; 0 = closed
        self._probing = False  # a half-open probe is in flight

    @property
    def state(self) -> Literal["closed", "open", "half_open"]:
        with self._lock:
            if self._failures < self.limit:
                return "closed"
            return "open" if time.monotonic() < self._open_until else "half_open"

    def allow(self) -> bool:
        if self._failures < self.limit:  # unlocked read: the common case costs no lock
            return True
        with self._lock:
            if self._failures < self.limit:
                return True
            if self._probing or time.monotonic() < self._open_until:
                return False
            self._probing = True
            return True

    def succeeded(self) -> None:
        if self._failures:
            with self._lock:
                self._failures = 0
                self._probing = False

    def failed(self) -> None:
        with self._lock:
            self._failures += 1
            self._probing = False
            if self._failures >= self.limit:
                self._open_until = time.monotonic() + self.cooldown
