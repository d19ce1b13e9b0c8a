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
  mismatch, so eviction can only cause a miss, never a stale hit. Invalidation deletes tokens
  (``DEL`` needs no memory, so it works on a full ``noeviction`` server; the next read makes a
  new random one) and publishes, whatever the delete did; nothing is scanned, old entries expire.
  An invalidation that cannot reach Redis stays pending in the process (bounded: past 1024 they
  collapse into one ``clear``) and is replayed on the next successful contact, before the process
  serves anything from Redis again. What remains: a process that dies holding pending
  invalidations takes them with it (its peers keep the old entries until their ttl).
* **The protocol** of a call is written once, without I/O, in :mod:`.protocol`; ``tier.py`` holds
  a sync and an async driver that carry its steps out.
* **Single-flight across processes.** One script call, ``get-or-lease``, answers HIT (an entry
  whose tokens still match), LEASE (``SET NX PX``: this process fetches) or WAIT (someone else
  holds the lease). The leader stores with a compare-and-set script that refuses when any token
  changed since its lease (an invalidation happened during the fetch), then deletes its lease and
  pushes a wake-up on a signal list named after the lease, which lives 1 s, even when the server
  refuses the entry for memory. On a fetch error or a store that fails on the wire the leader
  releases and signals at once. Waiters block on ``BLMOVE signal signal`` (the element stays, so
  every waiter wakes) on connections of their own; they never poll (a lease whose TTL was
  removed by hand is given one back). A dead leader's lease expires and exactly one waiter takes
  it over; the others wait for that one. Past two leases of waiting in all a caller fetches
  itself. An entry carries its own expiry and is never served past it, whatever its TTL in Redis
  says; one that does not decode is a miss that leases and stores over it.
* **Authenticated entries.** With ``secret``, an entry's header ends in a MAC: HMAC-SHA256 under
  a key derived from the secret for this purpose alone (not the one tenant names are made with)
  of the entry's Redis key, header and payload. Every entry that leaves Redis (a shared hit, a
  read after a wait) is checked in constant time; one that does not verify (a writer without the
  secret put its own body under a live header, copied an entry to another key, or another secret
  sealed it) is a miss that leases and stores over it, counted in ``forged`` (outcome
  ``forged``), logged once. Without a secret, whoever can write the keys chooses the values. A
  tier the settings make from a URL takes its secret from ``shared_secret`` (or
  ``WM_MIDDLEWARE_SHARED_SECRET``).
* **Sick Redis.** No retries (one immediate retry on a connection the server closed), a deadline
  of ``op_timeout`` on connecting and on each whole command, however slowly its reply trickles
  in, and a circuit breaker: after ``breaker_errors`` consecutive failures calls skip the tier
  for ``breaker_cooldown`` seconds, then one call probes. A tier failure is counted in ``errors``
  and the fetch runs directly: a call never fails because of the tier. One WARNING (logger
  ``wm_middleware.shared``) says when the server cannot be reached, one INFO when it is back;
  one WARNING per cause says what the server refuses (a missing database, ``NOPERM``; see
  :mod:`.health`). A URL whose database is not a number is refused up front.
  Credentials never appear in an error, a repr or a log line.
* **Invalidation delivery.** One subscriber thread per process listens on the namespace's
  channel (plain ``PUBLISH``, which a Cluster relays to every node). Messages carry digests only,
  never query text or parameters; each process maps them to the keys and scopes it loaded and
  drops those L1 entries through ``drop_local``. It pings every 0.1 s; a connection lost (or a
  ping unanswered for 0.3 s, its own pauses not counted) makes it clear the bound memories,
  again once it is back, and until then values from the shared tier are returned but not kept
  in L1.
* **Processes, threads, loops.** Connections, the subscriber and locks are made lazily in the
  process that uses them (a pid change resets them: gunicorn and Celery fork after import);
  ``close()`` or ``with RedisTier(url) as tier:`` releases them. Sync
  calls share one pool; each event loop gets its own asyncio clients (measured: a shared hit
  106 us p50 that way against 136 us for the sync client in a thread, and a waiter holds no
  thread while it blocks).
* **Near-duplicate evidence** (:mod:`.evidence`): a hash per configuration family, a field per
  similarity band and process holding that process's totals (sealed under the secret), so the
  fleet decides on every process's verdicts, each counted once.
* **Values.** JSON by default: only values that survive a JSON round trip unchanged are shared;
  others (and values over ``max_value_bytes``) stay in this process's L1, silently, and a marker
  tells other processes to fetch for themselves rather than queue behind a lease. Never pickle.
  A load given a ``SharedCodec`` (every adapter passes one) stores ``codec.dump(value)``, the
  API's JSON body, and rebuilds the client's own type with ``codec.load`` on a hit.
"""

from __future__ import annotations

from .urls import SCHEMES, SCHEMES_NAMED, masked

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from .tier import RedisTier, SharedOutcome

__all__ = ["SCHEMES", "SCHEMES_NAMED", "RedisTier", "SharedOutcome", "masked"]


def __getattr__(name: str) -> object:
    # Lazy, so the URL facts serve without redis-py (the CLI and the settings check URLs).
    if name not in ("RedisTier", "SharedOutcome"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import redis  # noqa: F401
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("RedisTier needs redis-py: pip install 'wm-middleware[redis]'") from error
    from . import tier

    return getattr(tier, name)
