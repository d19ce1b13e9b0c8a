"""What the emulator received: request counts per ``(METHOD, path)`` and recent requests.

Contract: :class:`RequestLog` counts every request that reached the emulator (including the
ones a fault answered) per ``(METHOD, path)`` and keeps the last request seen per key and a
bounded list of recent ones. Methods and paths are matched exactly or as ``fnmatch`` globs
(:func:`matches`, shared with the fault schedule). Thread-safe.
"""

from __future__ import annotations

import fnmatch
import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

__all__ = ["RecordedRequest", "RequestLog", "matches"]


def matches(pattern: str | None, value: str) -> bool:
    """Whether ``value`` is ``pattern``: ``None``/``*`` match all; ``*?[`` make a glob."""
    if pattern is None or pattern == "*":
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(value, pattern)
    return pattern == value


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the emulator received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    json: Any
    tenant: str | None
    peer: tuple[str, int] | None = None  # the client's address and port: the connection it used


class RequestLog:
    """Thread-safe request counters and recent-request memory."""

    def __init__(self, maxlen: int = 1000) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._last: dict[tuple[str, str], RecordedRequest] = {}
        self._recent: deque[RecordedRequest] = deque(maxlen=maxlen)

    def record(self, request: RecordedRequest) -> None:
        """Count ``request`` and remember it as the last one for its key."""
        key = (request.method.upper(), request.path)
        with self._lock:
            self._counts[key] += 1
            self._last[key] = request
            self._recent.append(request)

    @property
    def counts(self) -> dict[tuple[str, str], int]:
        """A snapshot ``{(METHOD, path): count}``."""
        with self._lock:
            return dict(self._counts)

    def count(self, method: str = "*", path: str = "*") -> int:
        """Sum the counts whose method and path match (exact, or glob with ``*?[``)."""
        m = method.upper() if method != "*" else "*"
        with self._lock:
            return sum(
                c for (km, kp), c in self._counts.items() if matches(m, km) and matches(path, kp)
            )

    @property
    def total(self) -> int:
        """Every request counted so far."""
        with self._lock:
            return sum(self._counts.values())

    def last(self, method: str, path: str) -> RecordedRequest | None:
        """The last request for ``(method, path)`` (glob allowed: newest match)."""
        m = method.upper()
        with self._lock:
            if (m, path) in self._last:
                return self._last[(m, path)]
            for req in reversed(self._recent):
                if matches(m, req.method.upper()) and matches(path, req.path):
                    return req
        return None

    @property
    def recent(self) -> list[RecordedRequest]:
        """The most recent requests, oldest first (bounded)."""
        with self._lock:
            return list(self._recent)

    def reset(self) -> None:
        """Forget all counts and recorded requests."""
        with self._lock:
            self._counts.clear()
            self._last.clear()
            self._recent.clear()
