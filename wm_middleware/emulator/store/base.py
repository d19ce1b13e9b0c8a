"""The store's foundation: the lock, the id source, the tenants and the indexing delay."""

from __future__ import annotations

import random
import string
import threading
import time
from collections.abc import Iterable

from .model import Document, TenantData, check_indexing_delay, utc_now

__all__ = ["StoreBase"]


class StoreBase:
    """Thread-safe, tenant-scoped state (one re-entrant lock guards every method)."""

    def __init__(self, *, seed: int | None = None, indexing_delay: float = 0.0) -> None:
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._tenants: dict[str, TenantData] = {}
        self._indexing_delay = check_indexing_delay(indexing_delay)

    @property
    def indexing_delay(self) -> float:
        """Seconds from a write until its document is indexed; applies to later writes.

        Raises:
            ValueError: on assignment, not a finite number ``>= 0``.
        """
        return self._indexing_delay

    @indexing_delay.setter
    def indexing_delay(self, value: float) -> None:
        self._indexing_delay = check_indexing_delay(value)

    def _schedule(self, doc: Document) -> None:
        """Start (again) indexing ``doc`` now, over the current delay."""
        doc.queued_at = time.monotonic()
        doc.ready_at = doc.queued_at + self._indexing_delay

    # ------------------------------------------------------------------ basics

    def new_id(self, length: int = 22) -> str:
        """Return a fresh random id shaped like Supermemory's (alphanumeric)."""
        alphabet = string.ascii_letters + string.digits
        with self._lock:
            return "".join(self._rng.choice(alphabet) for _ in range(length))

    def _tenant(self, tenant: str) -> TenantData:
        t = self._tenants.get(tenant)
        if t is None:
            t = self._tenants[tenant] = TenantData()
        return t

    def clear(self, tenant: str | None = None) -> None:
        """Drop all data (of one tenant, or of every tenant)."""
        with self._lock:
            if tenant is None:
                self._tenants.clear()
            else:
                self._tenants.pop(tenant, None)

    def tenants(self) -> list[str]:
        """Return the API keys that have data."""
        with self._lock:
            return list(self._tenants)

    def _touch_namespace(self, t: TenantData, tags: Iterable[str]) -> None:
        for tag in tags:
            t.namespace_created.setdefault(tag, utc_now())
