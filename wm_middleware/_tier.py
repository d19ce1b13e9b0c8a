"""The seam between the in-process working memory (L1) and an optional shared second tier.

Lookup order is: L1, then the in-process flight, then the shared tier, then the fetch. The
working memory calls the tier only from the leader of an in-process flight, so one process sends
at most one tier request per key at a time. Knows nothing of Redis: ``RedisTier`` implements it.

Contract for an implementation:

* ``load`` / ``aload`` never raise because of the tier itself: a tier failure is counted in
  ``errors`` and the fetch runs directly. An exception of ``fetch`` propagates unchanged and is
  cached nowhere.
* ``invalidate`` / ``clear`` reach every process sharing the tier, including this one's L1 via
  :meth:`InvalidationSink.drop_local` of the memories bound to the tier.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["InvalidationSink", "SharedTier", "TierOutcome", "TierResult"]

TierOutcome = Literal["fetched", "shared_hit", "shared_wait"]
"""How the tier produced a value: this process fetched it, it was stored in the shared tier, or
another process fetched it while this one waited."""


@dataclass(frozen=True, slots=True)
class TierResult:
    """What :meth:`SharedTier.load` returns to the in-process leader."""

    value: Any
    outcome: TierOutcome
    # False while the tier cannot promise to deliver invalidations to this process (its
    # subscriber is not confirmed): the value is returned to the callers but not kept in L1.
    keep_local: bool = True


class InvalidationSink(Protocol):
    """What a tier calls back when another process invalidates (the working memory)."""

    def drop_local(
        self,
        *,
        keys: Iterable[Hashable] = (),
        scopes: Iterable[Hashable] = (),
        everything: bool = False,
    ) -> int:
        """Drop matching L1 entries and detach matching local flights, without telling the tier."""
        ...


@runtime_checkable
class SharedTier(Protocol):
    """A second cache tier shared by several processes."""

    @property
    def errors(self) -> int:
        """Tier operations that failed or timed out and were treated as a miss."""
        ...

    def bind(self, memory: InvalidationSink) -> None:
        """Register ``memory`` to hear invalidations from other processes."""
        ...

    def load(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Any],
    ) -> TierResult:
        """Shared hit, or wait for another process's fetch, or lease, fetch and store."""
        ...

    async def aload(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Awaitable[Any]],
    ) -> TierResult:
        """Async :meth:`load`."""
        ...

    def invalidate(self, *, keys: Iterable[Hashable] = (), scopes: Iterable[Hashable] = ()) -> None:
        """Make every process miss ``keys`` and every entry carrying one of ``scopes``."""
        ...

    def clear(self) -> None:
        """Make every process miss every entry of this tier's namespace."""
        ...
