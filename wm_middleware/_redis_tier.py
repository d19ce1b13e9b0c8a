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
  channel and drops matching L1 entries through ``drop_local``. It pings every 0.1 s; a
  connection lost (or silent for 0.4 s) makes it clear the bound memories and, until it is
  subscribed again, values from the shared tier are returned but not kept in L1.
* **Processes, threads, loops.** Connections, the subscriber and locks are made lazily in the
  process that uses them (a pid change resets them: gunicorn and Celery fork after import). Sync
  calls share one pool; each event loop gets its own asyncio clients.
* **Values.** JSON by default: only values that survive a JSON round trip unchanged are shared;
  others (and values over ``max_value_bytes``) stay in this process's L1, silently, and a marker
  tells other processes to fetch for themselves rather than queue behind a lease. Never pickle.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import os
import secrets
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

try:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster
    from redis.backoff import NoBackoff
    from redis.exceptions import NoScriptError, RedisError
    from redis.retry import Retry
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("RedisTier needs redis-py: pip install 'wm-middleware[redis]'") from error

from ._tier import InvalidationSink, TierResult

__all__ = ["RedisTier", "SharedOutcome", "canonical_key", "key_from_canonical"]

SharedOutcome = Literal["hit", "miss", "lease", "wait", "wait_timeout", "store_refused", "error"]
"""What one tier operation ended in, as reported to ``on_operation``."""

_SCHEMA: Final = b"wm1"
_SIGNAL_MS: Final = 1000  # a wake-up outlives its push by 1 s: covers a waiter arriving just after
_PING_EVERY: Final = 0.1
_SILENCE_LIMIT: Final = 0.4  # + one read timeout: a lost subscriber is noticed within 0.5 s
_TIER_ERRORS: Final = (RedisError, OSError, asyncio.TimeoutError)

# --------------------------------------------------------------------------------------------
# Scripts. Keys: KEYS[1..] as documented per script; every key shares the call's hash tag.

# KEYS: entry, lease, token keys... ; ARGV: fresh token, token ttl ms, lease ms, owner,
# [registry key name, tenant] (standalone only: the registry lives in another slot)
_GET_OR_LEASE: Final = b"""
local sig = {}
for i = 3, #KEYS do
  local t = redis.call('GET', KEYS[i])
  if not t then
    t = ARGV[1] .. i
    redis.call('SET', KEYS[i], t, 'PX', ARGV[2])
  end
  sig[#sig + 1] = t
end
sig = table.concat(sig, ',')
local v = redis.call('GET', KEYS[1])
if v then
  local nl = string.find(v, '\\n', 1, true)
  if nl and string.match(string.sub(v, 1, nl - 1), '^wm1 (%S+)') == sig then
    return {'HIT', v}
  end
end
if redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[3]) then
  if ARGV[5] then
    redis.call('SADD', ARGV[5], ARGV[6])
    if redis.call('PTTL', ARGV[5]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', ARGV[5], ARGV[2])
    end
  end
  return {'LEASE', sig}
end
return {'WAIT', redis.call('GET', KEYS[2]) or '', redis.call('PTTL', KEYS[2])}
"""

# KEYS: entry, lease, signal, token keys... ; ARGV: signature, owner, envelope ('' = release
# only), entry ttl ms, signal ms. Returns 1 stored, 0 refused (tokens changed) or released.
_STORE: Final = b"""
local stored = 0
if ARGV[3] ~= '' then
  local cur = {}
  for i = 4, #KEYS do
    local t = redis.call('GET', KEYS[i])
    if not t then cur = nil break end
    cur[#cur + 1] = t
  end
  if cur and table.concat(cur, ',') == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
    for i = 4, #KEYS do
      if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[4]) then
        redis.call('PEXPIRE', KEYS[i], ARGV[4])
      end
    end
    stored = 1
  end
end
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
redis.call('RPUSH', KEYS[3], '1')
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return stored
"""

# KEYS: registry; ARGV: tenant, ttl ms. The registry lists the tenants that may hold entries, so
# an invalidation naming no tenant reaches them all. Run apart only on Cluster (another slot).
_REGISTER: Final = b"""
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
"""

_GET_OR_LEASE_SHA: Final = hashlib.sha1(_GET_OR_LEASE).hexdigest()
_STORE_SHA: Final = hashlib.sha1(_STORE).hexdigest()
_REGISTER_SHA: Final = hashlib.sha1(_REGISTER).hexdigest()


# --------------------------------------------------------------------------------------------
# Canonical keys: the same Python key gives the same bytes in every process (``hash()`` does not:
# it is salted per process), and the bytes decode back to an equal key for ``drop_local``.


def _encode_part(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        return {"float": repr(value)}
    if kind is tuple:
        return [_encode_part(item) for item in value]
    if kind is frozenset:
        items = sorted(_dump(_encode_part(item)) for item in value)
        return {"set": items}
    raise TypeError(f"a shared key holds only tuple/str/int/float/bool/None, not {kind.__name__}")


def _decode_part(value: Any) -> Any:
    if type(value) is list:
        return tuple(_decode_part(item) for item in value)
    if type(value) is dict:
        if "set" in value:
            return frozenset(_decode_part(json.loads(item)) for item in value["set"])
        return float(value["float"])
    return value


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def canonical_key(key: Hashable) -> str:
    """The canonical text of a cache key or scope, equal across processes and Python runs.

    Raises:
        TypeError: the key holds something other than tuples, frozensets, str, int, float,
            bool and None (such a key is simply not shared).
    """
    return _dump(_encode_part(key))


def key_from_canonical(text: str) -> Hashable:
    """The key whose :func:`canonical_key` is ``text``."""
    return _decode_part(json.loads(text))  # type: ignore[no-any-return]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# --------------------------------------------------------------------------------------------
# Values


def _json_encode(value: Any) -> bytes | None:
    """JSON bytes of ``value`` when it survives the round trip unchanged, else None."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if json.loads(text) != value or not _same_shape(json.loads(text), value):
        return None
    return text.encode()


def _same_shape(decoded: Any, value: Any) -> bool:
    # ``==`` takes a tuple for a list's equal only when both are lists, but takes 1 for True and
    # 1.0 for 1: compare types all the way down so a value comes back as the caller stored it.
    if type(decoded) is not type(value):
        return False
    if type(value) is dict:
        return all(_same_shape(decoded[k], v) for k, v in value.items())
    if type(value) is list:
        return all(_same_shape(d, v) for d, v in zip(decoded, value, strict=True))
    return True


# --------------------------------------------------------------------------------------------
# Circuit breaker


class _Breaker:
    """Closed -> open after ``limit`` consecutive failures -> one probe after ``cooldown``.

    ``allow`` is asked before a tier operation; exactly one of ``succeeded`` / ``failed`` follows
    every allowed one. The lock guards the three fields; it is never held across I/O.
    """

    __slots__ = ("_cooldown", "_failures", "_limit", "_lock", "_open_until", "_probing")

    def __init__(self, limit: int, cooldown: float) -> None:
        self._limit = limit
        self._cooldown = cooldown
        self._lock = threading.Lock()
        self._failures = 0
        self._open_until = 0.0  # monotonic; 0 = closed
        self._probing = False  # a half-open probe is in flight

    @property
    def state(self) -> Literal["closed", "open", "half_open"]:
        with self._lock:
            if self._failures < self._limit:
                return "closed"
            return "open" if time.monotonic() < self._open_until else "half_open"

    def allow(self) -> bool:
        if self._failures < self._limit:  # unlocked read: the common case costs no lock
            return True
        with self._lock:
            if self._failures < self._limit:
                return True
            if self._probing or time.monotonic() < self._open_until:
                return False
            self._probing = True
            return True

    def succeeded(self) -> None:
        if self._failures:
            with self._lock:
                self._failures = 0
                self._probing = False

    def failed(self) -> None:
        with self._lock:
            self._failures += 1
            self._probing = False
            if self._failures >= self._limit:
                self._open_until = time.monotonic() + self._cooldown


# --------------------------------------------------------------------------------------------
# Connections


@dataclass(frozen=True, slots=True)
class _Endpoint:
    """Where the server is and how to reach it; the tier makes every connection from this."""

    cluster: bool
    nodes: tuple[tuple[str, int], ...]  # cluster start-up nodes
    kind: Literal["tcp", "ssl", "unix"]
    kwargs: tuple[tuple[str, Any], ...]  # host/port/db/credentials/ssl settings


_KEPT_KWARGS: Final = frozenset(
    {"host", "port", "db", "username", "password", "path", "credential_provider", "protocol"}
)


def _kept(kwargs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(
        sorted(
            (k, v)
            for k, v in kwargs.items()
            if (k in _KEPT_KWARGS or k.startswith("ssl_")) and v is not None
        )
    )


def _kind_of(connection_class: type) -> Literal["tcp", "ssl", "unix"]:
    name = connection_class.__name__
    return "ssl" if "SSL" in name else "unix" if "Unix" in name else "tcp"


def _endpoint_of(target: object) -> _Endpoint:
    if isinstance(target, str):
        if not target.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"RedisTier target must be a redis://, rediss:// or unix:// URL, got {target!r}"
            )
        parsed = dict(redis.connection.parse_url(target))  # type: ignore[no-untyped-call]
        cls = parsed.pop("connection_class", redis.Connection)
        return _Endpoint(False, (), _kind_of(cls), _kept(parsed))
    if isinstance(target, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)):
        nodes = tuple((n.host, int(n.port)) for n in target.get_nodes())
        if isinstance(target, redis.cluster.RedisCluster):
            kwargs = dict(target.get_connection_kwargs())  # type: ignore[no-untyped-call]
        else:
            kwargs = dict(target.connection_kwargs)
        kind: Literal["tcp", "ssl", "unix"] = "ssl" if kwargs.get("ssl") else "tcp"
        return _Endpoint(True, nodes, kind, _kept(kwargs))
    if isinstance(target, (redis.Redis, redis.asyncio.Redis)):
        pool = target.connection_pool
        return _Endpoint(
            False, (), _kind_of(pool.connection_class), _kept(dict(pool.connection_kwargs))
        )
    raise TypeError(
        "RedisTier target must be a redis:// URL or a redis-py client "
        f"(Redis, RedisCluster or their asyncio twins), not {type(target).__name__}"
    )


def _client_kwargs(endpoint: _Endpoint, socket_timeout: float, connect_timeout: float) -> Any:
    kwargs = dict(endpoint.kwargs)
    kwargs.update(
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        health_check_interval=0,
    )
    return kwargs


def _sync_client(endpoint: _Endpoint, socket_timeout: float, connect_timeout: float) -> Any:
    kwargs = _client_kwargs(endpoint, socket_timeout, connect_timeout)
    # No retries: redis-py's default turns a 50 ms timeout into seconds of retrying.
    retry = Retry(NoBackoff(), 0)
    if endpoint.cluster:
        for name in ("host", "port", "db", "path"):
            kwargs.pop(name, None)
        nodes = [redis.cluster.ClusterNode(h, p) for h, p in endpoint.nodes]  # type: ignore[no-untyped-call]
        return redis.cluster.RedisCluster(
            startup_nodes=nodes, retry=retry, ssl=endpoint.kind == "ssl", **kwargs
        )
    cls = {
        "tcp": redis.Connection,
        "ssl": redis.SSLConnection,
        "unix": redis.UnixDomainSocketConnection,
    }[endpoint.kind]
    pool = redis.ConnectionPool(connection_class=cls, retry=retry, **kwargs)
    return redis.Redis(connection_pool=pool)


def _async_client(endpoint: _Endpoint, socket_timeout: float, connect_timeout: float) -> Any:
    import redis.asyncio.retry

    kwargs = _client_kwargs(endpoint, socket_timeout, connect_timeout)
    retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
    if endpoint.cluster:
        for name in ("host", "port", "db", "path"):
            kwargs.pop(name, None)
        kwargs.pop("health_check_interval", None)
        nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in endpoint.nodes]
        return redis.asyncio.cluster.RedisCluster(
            startup_nodes=nodes, retry=retry, ssl=endpoint.kind == "ssl", **kwargs
        )
    cls = {
        "tcp": redis.asyncio.Connection,
        "ssl": redis.asyncio.SSLConnection,
        "unix": redis.asyncio.UnixDomainSocketConnection,
    }[endpoint.kind]
    pool = redis.asyncio.ConnectionPool(connection_class=cls, retry=retry, **kwargs)
    return redis.asyncio.Redis(connection_pool=pool)


# --------------------------------------------------------------------------------------------
# The plan of one call: every Redis key it touches, all under one hash tag.


@dataclass(frozen=True, slots=True)
class _Plan:
    tenant: str  # the hash-tag body
    entry: str
    lease: str
    tokens: tuple[str, ...]  # tenant-wide, key, then one per scope
    ttl_ms: int
    token_ms: int

    def signal(self, owner: str) -> str:
        return f"{self.lease}:{owner}"


@dataclass(slots=True)
class _Conns:
    """The connections of one process (sync) or one event loop (async)."""

    main: Any
    blocking: Any


class _Process:
    """Everything that must not cross a fork: connections, locks, the subscriber."""

    def __init__(self, tier: RedisTier) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.sync: _Conns | None = None
        self.loops: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], _Conns]] = {}
        self.registered: dict[str, float] = {}  # tenant -> monotonic time of registration
        self.subscriber = _Subscriber(tier)


class _Subscriber:
    """The process's listener for invalidations published by any process.

    ``epoch`` moves on every loss of the connection; a load compares the epoch at its start and
    end, so a value fetched across a loss is not kept in L1 (its invalidation may be lost).
    """

    def __init__(self, tier: RedisTier) -> None:
        self._tier = weakref.ref(tier)
        self.confirmed = False
        self._missed = False  # lost since the last confirmation
        self.epoch = 0
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(
                target=self._run, name="wm-middleware-shared-subscriber", daemon=True
            )
            self.thread.start()

    def trusted(self, epoch: int) -> bool:
        return self.confirmed and self.epoch == epoch

    def _run(self) -> None:
        backoff = 0.05
        while not self.stopped.is_set():
            tier = self._tier()
            if tier is None:
                return
            pubsub = None
            try:
                client = _sync_client(tier._endpoint, tier._op_timeout, tier._op_timeout)
                channel = tier._channel
                del tier  # a tier dropped by its owner stops its subscriber
                pubsub = client.pubsub()
                pubsub.subscribe(channel)
                last_pong = last_ping = time.monotonic()
                while not self.stopped.is_set():
                    message = pubsub.get_message(timeout=_PING_EVERY / 2)
                    now = time.monotonic()
                    if message is not None:
                        last_pong = now
                        kind = message["type"]
                        if kind == "subscribe":
                            self._confirmed()
                            backoff = 0.05
                        elif kind == "message":
                            self._deliver(message["data"])
                    if now - last_ping >= _PING_EVERY:
                        pubsub.ping()
                        last_ping = now
                    if now - last_pong > _SILENCE_LIMIT:
                        raise TimeoutError("no reply from the server")
                    if self._tier() is None:
                        return
            except Exception:
                self._lost()
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.reset()
                    except Exception:
                        pass

    def _confirmed(self) -> None:
        self.confirmed = True
        if self._missed:
            # Back after a loss: what this process fetched meanwhile may have been invalidated
            # by a message it never heard.
            self._missed = False
            self._drop_everything()

    def _lost(self) -> None:
        # Messages published while we are away are gone: drop what L1 holds, once per loss.
        # Failed reconnections are not new losses: L1 keeps serving what this process fetches
        # itself (with Redis down, nobody can publish either).
        if self.confirmed:
            self.confirmed = False
            self.epoch += 1
            self._missed = True
            self._drop_everything()

    def _drop_everything(self) -> None:
        tier = self._tier()
        if tier is not None:
            for memory in tier._memories():
                try:
                    memory.drop_local(everything=True)
                except Exception:
                    pass

    def _deliver(self, data: bytes) -> None:
        tier = self._tier()
        if tier is None:
            return
        try:
            message = json.loads(data)
            keys = [key_from_canonical(k) for k in message.get("k", ())]
            scopes = [key_from_canonical(s) for s in message.get("s", ())]
            everything = bool(message.get("all"))
        except Exception:
            return  # not ours, or malformed: nothing to drop
        for memory in tier._memories():
            try:
                memory.drop_local(keys=keys, scopes=scopes, everything=everything)
            except Exception:
                pass


class RedisTier:
    """A shared second tier on Redis >= 6.2 or Valkey, standalone or Cluster.

    Args:
        target: a ``redis://`` / ``rediss://`` / ``unix://`` URL, or a redis-py client (``Redis``,
            ``RedisCluster`` or their asyncio twins). The tier makes its own connections from the
            client's address and credentials, with its own timeouts and no retries.
        namespace: prefix of every key and the channel; also the tenant of calls with no
            ``("tenant", ...)`` scope.
        secret: when given (str or bytes), tenant fingerprints are HMAC-SHA256 under it.
        op_timeout: seconds allowed for connecting and for each Redis operation.
        lease: seconds a leader may fetch before another process takes over; also the longest a
            caller waits for another process's fetch before fetching itself.
        breaker_cooldown: seconds the tier is skipped after ``breaker_errors`` consecutive errors.
        breaker_errors: consecutive tier errors that open the circuit breaker.
        encode / decode: ``encode(value) -> bytes | None`` (None keeps the value local) and
            ``decode(bytes) -> value``; both or neither. Default: JSON, sharing only values that
            survive a JSON round trip unchanged.
        max_value_bytes: encoded values above this stay local to the process.

    Raises:
        TypeError / ValueError: an argument of the wrong type or out of range.

    ``on_operation``, when set to a callable ``(outcome, seconds)``, hears every tier operation
    (see :data:`SharedOutcome`); it must be cheap, and what it raises is ignored.
    """

    def __init__(
        self,
        target: object,
        *,
        namespace: str = "wm",
        secret: str | bytes | None = None,
        op_timeout: float = 0.1,
        lease: float = 30.0,
        breaker_cooldown: float = 10.0,
        breaker_errors: int = 3,
        encode: Callable[[Any], bytes | None] | None = None,
        decode: Callable[[bytes], Any] | None = None,
        max_value_bytes: int = 1_048_576,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace must be a non-empty str")
        if any(c in namespace for c in "{} \t\r\n"):
            raise ValueError(f"namespace may not hold braces or whitespace: {namespace!r}")
        if secret is not None and not isinstance(secret, (str, bytes)):
            raise TypeError(f"secret must be str, bytes or None, not {type(secret).__name__}")
        if secret is not None and not secret:
            raise ValueError("secret must not be empty")
        for name, value in (
            ("op_timeout", op_timeout),
            ("lease", lease),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
            if not (0 < value < math.inf):
                raise ValueError(f"{name} must be positive and finite, got {value!r}")
        if isinstance(breaker_cooldown, bool) or not isinstance(breaker_cooldown, (int, float)):
            raise TypeError("breaker_cooldown must be a number of seconds")
        if not (0 <= breaker_cooldown < math.inf):
            raise ValueError(f"breaker_cooldown must be >= 0, got {breaker_cooldown!r}")
        if isinstance(breaker_errors, bool) or not isinstance(breaker_errors, int):
            raise TypeError("breaker_errors must be an int")
        if breaker_errors < 1:
            raise ValueError(f"breaker_errors must be >= 1, got {breaker_errors!r}")
        if (encode is None) != (decode is None):
            raise ValueError("pass encode and decode together, or neither")
        if encode is not None and not (callable(encode) and callable(decode)):
            raise TypeError("encode and decode must be callables")
        if isinstance(max_value_bytes, bool) or not isinstance(max_value_bytes, int):
            raise TypeError("max_value_bytes must be an int")
        if max_value_bytes < 1:
            raise ValueError(f"max_value_bytes must be >= 1, got {max_value_bytes!r}")
        self._endpoint = _endpoint_of(target)
        self._namespace = namespace
        self._prefix = f"{namespace}:v1:"
        self._channel = f"{namespace}:v1:invalidate"
        self._registry = f"{namespace}:v1:{{t:{namespace}}}:tenants"
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self._op_timeout = float(op_timeout)
        self._lease = float(lease)
        self._encode = encode or _json_encode
        self._decode: Callable[[bytes], Any] = decode or json.loads
        self._max_value_bytes = max_value_bytes
        self._breaker = _Breaker(breaker_errors, float(breaker_cooldown))
        self._errors = 0
        self._errors_lock = threading.Lock()
        self._bound: weakref.WeakSet[Any] = weakref.WeakSet()
        self._strong: list[InvalidationSink] = []  # sinks that cannot be weakly referenced
        self._tenants: dict[tuple[str, str], str] = {}
        self._process: _Process | None = None
        self.on_operation: Callable[[SharedOutcome, float], None] | None = None

    # -- the SharedTier protocol ----------------------------------------------------------------
    @property
    def errors(self) -> int:
        """Tier operations that failed or timed out and were treated as a miss."""
        return self._errors

    @property
    def breaker_state(self) -> Literal["closed", "open", "half_open"]:
        """The circuit breaker: ``closed`` (tier in use), ``open`` (skipped), ``half_open``."""
        return self._breaker.state

    @property
    def subscribed(self) -> bool:
        """Whether this process's invalidation subscriber is confirmed."""
        return self._process is not None and self._process.subscriber.confirmed

    def bind(self, memory: InvalidationSink) -> None:
        """Register ``memory`` to hear invalidations from other processes (starts listening)."""
        try:
            self._bound.add(memory)
        except TypeError:
            self._strong.append(memory)
        self._proc()

    def load(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Any],
    ) -> TierResult:
        """Shared hit, or wait for another process's fetch, or lease, fetch and store."""
        process = self._proc()
        plan = self._plan(key, scopes, ttl)
        if plan is None or not self._breaker.allow():
            return TierResult(fetch(), "fetched")
        epoch = process.subscriber.epoch
        owner = secrets.token_hex(8)
        conns = self._sync_conns(process)
        waited_since: float | None = None
        while True:
            started = time.perf_counter()
            try:
                keys, args = self._ask(plan, owner)
                reply = self._evalsha(conns.main, _GET_OR_LEASE_SHA, _GET_OR_LEASE, keys, args)
            except _TIER_ERRORS:
                self._failed(started)
                return TierResult(fetch(), "fetched")
            step = self._step(reply, plan, process, epoch, started, waited_since)
            if isinstance(step, TierResult):
                if step.value is _FETCH:
                    return TierResult(fetch(), "fetched")
                return step
            if isinstance(step, str):  # LEASE: the signature it saw
                return self._lead(plan, step, owner, fetch, conns)
            holder, block = step
            waited_since = waited_since if waited_since is not None else time.monotonic()
            try:
                signal = plan.signal(holder)
                conns.blocking.blmove(signal, signal, block, "RIGHT", "LEFT")
            except _TIER_ERRORS:
                self._failed(started)
                return TierResult(fetch(), "fetched")
            self._report("wait", started)

    async def aload(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Awaitable[Any]],
    ) -> TierResult:
        """Async :meth:`load`: the same steps on this event loop's own connections."""
        process = self._proc()
        plan = self._plan(key, scopes, ttl)
        if plan is None or not self._breaker.allow():
            return TierResult(await fetch(), "fetched")
        epoch = process.subscriber.epoch
        owner = secrets.token_hex(8)
        conns = self._loop_conns(process)
        waited_since: float | None = None
        while True:
            started = time.perf_counter()
            try:
                keys, args = self._ask(plan, owner)
                reply = await self._aevalsha(
                    conns.main, _GET_OR_LEASE_SHA, _GET_OR_LEASE, keys, args
                )
            except _TIER_ERRORS:
                self._failed(started)
                return TierResult(await fetch(), "fetched")
            step = self._step(reply, plan, process, epoch, started, waited_since)
            if isinstance(step, TierResult):
                if step.value is _FETCH:
                    return TierResult(await fetch(), "fetched")
                return step
            if isinstance(step, str):
                return await self._alead(plan, step, owner, fetch, conns)
            holder, block = step
            waited_since = waited_since if waited_since is not None else time.monotonic()
            try:
                signal = plan.signal(holder)
                await conns.blocking.blmove(signal, signal, block, "RIGHT", "LEFT")
            except _TIER_ERRORS:
                self._failed(started)
                return TierResult(await fetch(), "fetched")
            self._report("wait", started)

    def invalidate(self, *, keys: Iterable[Hashable] = (), scopes: Iterable[Hashable] = ()) -> None:
        """Replace the generation tokens of ``keys`` and ``scopes`` and tell every process."""
        canon_keys = [text for _, text in _canonical_all(keys)]
        scope_pairs = _canonical_all(scopes)
        if not canon_keys and not scope_pairs:
            return
        by_tenant: dict[str | None, list[str]] = {}
        for text in canon_keys:
            by_tenant.setdefault(None, []).append("k:" + _digest(text))
        canon_scopes = []
        for scope, text in scope_pairs:
            canon_scopes.append(text)
            by_tenant.setdefault(self._tenant_of_scope(scope), []).append("s:" + _digest(text))
        self._invalidate(by_tenant, {"k": canon_keys, "s": canon_scopes})

    def clear(self) -> None:
        """Make every process miss every entry of this namespace."""
        self._invalidate({None: ["all"]}, {"all": True})

    # -- steps shared by the sync and async shells -------------------------------------------
    def _ask(self, plan: _Plan, owner: str) -> tuple[list[str], list[Any]]:
        args: list[Any] = [secrets.token_hex(8), plan.token_ms, int(self._lease * 1000), owner]
        if not self._endpoint.cluster:
            args += [self._registry, plan.tenant]
        return [plan.entry, plan.lease, *plan.tokens], args

    def _step(
        self,
        reply: Any,
        plan: _Plan,
        process: _Process,
        epoch: int,
        started: float,
        waited_since: float | None,
    ) -> TierResult | str | tuple[str, float]:
        """Decide on a get-or-lease reply: a result, LEASE (the signature), or WAIT (owner, s)."""
        self._breaker.succeeded()
        kind = reply[0]
        if kind == b"HIT":
            return self._hit(reply[1], process, epoch, started, waited_since)
        if kind == b"LEASE":
            if self._endpoint.cluster:
                self._register(plan, process)
            self._report("lease", started)
            return str(reply[1], "utf-8")
        remaining = self._lease
        if waited_since is not None:
            remaining -= time.monotonic() - waited_since
        if remaining <= 0:
            self._report("wait_timeout", started)
            return _FETCH_RESULT
        lease_left = max(int(reply[2]), 1) / 1000  # -2/-1: the lease just went; look again soon
        return (str(reply[1], "utf-8"), min(lease_left + 0.001, remaining))

    def _hit(
        self,
        envelope: bytes,
        process: _Process,
        epoch: int,
        started: float,
        waited_since: float | None,
    ) -> TierResult:
        newline = envelope.index(b"\n")
        header = envelope[:newline].split(b" ")
        if len(header) > 2 and header[2] == b"local":
            # The leader's value could not be shared: fetch here, as if there were no tier.
            self._report("miss", started)
            return _FETCH_RESULT
        try:
            value = self._decode(envelope[newline + 1 :])
        except Exception:
            self._failed(started)
            return _FETCH_RESULT
        if waited_since is None:
            self._report("hit", started)
            return TierResult(value, "shared_hit", process.subscriber.trusted(epoch))
        return TierResult(value, "shared_wait", process.subscriber.trusted(epoch))

    def _envelope(self, signature: str, value: Any, fetch_seconds: float) -> bytes:
        try:
            payload = self._encode(value)
        except Exception:
            payload = None
        created = int(time.time() * 1000)
        if payload is None or len(payload) > self._max_value_bytes:
            return b"%s %s local %d\n" % (_SCHEMA, signature.encode(), created)
        header = b"%s %s json %d %d\n" % (
            _SCHEMA,
            signature.encode(),
            created,
            int(fetch_seconds * 1000),
        )
        return header + payload

    def _store_args(
        self, plan: _Plan, signature: str, owner: str, envelope: bytes
    ) -> tuple[list[str], list[Any]]:
        keys = [plan.entry, plan.lease, plan.signal(owner), *plan.tokens]
        return keys, [signature, owner, envelope, plan.ttl_ms, _SIGNAL_MS]

    def _lead(
        self, plan: _Plan, signature: str, owner: str, fetch: Callable[[], Any], conns: _Conns
    ) -> TierResult:
        fetch_started = time.perf_counter()
        try:
            value = fetch()
        except BaseException:
            self._release(plan, signature, owner, conns)
            raise
        envelope = self._envelope(signature, value, time.perf_counter() - fetch_started)
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, envelope)
            stored = self._evalsha(conns.main, _STORE_SHA, _STORE, keys, args)
        except _TIER_ERRORS:
            self._failed(started)
            return TierResult(value, "fetched")
        return self._stored(stored, value, started)

    async def _alead(
        self,
        plan: _Plan,
        signature: str,
        owner: str,
        fetch: Callable[[], Awaitable[Any]],
        conns: _Conns,
    ) -> TierResult:
        fetch_started = time.perf_counter()
        try:
            value = await fetch()
        except BaseException:
            await self._arelease(plan, signature, owner, conns)
            raise
        envelope = self._envelope(signature, value, time.perf_counter() - fetch_started)
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, envelope)
            stored = await self._aevalsha(conns.main, _STORE_SHA, _STORE, keys, args)
        except _TIER_ERRORS:
            self._failed(started)
            return TierResult(value, "fetched")
        return self._stored(stored, value, started)

    def _stored(self, stored: Any, value: Any, started: float) -> TierResult:
        self._breaker.succeeded()
        if int(stored) == 1:
            return TierResult(value, "fetched")
        # Refused: a write happened during the fetch, so the value may already be stale. The
        # callers of this flight get it (they asked before the write), L1 does not keep it.
        self._report("store_refused", started)
        return TierResult(value, "fetched", keep_local=False)

    def _release(self, plan: _Plan, signature: str, owner: str, conns: _Conns) -> None:
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, b"")
            self._evalsha(conns.main, _STORE_SHA, _STORE, keys, args)
        except _TIER_ERRORS:
            self._failed(started)

    async def _arelease(self, plan: _Plan, signature: str, owner: str, conns: _Conns) -> None:
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, b"")
            await self._aevalsha(conns.main, _STORE_SHA, _STORE, keys, args)
        except _TIER_ERRORS:
            self._failed(started)

    # -- keys and tenants ------------------------------------------------------------------------
    def _plan(self, key: Hashable, scopes: tuple[Hashable, ...], ttl: float) -> _Plan | None:
        try:
            key_text = canonical_key(key)
            scope_texts = [canonical_key(s) for s in scopes]
        except TypeError:
            return None  # not a key other processes could spell the same way
        if not (ttl > 0 and math.isfinite(ttl)):
            return None
        tenant = self._namespace
        for scope in scopes:
            found = self._tenant_of_scope(scope)
            if found is not None:
                tenant = found
                break
        base = f"{self._prefix}{{t:{tenant}}}:"
        key_digest = _digest(key_text)
        ttl_ms = max(int(ttl * 1000), 1)
        return _Plan(
            tenant=tenant,
            entry=f"{base}e:{key_digest}",
            lease=f"{base}l:{key_digest}",
            tokens=(
                f"{base}g:all",
                f"{base}g:k:{key_digest}",
                *(f"{base}g:s:{_digest(t)}" for t in scope_texts),
            ),
            ttl_ms=ttl_ms,
            token_ms=2 * ttl_ms + int(self._lease * 1000),
        )

    def _tenant_of_scope(self, scope: Hashable) -> str | None:
        """The tenant fingerprint of an adapter scope (``("tenant", (url, fp))``, ``("tag", t,
        tag)``, ``("untagged", t)``), or None for a scope that names no tenant."""
        if type(scope) is not tuple or len(scope) < 2:
            return None
        head, tenant = scope[0], scope[1]
        if head not in ("tenant", "tag", "untagged"):
            return None
        if type(tenant) is not tuple or len(tenant) != 2:
            return None
        if not all(type(part) is str for part in tenant):
            return None
        found = self._tenants.get(tenant)
        if found is None:
            text = f"{tenant[0]}\n{tenant[1]}".encode()
            if self._secret is not None:
                found = hmac.new(self._secret, text, hashlib.sha256).hexdigest()[:32]
            else:
                found = hashlib.sha256(text).hexdigest()[:32]
            if len(self._tenants) > 4096:
                self._tenants.clear()
            self._tenants[tenant] = found
        return found

    def _register(self, plan: _Plan, process: _Process) -> None:
        # Cluster only (standalone registers inside get-or-lease): the registry lives in the
        # namespace's slot, so it cannot be touched by a script on the tenant's slot.
        now = time.monotonic()
        if now - process.registered.get(plan.tenant, -math.inf) < plan.token_ms / 2000:
            return
        try:
            client = self._sync_conns(process).main
            args = [plan.tenant, plan.token_ms]
            self._evalsha(client, _REGISTER_SHA, _REGISTER, [self._registry], args)
            process.registered[plan.tenant] = now
        except _TIER_ERRORS:
            self._failed(time.perf_counter())

    def _invalidate(self, by_tenant: dict[str | None, list[str]], message: dict[str, Any]) -> None:
        process = self._proc()
        started = time.perf_counter()
        if not self._breaker.allow():
            self._failed(started)
            return
        try:
            client = self._sync_conns(process).main
            everywhere = by_tenant.pop(None, [])
            if everywhere:
                # A key or a scope that names no tenant may have entries under any tenant.
                tenants = {str(t, "utf-8") for t in client.smembers(self._registry)}
                tenants.add(self._namespace)
                for name in tenants:
                    by_tenant.setdefault(name, []).extend(everywhere)
            token = secrets.token_hex(8)
            for tenant, names in by_tenant.items():
                base = f"{self._prefix}{{t:{tenant}}}:g:"
                pipe = client.pipeline(transaction=False)
                for name in names:
                    # XX: a missing token already mismatches; KEEPTTL: it outlives its entries.
                    pipe.set(base + name, token, xx=True, keepttl=True)
                pipe.execute()
            client.publish(self._channel, _dump(message))
            self._breaker.succeeded()
        except _TIER_ERRORS:
            self._failed(started)

    # -- process, connections, accounting ---------------------------------------------------------
    def _proc(self) -> _Process:
        process = self._process
        if process is None or process.pid != os.getpid():
            with _PROCESS_LOCK:
                process = self._process
                if process is None or process.pid != os.getpid():
                    # First use in this process (or after a fork): nothing of the parent's is
                    # used, not even a lock the parent may have held while forking.
                    self._breaker = _Breaker(self._breaker._limit, self._breaker._cooldown)
                    self._errors_lock = threading.Lock()
                    process = self._process = _Process(self)
                    process.subscriber.start()
        return process

    def _sync_conns(self, process: _Process) -> _Conns:
        conns = process.sync
        if conns is None:
            with process.lock:
                conns = process.sync
                if conns is None:
                    conns = process.sync = _Conns(
                        _sync_client(self._endpoint, self._op_timeout, self._op_timeout),
                        # A blocked BLMOVE lasts up to the lease: its socket must wait longer.
                        _sync_client(
                            self._endpoint, self._lease + self._op_timeout, self._op_timeout
                        ),
                    )
        return conns

    def _loop_conns(self, process: _Process) -> _Conns:
        loop = asyncio.get_running_loop()
        found = process.loops.get(id(loop))
        if found is not None and found[0]() is loop:
            return found[1]
        with process.lock:
            for ident, (ref, _) in list(process.loops.items()):
                alive = ref()
                if alive is None or alive.is_closed():
                    del process.loops[ident]
            conns = _Conns(
                _async_client(self._endpoint, self._op_timeout, self._op_timeout),
                _async_client(self._endpoint, self._lease + self._op_timeout, self._op_timeout),
            )
            process.loops[id(loop)] = (weakref.ref(loop), conns)
        return conns

    @staticmethod
    def _evalsha(client: Any, sha: str, source: bytes, keys: list[str], args: list[Any]) -> Any:
        try:
            return client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(source, len(keys), *keys, *args)

    @staticmethod
    async def _aevalsha(
        client: Any, sha: str, source: bytes, keys: list[str], args: list[Any]
    ) -> Any:
        try:
            return await client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(source, len(keys), *keys, *args)

    def _memories(self) -> list[InvalidationSink]:
        return [*self._bound, *self._strong]

    def _failed(self, started: float) -> None:
        with self._errors_lock:
            self._errors += 1
        self._breaker.failed()
        self._report("error", started)

    def _report(self, outcome: SharedOutcome, started: float) -> None:
        hook = self.on_operation
        if hook is not None:
            try:
                hook(outcome, time.perf_counter() - started)
            except Exception:
                pass  # telemetry never breaks a call

    def __repr__(self) -> str:
        return f"RedisTier(namespace={self._namespace!r}, breaker={self.breaker_state})"


# Guards the creation of a tier's per-process state; a forked child gets a fresh one.
_PROCESS_LOCK = threading.Lock()


def _new_process_lock() -> None:
    global _PROCESS_LOCK
    _PROCESS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_process_lock)

_FETCH: Final = object()
_FETCH_RESULT: Final = TierResult(_FETCH, "fetched")


def _canonical_all(items: Iterable[Hashable]) -> list[tuple[Hashable, str]]:
    """Each item with its canonical text; items no other process could spell are left out."""
    found = []
    for item in items:
        try:
            found.append((item, canonical_key(item)))
        except TypeError:
            continue
    return found
