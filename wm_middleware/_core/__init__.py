"""The cache core: standard library only, nothing of Supermemory, HTTP or OpenTelemetry.

One idea per module:

* ``keys``: a request as a cache key (query normalisation, parameter freezing, their memo);
* ``store``: the LRU + TTL store, a plain data structure (entries, expiry, scopes, counters);
* ``flight``: single-flight (who fetches, who waits; every race, under its own lock);
* ``outcomes``: how a lookup ended, what a load returns, and the counters that count it;
* ``stats``: :class:`CacheStats`, the statistics a memory reports;
* ``tier``: the seam a shared second tier plugs into (its protocols);
* ``settling``: scopes a write has changed but the backend has not applied yet;
* ``forks``: what a forked child must not inherit (each holder resets itself there);
* ``memory``: :class:`WorkingMemory`, the facade composing them (``generic``: its ``[T]``);
* ``lazy``: names imported when first asked for (the start-up rule below, the package's too).

The names below are the core's interface to the rest of the package.

Start-up cost. ``instrument()`` makes a memory at an application's start-up, where importing
:mod:`typing`, :mod:`dataclasses`, :mod:`inspect`, :mod:`logging` or :mod:`copy` would cost more
than the rest of it (``benchmarks/bench_startup.py``). So the modules a memory is made of import
none of them: their records are slotted classes, names only type checkers need are imported
under ``TYPE_CHECKING = False`` (true for a type checker, false at run time), and the rest are
imported where first needed: ``inspect`` by a miss or a settle, ``copy`` by ``copy=True``,
``logging`` by a line to log, ``stats`` (a dataclass) by the first ``stats()``, ``tier`` (typing's
protocols) by a shared tier. ``tests/configuration/test_lazy_patching.py`` keeps it so.
"""

from __future__ import annotations

from .keys import UNSET, Key, make_key, normalise_query
from .lazy import lazily
from .memory import WorkingMemory
from .outcomes import MISSING, Loaded, TierResult
from .settling import Settle, check_seconds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .stats import CacheStats
    from .tier import InvalidationSink, SharedCodec, SharedTier

__all__ = [
    "MISSING",
    "UNSET",
    "CacheStats",
    "InvalidationSink",
    "Key",
    "Loaded",
    "Settle",
    "SharedCodec",
    "SharedTier",
    "TierResult",
    "WorkingMemory",
    "check_seconds",
    "make_key",
    "normalise_query",
]

# Imported when first asked for (see the module docstring): name -> its module.
__getattr__ = lazily(
    __name__,
    {
        "CacheStats": ".stats",
        "InvalidationSink": ".tier",
        "SharedCodec": ".tier",
        "SharedTier": ".tier",
    },
)
