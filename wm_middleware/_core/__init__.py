"""The cache core: standard library only, nothing of Supermemory, HTTP or OpenTelemetry.

One idea per module:

* ``keys``: a request as a cache key (query normalisation, parameter freezing, their memo);
* ``store``: the LRU + TTL store, a plain data structure (entries, expiry, scopes, counters);
* ``flight``: single-flight (who fetches, who waits; every race, under its own lock);
* ``outcomes``: how a lookup ended, and the counters that count it;
* ``stats``: :class:`CacheStats`, the statistics a memory reports (loaded on first use);
* ``tier``: the seam a shared second tier plugs into;
* ``settling``: scopes a write has changed but the backend has not applied yet;
* ``memory``: :class:`WorkingMemory`, the facade composing them.

The names below are the core's interface to the rest of the package. ``instrument()`` makes a
memory at an application's start-up, so the core's import loads neither :mod:`dataclasses`,
:mod:`inspect` nor :mod:`logging` (each costs tens of milliseconds there): its records are named
tuples or slotted classes, and ``CacheStats``, a dataclass, is imported when first asked for.
"""

from typing import TYPE_CHECKING, Any

from .keys import UNSET, Key, make_key, normalise_query
from .memory import WorkingMemory
from .outcomes import MISSING, Loaded, Outcome, Tier, TierOutcome
from .settling import Settle, check_seconds
from .tier import InvalidationSink, SharedCodec, SharedTier, TierResult

if TYPE_CHECKING:
    from .stats import CacheStats

__all__ = [
    "MISSING",
    "UNSET",
    "CacheStats",
    "InvalidationSink",
    "Key",
    "Loaded",
    "Outcome",
    "Settle",
    "SharedCodec",
    "SharedTier",
    "Tier",
    "TierOutcome",
    "TierResult",
    "WorkingMemory",
    "check_seconds",
    "make_key",
    "normalise_query",
]


def __getattr__(name: str) -> Any:
    if name == "CacheStats":  # see the module docstring
        from .stats import CacheStats

        return CacheStats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
