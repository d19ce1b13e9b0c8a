"""Fault injection for the emulator.

Contract: rules are consumed in FIFO order: the first rule whose ``method``/``path`` glob
matches a request fires and decrements its ``remaining`` count (``None`` = unlimited). A rule
either answers with ``status`` (JSON error body, optional ``Retry-After``/``retry-after-ms``
headers) or *hangs* for ``hang`` seconds before answering normally. Independently,
``error_rate`` makes a seeded fraction of requests fail with one of ``error_statuses``.
Thread-safe.

The latency model and the request log live in :mod:`.latency` and :mod:`.request_log`; their
names stay importable from here.
"""

from __future__ import annotations

import math
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .latency import LatencyModel, LatencySpec
from .request_log import RecordedRequest, RequestLog, matches

__all__ = [
    "FaultDecision",
    "FaultInjector",
    "FaultRule",
    "FaultSchedule",
    "LatencyModel",
    "LatencySpec",
    "RecordedRequest",
    "RequestLog",
]


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


class FaultSchedule(ABC):
    """``fail_next`` and ``hang_next``, written once for the injector and the emulator.

    A subclass says where a rule goes by implementing :meth:`_arm`.
    """

    @abstractmethod
    def _arm(self, rule: FaultRule) -> FaultRule:
        """Append ``rule`` to the live schedule and return it."""

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
        """Answer the next ``n`` matching API requests (``None`` = all) with ``status``.

        ``path``/``method`` are exact strings or ``fnmatch`` globs (``None`` = any).
        ``retry_after`` (seconds) adds ``Retry-After`` (integer, rounded up) and
        ``retry-after-ms`` headers; note the 3.x SDK honours ``retry-after-ms`` while
        the 5.x SDK only reads integer ``Retry-After`` and falls back to ~1 s
        exponential backoff for ``0``.
        """
        return self._arm(
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
        """Make the next ``n`` matching requests sleep ``seconds`` before answering.

        The hang ends early when the client disconnects or the server stops.
        """
        return self._arm(FaultRule(hang=seconds, remaining=n, path=path, method=method))


class FaultInjector(FaultSchedule):
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

    def _arm(self, rule: FaultRule) -> FaultRule:
        return self.add(rule)

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
                    matches(rule.path, path)
                    and matches(rule.method and rule.method.upper(), method)
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
