"""The ledger that keeps a cache from costing more upstream requests than no cache.

Every read answered without a request of its own (a hit, a shared hit, a read that joined
another caller's fetch) earns one credit; every status check, and every background refresh
(a request no read asked for), spends one. A status check is made only when a credit is there.
So, over any sequence of calls, ``checks + refreshes <= answered from memory`` and

    upstream requests with the cache = writes + fetches + checks + refreshes
                                    <= writes + fetches + answered from memory
                                    <= writes + reads = upstream requests without it.

``earned`` is written without a lock by many threads (an increment lost to a race only lowers
the balance: the bound holds either way); ``spent`` only under the ledger's lock, by
:meth:`take`, and by :meth:`spend`, which may take the balance below zero (a refresh is made
whatever the ledger says: it follows a hit, which earned first).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from .._core.forks import reset_in_child

__all__ = ["Ledger"]

T = TypeVar("T")


class Ledger:
    """Credits of one runtime: earned by reads served from memory, spent by requests of its own."""

    __slots__ = ("__weakref__", "_lock", "earned", "spent")

    def __init__(self) -> None:
        self.earned = 0  # reads answered from memory; unlocked increments (see the module)
        self.spent = 0  # lock: status checks and refreshes
        self._lock = threading.Lock()
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``_core/forks.py``): a new lock, and no credit: what the
        parent's reads earned, the parent spends (the bound holds for each process)."""
        self._lock = threading.Lock()
        self.earned = self.spent = 0

    @property
    def balance(self) -> int:
        return self.earned - self.spent

    def earn(self) -> None:
        """A read was answered without a request of its own."""
        self.earned += 1

    def spend(self) -> None:
        """A request no read paid for was made (a background refresh)."""
        with self._lock:
            self.spent += 1

    def spending(self, fetch: Callable[[], T]) -> Callable[[], T]:
        """``fetch`` of a background refresh: a request no read asked for, spent here."""

        def fetch_spent() -> T:
            self.spend()
            return fetch()

        return fetch_spent

    def take(self, owed: int = 0) -> bool:
        """Spend one credit for a status check if one is there beyond ``owed`` (refreshes
        started and not yet spent); False: make no check."""
        with self._lock:
            if self.earned - self.spent - owed < 1:
                return False
            self.spent += 1
            return True
