"""The cache core: standard library only, nothing of Supermemory, HTTP or OpenTelemetry.

One idea per module:

* ``keys``: a request as a cache key (query normalisation, parameter freezing, their memo);
* ``store``: the LRU + TTL store, a plain data structure (entries, expiry, scopes, counters);
* ``flight``: single-flight (who fetches, who waits; every race, under its own lock);
* ``outcomes``: how a lookup ended, and the statistics that count it;
* ``tier``: the seam a shared second tier plugs into;
* ``settling``: scopes a write has changed but the backend has not applied yet;
* ``memory``: :class:`WorkingMemory`, the facade composing them.

The names below are the core's interface to the rest of the package.
"""

from .keys import UNSET, Key, make_key, normalise_query
from .memory import WorkingMemory
from .outcomes import MISSING, CacheStats, Loaded, Outcome, Tier, TierOutcome
from .settling import Settle, check_seconds
from .tier import InvalidationSink, SharedCodec, SharedTier, TierResult

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
