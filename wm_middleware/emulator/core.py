"""The emulator itself, independent of any server: :class:`Emulator`.

Contract: an :class:`Emulator` owns the store, the latency model, the fault injector and the
request log, and is their Python control API (seeding, observing, faults, latency, indexing
delay). It knows nothing of HTTP: :func:`~wm_middleware.emulator.app.create_app` serves it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from .faults import FaultInjector, FaultRule, FaultSchedule
from .latency import LatencyModel, LatencySpec
from .request_log import RecordedRequest, RequestLog
from .store import DEFAULT_CONTAINER_TAG, MemoryEntry, MemoryStore, SeedMemory
from .values import JSON

__all__ = ["Emulator", "EmulatorOptions"]


class EmulatorOptions(TypedDict, total=False):
    """The keyword arguments of :class:`Emulator`, as those that serve one pass them on."""

    latency: LatencySpec
    seed: int | None
    error_rate: float
    error_statuses: Sequence[int]
    api_keys: Iterable[str] | None
    indexing_delay: float


class Emulator(FaultSchedule):
    """In-process Supermemory emulator state with its Python control API.

    Args:
        latency: ``None`` (default, no delay), fixed seconds, or a ``(low, high)``
            uniform range drawn from a RNG seeded with ``seed``.
        seed: seeds ids, latency jitter and the random error rate (reproducible runs).
        error_rate: fraction (0..1) of API requests answered with one of
            ``error_statuses`` instead of running.
        error_statuses: statuses used by ``error_rate`` (default ``(500,)``).
        api_keys: when given, only these bearer tokens are accepted (else any
            non-empty token is, each being its own tenant).
        indexing_delay: seconds from a write until its document is indexed (default ``0``:
            at once); meanwhile its status goes ``queued -> extracting -> chunking ->
            embedding -> indexing`` and search, profile and the memory lists do not see it.

    Raises:
        ValueError: ``indexing_delay`` is not a finite number ``>= 0``.
    """

    def __init__(
        self,
        *,
        latency: LatencySpec = None,
        seed: int | None = None,
        error_rate: float = 0.0,
        error_statuses: Sequence[int] = (500,),
        api_keys: Iterable[str] | None = None,
        indexing_delay: float = 0.0,
    ) -> None:
        self.store = MemoryStore(seed=seed, indexing_delay=indexing_delay)
        self.latency = LatencyModel(latency, seed=seed)
        self.faults = FaultInjector(error_rate=error_rate, error_statuses=error_statuses, seed=seed)
        self.log = RequestLog()
        self.api_keys: frozenset[str] | None = frozenset(api_keys) if api_keys is not None else None
        self.stopping = threading.Event()

    # ----------------------------------------------------------- seeding

    def seed(
        self,
        api_key: str,
        memories: Iterable[SeedMemory | str | Mapping[str, Any]],
        *,
        container_tag: str = DEFAULT_CONTAINER_TAG,
    ) -> list[MemoryEntry]:
        """Seed memories for ``api_key``; plain strings go to ``container_tag``.

        Items may be strings, :class:`SeedMemory` or mappings with its fields
        (``content``, ``container_tag``/``containerTag``/``namespace``,
        ``metadata``, ``static``, ``bucket``, ``title``, ``filepath``). Seeded
        memories are searchable immediately, even with an indexing delay.
        """
        return self.store.seed(api_key, memories, container_tag=container_tag)

    def add_memory(
        self,
        api_key: str,
        content: str,
        *,
        container_tag: str = DEFAULT_CONTAINER_TAG,
        metadata: Mapping[str, Any] | None = None,
        static: bool = False,
        bucket: str | None = None,
    ) -> MemoryEntry:
        """Seed a single memory and return it."""
        return self.store.add_memory(
            api_key,
            content,
            container_tag=container_tag,
            metadata=metadata,
            static=static,
            bucket=bucket,
        )

    # ------------------------------------------------------ observation

    @property
    def counts(self) -> dict[tuple[str, str], int]:
        """``{(METHOD, path): n}`` for every API request received (faulted ones too)."""
        return self.log.counts

    def count(self, method: str = "*", path: str = "*") -> int:
        """Requests received for ``method``/``path`` (exact or ``fnmatch`` glob)."""
        return self.log.count(method, path)

    def reset_counts(self) -> None:
        """Zero the request counters, recorded requests, latency statistics and the counts of
        injected errors and hangs."""
        self.log.reset()
        self.latency.reset_stats()
        self.faults.injected = self.faults.hangs = 0

    def last_request(self, method: str, path: str) -> RecordedRequest | None:
        """The most recent request received for ``method``/``path`` (glob allowed)."""
        return self.log.last(method, path)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Recent requests (bounded), oldest first."""
        return self.log.recent

    @property
    def latency_applied(self) -> int:
        """How many requests had a non-zero artificial latency applied."""
        return self.latency.applied

    def stats(self) -> JSON:
        """A JSON-serialisable snapshot (also served at ``GET /_emulator/stats``)."""
        counts = self.log.counts
        return {
            "total": sum(counts.values()),
            "counts": {f"{m} {p}": n for (m, p), n in sorted(counts.items())},
            "latency": {
                "applied": self.latency.applied,
                "totalSeconds": round(self.latency.total_seconds, 6),
                "spec": list(self.latency.spec)
                if isinstance(self.latency.spec, tuple)
                else self.latency.spec,
            },
            "faults": {
                "injected": self.faults.injected,
                "hangs": self.faults.hangs,
                "pending": len(self.faults.pending),
                "errorRate": self.faults.error_rate,
            },
            "indexing": {"delay": self.store.indexing_delay},
            "tenants": len(self.store.tenants()),
        }

    # ----------------------------------------------------------- control

    @property
    def indexing_delay(self) -> float:
        """Seconds from a write until its document is indexed (settable; later writes only)."""
        return self.store.indexing_delay

    @indexing_delay.setter
    def indexing_delay(self, seconds: float) -> None:
        self.store.indexing_delay = seconds

    def set_indexing_delay(self, seconds: float) -> None:
        """Change the indexing delay at run time (documents already written keep theirs).

        Raises:
            ValueError: ``seconds`` is not a finite number ``>= 0``.
        """
        self.store.indexing_delay = seconds

    def set_latency(self, latency: LatencySpec, *, seed: int | None = None) -> None:
        """Change the latency model at runtime (``None`` disables it)."""
        self.latency.set(latency, seed=seed)

    def _arm(self, rule: FaultRule) -> FaultRule:
        """Where :meth:`fail_next` and :meth:`hang_next` (of :class:`FaultSchedule`) put a rule."""
        return self.faults.add(rule)

    def set_error_rate(
        self, rate: float, *, statuses: Sequence[int] | None = None, seed: int | None = None
    ) -> None:
        """Fail a seeded random fraction of API requests (``0`` disables)."""
        self.faults.set_error_rate(rate, statuses=statuses, seed=seed)

    def clear_faults(self) -> None:
        """Disarm every fault rule and the random error rate."""
        self.faults.clear()

    def reset(self, *, data: bool = True, counts: bool = True, faults: bool = True) -> None:
        """Reset stored data, counters and/or faults (all by default)."""
        if data:
            self.store.clear()
        if counts:
            self.reset_counts()
        if faults:
            self.clear_faults()

    def authorize(self, token: str | None) -> str | None:
        """Return the tenant for a bearer token, or ``None`` if it is not accepted."""
        if not token:
            return None
        if self.api_keys is not None and token not in self.api_keys:
            return None
        return token
