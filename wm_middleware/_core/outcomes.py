"""How a lookup ended, in one vocabulary: what callers read, what the counters count.

A lookup ends in exactly one :data:`Outcome` (``hit``, ``miss`` or ``coalesced``) served by one
:data:`Tier` (``local`` or ``shared``). The leader of a fetch learns from the shared tier how the
value was produced (:data:`TierOutcome`), or finds the value stored already (``"hit"``), which
:data:`SERVED` maps to the caller's words. :class:`Counters` holds the lookup counters the
memory's :class:`~.stats.CacheStats` reports; the store counts what happens to entries.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Any, Final, Literal, Protocol

    from .stats import CacheStats

__all__ = ["MISSING", "NEAR", "SERVED", "Counters", "Loaded", "TierResult"]

NEAR: Final = ("candidates", "agreed", "disagreed", "vetoed", "errors", "served", "verified")
"""What near-duplicate reuse counts (``CacheStats.near_*``)."""

if TYPE_CHECKING:  # the vocabulary, for type checkers (and readers)
    Outcome = Literal["hit", "miss", "coalesced"]
    """How a caller got its value: stored already, fetched by this call, or shared another's."""

    Tier = Literal["local", "shared"]
    """Which tier served the value: this process's memory, or the one shared with others."""

    TierOutcome = Literal["fetched", "shared_hit", "shared_wait"]
    """How the tier produced a value: this process fetched it, it was stored in the shared tier,
    or another process fetched it while this one waited."""

    LeaderOutcome = Literal["hit", "fetched", "shared_hit", "shared_wait"]
    """What a flight's leader found: the key stored meanwhile (``hit``), or a TierOutcome."""

SERVED: Final[dict[LeaderOutcome, tuple[Outcome, Tier]]] = {
    "hit": ("hit", "local"),
    "fetched": ("miss", "local"),
    "shared_hit": ("hit", "shared"),
    "shared_wait": ("coalesced", "shared"),
}
"""A leader's outcome as its caller reads it. A caller that joined a local flight is
``("coalesced", "local")`` whatever its leader found."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""What a lookup returns for a key that holds no live value (``None`` is a valid value)."""


class Counters:
    """The lookup counters of one memory, written without a lock.

    ``x += 1`` on an attribute is not atomic across threads in every interpreter, but under the
    GIL a lost increment needs a thread switch inside it; the counters are statistics, and a
    snapshot of them is taken under the memory's lock. Callers that join a local flight are
    counted by the flight group (``Group.joined``), not here.
    """

    __slots__ = (
        "coalesced",
        "hits",
        "misses",
        "near",
        "near_bound",
        "shared_faults",
        "shared_hits",
        "shared_waits",
    )

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.coalesced = 0  # waits for another process's fetch; local joins are the group's
        self.shared_hits = 0
        self.shared_waits = 0
        self.shared_faults = 0  # tier exceptions the tier should have absorbed itself
        # Near-duplicate shadow comparisons by verdict (candidates, agreed, disagreed, vetoed,
        # errors), counted by the runtime's shadow mode through WorkingMemory.count_near.
        self.near = dict.fromkeys(NEAR, 0)
        self.near_bound = 0.0  # the highest bound a near hit was served under

    def led(self, outcome: LeaderOutcome) -> None:
        """Count the lookup of a flight's leader by what it found."""
        if outcome == "hit":
            self.hits += 1
        elif outcome == "shared_hit":
            self.hits += 1
            self.shared_hits += 1
        elif outcome == "shared_wait":
            self.coalesced += 1
            self.shared_waits += 1
        else:
            self.misses += 1

    def snapshot(
        self, entries: EntryCounts, *, joined: int, inflight: int, tier_errors: int
    ) -> CacheStats:
        """These counters with the store's (``entries``) and the flight group's, as stats.

        ``joined`` callers shared a local flight; ``tier_errors`` are the failures the tier
        counted itself, added to the faults counted here.
        """
        from .stats import CacheStats  # imported by the first snapshot: see stats.py

        return CacheStats(
            hits=self.hits,
            misses=self.misses,
            coalesced=self.coalesced + joined,
            evictions=entries.evictions,
            expirations=entries.expirations,
            invalidations=entries.invalidations,
            size=len(entries),
            inflight=inflight,
            shared_hits=self.shared_hits,
            shared_waits=self.shared_waits,
            shared_errors=self.shared_faults + tier_errors,
            near_candidates=self.near["candidates"],
            near_agreed=self.near["agreed"],
            near_disagreed=self.near["disagreed"],
            near_vetoed=self.near["vetoed"],
            near_errors=self.near["errors"],
            near_served=self.near["served"],
            near_verified=self.near["verified"],
            near_served_bound=self.near_bound,
        )


if TYPE_CHECKING:

    class EntryCounts(Protocol):
        """What the store counts of its entries (:class:`~.store.Store` is one)."""

        evictions: int
        expirations: int
        invalidations: int

        def __len__(self) -> int: ...


class Loaded:
    """What :meth:`WorkingMemory.load` returns: the value and how it was obtained.

    ``outcome`` is ``"hit"``, ``"miss"`` (this call ran the fetch) or ``"coalesced"`` (it shared
    another caller's fetch). ``tier`` is ``"shared"`` when the shared tier served it (a shared hit,
    or another process's fetch), else ``"local"``. ``leader`` is the ``info`` of the call whose
    fetch produced the value (this call's own on a miss; ``None`` on a hit or a shared result).
    """

    __slots__ = ("leader", "outcome", "tier", "value")

    def __init__(self, value: Any, outcome: Outcome, tier: Tier, leader: object) -> None:
        self.value = value
        self.outcome = outcome
        self.tier = tier
        self.leader = leader

    def __repr__(self) -> str:
        return f"Loaded(outcome={self.outcome!r}, tier={self.tier!r}, value={self.value!r})"


class TierResult:
    """What :meth:`SharedTier.load` returns to the in-process leader."""

    __slots__ = ("keep_local", "left", "outcome", "value")

    def __init__(
        self, value: Any, outcome: TierOutcome, keep_local: bool = True, left: float | None = None
    ) -> None:
        # keep_local: False while the tier cannot promise to deliver invalidations to this
        # process (its subscriber is not confirmed): the value reaches the callers, not L1.
        # left: seconds the shared entry had left when it was read (None: fetched here, or
        # unknown); an L1 copy of it lives no longer.
        self.value, self.outcome, self.keep_local, self.left = value, outcome, keep_local, left

    def __repr__(self) -> str:
        return f"TierResult(outcome={self.outcome!r}, keep_local={self.keep_local})"
