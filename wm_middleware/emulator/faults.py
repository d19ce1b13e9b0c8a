"""Latency model, fault injection and request accounting for the emulator.

Contract:

* :class:`LatencyModel` -- ``None``/``0`` means no added latency; a float is a fixed
  delay in seconds; a ``(low, high)`` pair draws uniformly per request from a
  ``random.Random(seed)`` so runs are reproducible. It is applied with
  ``asyncio.sleep`` on API routes only (never on ``/_emulator/*``).
* :class:`FaultInjector` -- rules are consumed in FIFO order: the first rule whose
  ``method``/``path`` glob matches a request fires and decrements its ``remaining``
  count (``None`` = unlimited). A rule either answers with ``status`` (JSON error
  body, optional ``Retry-After``/``retry-after-ms`` headers) or *hangs* for
  ``hang`` seconds before answering normally. Independently, ``error_rate`` makes a
  seeded fraction of requests fail with one of ``error_statuses``.
* :class:`RequestLog` -- counts every request that reached the emulator (including
  the ones a fault answered) per ``(METHOD, path)`` and keeps the last request seen
  per key. All classes are thread-safe.
"""

from __future__ import annotations

import fnmatch
import math
import random
import threading
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FaultDecision",
    "FaultInjector",
    "FaultRule",
    "LatencyModel",
    "LatencySpec",
    "RecordedRequest",
    "RequestLog",
]

LatencySpec = float | tuple[float, float] | None
"""Fixed seconds, a uniform ``(low, high)`` range, or ``None`` for no latency."""


def _matches(pattern: str | None, value: str) -> bool:
    if pattern is None or pattern == "*":
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(value, pattern)
    return pattern == value


class LatencyModel:
    """Per-request artificial latency (see module docstring)."""

    def __init__(self, spec: LatencySpec = None, *, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self.spec: LatencySpec = None
        self.set(spec, seed=seed)
        self.applied = 0
        self.total_seconds = 0.0

    def set(self, spec: LatencySpec, *, seed: int | None = None) -> None:
        """Replace the latency spec (and reseed the jitter RNG when ``seed`` is given)."""
        if isinstance(spec, tuple):
            low, high = float(spec[0]), float(spec[1])
            if low < 0 or high < low:
                raise ValueError(f"invalid latency range {spec!r}")
            spec = (low, high)
        elif spec is not None and float(spec) < 0:
            raise ValueError(f"latency must be >= 0, got {spec!r}")
        with self._lock:
            self.spec = spec
            if seed is not None:
                self._rng.seed(seed)

    def draw(self) -> float:
        """Return the delay for one request and record it as applied if non-zero."""
        with self._lock:
            spec = self.spec
            if spec is None:
                return 0.0
            delay = self._rng.uniform(*spec) if isinstance(spec, tuple) else float(spec)
            if delay > 0:
                self.applied += 1
                self.total_seconds += delay
            return delay

    def reset_stats(self) -> None:
        """Zero the applied counters."""
        with self._lock:
            self.applied = 0
            self.total_seconds = 0.0


@dataclass
class FaultRule:
    """One injected fault; see :class:`FaultInjector`."""

    status: int | None = None
    hang: float | None = None
    remaining: int | None = 1
    path: str | None = None
    method: str | None = None
    retry_after: float | None = None
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultDecision:
    """What to do for one request: answer ``status`` and/or first sleep ``hang`` s."""

    status: int | None = None
    hang: float | None = None
    retry_after: float | None = None
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    source: str = "rule"

    def response_headers(self) -> dict[str, str]:
        """Headers for the injected error response (``Retry-After`` when set)."""
        out = dict(self.headers)
        if self.retry_after is not None:
            out["Retry-After"] = str(max(0, math.ceil(self.retry_after)))
            out["retry-after-ms"] = str(max(0, round(self.retry_after * 1000)))
        return out


class FaultInjector:
    """Thread-safe fault schedule (see module docstring)."""

    def __init__(
        self,
        *,
        error_rate: float = 0.0,
        error_statuses: Sequence[int] = (500,),
        seed: int | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._rules: list[FaultRule] = []
        self.error_rate = 0.0
        self.error_statuses: tuple[int, ...] = (500,)
        self.set_error_rate(error_rate, statuses=error_statuses)
        self.injected = 0
        self.hangs = 0

    def add(self, rule: FaultRule) -> FaultRule:
        """Append a rule; returns it (its ``remaining`` count is live)."""
        if rule.status is None and rule.hang is None:
            raise ValueError("a fault rule needs a status or a hang duration")
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail_next(
        self,
        n: int | None = 1,
        status: int = 500,
        *,
        path: str | None = None,
        method: str | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> FaultRule:
        """Answer the next ``n`` matching requests (``None`` = all) with ``status``."""
        return self.add(
            FaultRule(
                status=status,
                remaining=n,
                path=path,
                method=method,
                retry_after=retry_after,
                body=body,
            )
        )

    def hang_next(
        self,
        n: int | None = 1,
        seconds: float = 30.0,
        *,
        path: str | None = None,
        method: str | None = None,
    ) -> FaultRule:
        """Make the next ``n`` matching requests sleep ``seconds`` before answering."""
        return self.add(FaultRule(hang=seconds, remaining=n, path=path, method=method))

    def set_error_rate(
        self, rate: float, *, statuses: Sequence[int] | None = None, seed: int | None = None
    ) -> None:
        """Fail a seeded random fraction ``rate`` (0..1) of API requests."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"error rate must be within [0, 1], got {rate!r}")
        with self._lock:
            self.error_rate = rate
            if statuses is not None:
                if not statuses:
                    raise ValueError("statuses must not be empty")
                self.error_statuses = tuple(statuses)
            if seed is not None:
                self._rng.seed(seed)

    def clear(self) -> None:
        """Remove every rule and set the error rate to zero."""
        with self._lock:
            self._rules.clear()
            self.error_rate = 0.0

    @property
    def pending(self) -> list[FaultRule]:
        """A snapshot of the rules still armed."""
        with self._lock:
            return list(self._rules)

    def decide(self, method: str, path: str) -> FaultDecision | None:
        """Consume and return the fault for one request, or ``None``."""
        with self._lock:
            for rule in self._rules:
                if not (
                    _matches(rule.path, path)
                    and _matches(rule.method and rule.method.upper(), method)
                ):
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
                if rule.status is not None:
                    self.injected += 1
                if rule.hang is not None:
                    self.hangs += 1
                return FaultDecision(
                    status=rule.status,
                    hang=rule.hang,
                    retry_after=rule.retry_after,
                    body=rule.body,
                    headers=dict(rule.headers),
                )
            if self.error_rate > 0 and self._rng.random() < self.error_rate:
                self.injected += 1
                return FaultDecision(
                    status=self._rng.choice(self.error_statuses), source="error_rate"
                )
        return None


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
                c for (km, kp), c in self._counts.items() if _matches(m, km) and _matches(path, kp)
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
                if _matches(m, req.method.upper()) and _matches(path, req.path):
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
