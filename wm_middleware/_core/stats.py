"""The statistics a :class:`WorkingMemory` reports.

A module of its own because :class:`CacheStats` is a dataclass, and :mod:`dataclasses` costs an
application tens of milliseconds of start-up: it is imported by the first ``stats()``, not by
``instrument()``. The rest of the core's records are named tuples or slotted classes for the
same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CacheStats"]


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A consistent snapshot of a :class:`WorkingMemory`'s counters.

    Every lookup (``get``, ``search``, ``asearch``, ``load``, ``aload``) counts exactly one of
    ``hits``, ``misses`` and ``coalesced`` (joined a fetch already in flight). ``evictions`` are
    LRU drops at ``max_entries``; ``expirations`` are entries found, or dropped to make room, past
    their TTL; ``invalidations`` are entries dropped by ``invalidate``, ``invalidate_scope``,
    ``clear`` or the shared tier. ``size`` counts pinned entries too; ``inflight`` is the number
    of fetches running now.

    With a shared tier: a value the tier had stored is a hit and also a ``shared_hit``; a lookup
    that waited for another process's fetch is ``coalesced`` and also a ``shared_wait``; ``misses``
    are the fetches this process ran. ``shared_errors`` are tier operations that failed or timed
    out and were treated as a miss.

    Near-duplicate shadow mode (``semantic``; all zero when off), one count per miss compared:
    ``near_candidates`` misses had a cached query of their partition as a candidate, of which
    ``near_agreed`` would have been answered alike and ``near_disagreed`` not; ``near_vetoed``
    had near queries that a veto all refused; ``near_errors`` could not be compared because the
    embedding failed or ran out of time. Serving them (``SemanticReuse(serve=True)``):
    ``near_served`` misses were answered with a near-duplicate's entry (a near hit, counted
    in none of ``hits``, ``misses``, ``coalesced``), ``near_verified`` of them were fetched
    anyway beside the caller and compared (each also a candidate, agreed or disagreed), and
    ``near_served_bound`` is the highest 95% upper bound on disagreement a near hit was served
    under (0.0 before the first). See :func:`wm_middleware.semantic.report`.
    """

    hits: int = 0
    misses: int = 0
    coalesced: int = 0
    evictions: int = 0
    expirations: int = 0
    invalidations: int = 0
    size: int = 0
    inflight: int = 0
    shared_hits: int = 0
    shared_waits: int = 0
    shared_errors: int = 0
    near_candidates: int = 0
    near_agreed: int = 0
    near_disagreed: int = 0
    near_vetoed: int = 0
    near_errors: int = 0
    near_served: int = 0
    near_verified: int = 0
    near_served_bound: float = 0.0

    @property
    def lookups(self) -> int:
        """Every counted lookup (near hits included)."""
        return self.hits + self.misses + self.coalesced + self.near_served

    @property
    def hit_ratio(self) -> float:
        """Share of lookups that did not wait for a fetch of their own (0.0 with no lookups):
        hits, coalesced reads and near hits."""
        lookups = self.lookups
        return (self.hits + self.coalesced + self.near_served) / lookups if lookups else 0.0
