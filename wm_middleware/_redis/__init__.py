"""``RedisTier``: the shared second tier on Redis or Valkey (standalone or Cluster).

One upstream fetch per key across a fleet of processes, and invalidation that reaches every
process's L1. How, in one place:

* **Keys.** ``<namespace>:v1:{t:<tenant>}:<kind>:<sha256 of the canonical key>``. The ``{...}``
  hash tag makes every key one call touches live in one Cluster slot (no CROSSSLOT). The tenant is
  a fingerprint of (base URL, API-key fingerprint) taken from the ``("tenant", ...)`` scope an
  adapter puts on its reads (an HMAC-SHA256 with ``secret`` when given), else the namespace. The
  API key itself never reaches Redis: adapters only ever hold its fingerprint.
* **Generations.** Every scope of an entry, the entry's own key and the tenant as a whole have a
  generation token: a random string, never a counter (a counter evicted and recreated at 1 would
  revive old entries). An entry records the tokens it was fetched under; a missing token is a
  mismatch, so eviction can only cause a miss, never a stale hit. Invalidation replaces tokens
  (``SET ... XX KEEPTTL``) and publishes; nothing is scanned or deleted, old entries expire.
* **Single-flight across processes.** One script call, ``get-or-lease``, answers HIT (an entry
  whose tokens still match), LEASE (``SET NX PX``: this process fetches) or WAIT (someone else
  holds the lease). The leader stores with a compare-and-set script that refuses when any token
  changed since its lease (an invalidation happened during the fetch), then deletes its lease and
  pushes a wake-up on a signal list named after the lease, which lives 1 s. On an error the
  leader releases and signals at once. Waiters block on ``BLMOVE signal signal`` (the element
  stays, so every waiter wakes) on connections of their own; they never poll. A dead leader's
  lease expires and a waiter takes it over; past ``lease`` seconds of waiting a caller fetches
  itself.
* **Sick Redis.** No client retries, ``op_timeout`` on connect and every socket operation, and a
  circuit breaker: after ``breaker_errors`` consecutive failures calls skip the tier for
  ``breaker_cooldown`` seconds, then one call probes. A tier failure is counted in ``errors`` and
  the fetch runs directly: a call never fails because of the tier.
* **Invalidation delivery.** One subscriber thread per process listens on the namespace's
  channel (plain ``PUBLISH``, which a Cluster relays to every node) and drops matching L1 entries
  through ``drop_local``. It pings every 0.1 s; a connection lost (or silent for 0.4 s) makes it
  clear the bound memories, again once it is back, and until then values from the shared tier
  are returned but not kept in L1.
* **Processes, threads, loops.** Connections, the subscriber and locks are made lazily in the
  process that uses them (a pid change resets them: gunicorn and Celery fork after import). Sync
  calls share one pool; each event loop gets its own asyncio clients (measured: a shared hit
  106 us p50 that way against 136 us for the sync client in a thread, and a waiter holds no
  thread while it blocks).
* **Values.** JSON by default: only values that survive a JSON round trip unchanged are shared;
  others (and values over ``max_value_bytes``) stay in this process's L1, silently, and a marker
  tells other processes to fetch for themselves rather than queue behind a lease. Never pickle.
  A load given a ``SharedCodec`` (every adapter passes one) stores ``codec.dump(value)``, the
  API's JSON body, and rebuilds the client's own type with ``codec.load`` on a hit.
"""

from __future__ import annotations

try:
    import redis  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("RedisTier needs redis-py: pip install 'wm-middleware[redis]'") from error

from .tier import RedisTier, SharedOutcome

__all__ = ["RedisTier", "SharedOutcome"]
