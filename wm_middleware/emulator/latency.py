"""Artificial per-request latency for the emulator.

Contract: ``None``/``0`` means no added latency; a float is a fixed delay in seconds; a
``(low, high)`` pair draws uniformly per request from a ``random.Random(seed)`` so runs are
reproducible. It is applied with ``asyncio.sleep`` on API routes only (never on
``/_emulator/*``). Thread-safe.
"""

from __future__ import annotations

import random
import threading

__all__ = ["LatencyModel", "LatencySpec"]

LatencySpec = float | tuple[float, float] | None
"""Fixed seconds, a uniform ``(low, high)`` range, or ``None`` for no latency."""


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
