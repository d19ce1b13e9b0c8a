"""``RedisTier``: the shared tier's coordination, the one place that decides what a call does.

See the package docstring for the design; this module holds the steps of a call (get-or-lease,
wait, lead, store or release), invalidation, and the per-process state.
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

from redis.exceptions import RedisError

from .._core import InvalidationSink, SharedCodec, TierResult
from .breaker import Breaker
from .connections import Conns, async_client, endpoint_of, sync_client
from .encoding import canonical_key, digest, dump, json_encode
from .scripts import GET_OR_LEASE, REGISTER, STORE, aeval, eval_sync
from .subscriber import Subscriber

__all__ = ["RedisTier", "SharedOutcome"]

SharedOutcome = Literal["hit", "miss", "lease", "wait", "wait_timeout", "store_refused", "error"]
"""What one tier operation ended in, as reported to ``on_operation``."""

_SCHEMA: Final = b"wm1"
_SIGNAL_MS: Final = 1000  # a wake-up outlives its push by 1 s: covers a waiter arriving just after
_TIER_ERRORS: Final = (RedisError, OSError, asyncio.TimeoutError)


# --------------------------------------------------------------------------------------------
# The plan of one call: every Redis key it touches, all under one hash tag.


@dataclass(frozen=True, slots=True)
class Plan:
    tenant: str  # the hash-tag body
    entry: str
    lease: str
    tokens: tuple[str, ...]  # tenant-wide, key, then one per scope
    ttl_ms: int
    token_ms: int

    def signal(self, owner: str) -> str:
        return f"{self.lease}:{owner}"


class _Process:
    """Everything that must not cross a fork: connections, locks, the subscriber."""

    def __init__(self, tier: RedisTier) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.sync: Conns | None = None
        self.loops: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], Conns]] = {}
        self.registered: dict[str, float] = {}  # tenant -> monotonic time of registration
        self.subscriber = Subscriber(
            tier._endpoint, tier._op_timeout, tier._channel, tier._memories
        )


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
        self._endpoint = endpoint_of(target)
        self._namespace = namespace
        self._prefix = f"{namespace}:v1:"
        self._channel = f"{namespace}:v1:invalidate"
        self._registry = f"{namespace}:v1:{{t:{namespace}}}:tenants"
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self._op_timeout = float(op_timeout)
        self._lease = float(lease)
        self._encode = encode or json_encode
        self._decode: Callable[[bytes], Any] = decode or json.loads
        self._max_value_bytes = max_value_bytes
        self._breaker = Breaker(breaker_errors, float(breaker_cooldown))
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
        codec: SharedCodec | None = None,
    ) -> TierResult:
        """Shared hit, or wait for another process's fetch, or lease, fetch and store.

        With ``codec`` the value is stored as ``codec.dump(value)`` (then encoded as any value)
        and a stored entry is read back through ``codec.load``.
        """
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
                reply = eval_sync(conns.main, GET_OR_LEASE, keys, args)
            except _TIER_ERRORS:
                self._failed(started)
                return TierResult(fetch(), "fetched")
            step = self._step(reply, plan, process, epoch, started, waited_since, codec)
            if isinstance(step, TierResult):
                if step.value is _FETCH:
                    return TierResult(fetch(), "fetched")
                return step
            if isinstance(step, str):  # LEASE: the signature it saw
                return self._lead(plan, step, owner, fetch, conns, codec)
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
        codec: SharedCodec | None = None,
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
                reply = await aeval(conns.main, GET_OR_LEASE, keys, args)
            except _TIER_ERRORS:
                self._failed(started)
                return TierResult(await fetch(), "fetched")
            step = self._step(reply, plan, process, epoch, started, waited_since, codec)
            if isinstance(step, TierResult):
                if step.value is _FETCH:
                    return TierResult(await fetch(), "fetched")
                return step
            if isinstance(step, str):
                return await self._alead(plan, step, owner, fetch, conns, codec)
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
            by_tenant.setdefault(None, []).append("k:" + digest(text))
        canon_scopes = []
        for scope, text in scope_pairs:
            canon_scopes.append(text)
            by_tenant.setdefault(self._tenant_of_scope(scope), []).append("s:" + digest(text))
        self._invalidate(by_tenant, {"k": canon_keys, "s": canon_scopes})

    def clear(self) -> None:
        """Make every process miss every entry of this namespace."""
        self._invalidate({None: ["all"]}, {"all": True})

    # -- steps shared by the sync and async shells -------------------------------------------
    def _ask(self, plan: Plan, owner: str) -> tuple[list[str], list[Any]]:
        args: list[Any] = [secrets.token_hex(8), plan.token_ms, int(self._lease * 1000), owner]
        if not self._endpoint.cluster:
            args += [self._registry, plan.tenant]
        return [plan.entry, plan.lease, *plan.tokens], args

    def _step(
        self,
        reply: Any,
        plan: Plan,
        process: _Process,
        epoch: int,
        started: float,
        waited_since: float | None,
        codec: SharedCodec | None,
    ) -> TierResult | str | tuple[str, float]:
        """Decide on a get-or-lease reply: a result, LEASE (the signature), or WAIT (owner, s)."""
        self._breaker.succeeded()
        kind = reply[0]
        if kind == b"HIT":
            return self._hit(reply[1], process, epoch, started, waited_since, codec)
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
        codec: SharedCodec | None,
    ) -> TierResult:
        newline = envelope.index(b"\n")
        header = envelope[:newline].split(b" ")
        if len(header) > 2 and header[2] == b"local":
            # The leader's value could not be shared: fetch here, as if there were no tier.
            self._report("miss", started)
            return _FETCH_RESULT
        try:
            value = self._decode(envelope[newline + 1 :])
            if codec is not None:
                value = codec.load(value)
        except Exception:
            self._failed(started)
            return _FETCH_RESULT
        if waited_since is None:
            self._report("hit", started)
            return TierResult(value, "shared_hit", process.subscriber.trusted(epoch))
        return TierResult(value, "shared_wait", process.subscriber.trusted(epoch))

    def _envelope(
        self, signature: str, value: Any, fetch_seconds: float, codec: SharedCodec | None
    ) -> bytes:
        try:
            shared = value if codec is None else codec.dump(value)
            payload = None if shared is None and codec is not None else self._encode(shared)
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
        self, plan: Plan, signature: str, owner: str, envelope: bytes
    ) -> tuple[list[str], list[Any]]:
        keys = [plan.entry, plan.lease, plan.signal(owner), *plan.tokens]
        return keys, [signature, owner, envelope, plan.ttl_ms, _SIGNAL_MS]

    def _lead(
        self,
        plan: Plan,
        signature: str,
        owner: str,
        fetch: Callable[[], Any],
        conns: Conns,
        codec: SharedCodec | None,
    ) -> TierResult:
        fetch_started = time.perf_counter()
        try:
            value = fetch()
        except BaseException:
            self._release(plan, signature, owner, conns)
            raise
        envelope = self._envelope(signature, value, time.perf_counter() - fetch_started, codec)
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, envelope)
            stored = eval_sync(conns.main, STORE, keys, args)
        except _TIER_ERRORS:
            self._failed(started)
            return TierResult(value, "fetched")
        return self._stored(stored, value, started)

    async def _alead(
        self,
        plan: Plan,
        signature: str,
        owner: str,
        fetch: Callable[[], Awaitable[Any]],
        conns: Conns,
        codec: SharedCodec | None,
    ) -> TierResult:
        fetch_started = time.perf_counter()
        try:
            value = await fetch()
        except BaseException:
            await self._arelease(plan, signature, owner, conns)
            raise
        envelope = self._envelope(signature, value, time.perf_counter() - fetch_started, codec)
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, envelope)
            stored = await aeval(conns.main, STORE, keys, args)
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

    def _release(self, plan: Plan, signature: str, owner: str, conns: Conns) -> None:
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, b"")
            eval_sync(conns.main, STORE, keys, args)
        except _TIER_ERRORS:
            self._failed(started)

    async def _arelease(self, plan: Plan, signature: str, owner: str, conns: Conns) -> None:
        started = time.perf_counter()
        try:
            keys, args = self._store_args(plan, signature, owner, b"")
            await aeval(conns.main, STORE, keys, args)
        except _TIER_ERRORS:
            self._failed(started)

    # -- keys and tenants ------------------------------------------------------------------------
    def _plan(self, key: Hashable, scopes: tuple[Hashable, ...], ttl: float) -> Plan | None:
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
        key_digest = digest(key_text)
        ttl_ms = max(int(ttl * 1000), 1)
        return Plan(
            tenant=tenant,
            entry=f"{base}e:{key_digest}",
            lease=f"{base}l:{key_digest}",
            tokens=(
                f"{base}g:all",
                f"{base}g:k:{key_digest}",
                *(f"{base}g:s:{digest(t)}" for t in scope_texts),
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

    def _register(self, plan: Plan, process: _Process) -> None:
        # Cluster only (standalone registers inside get-or-lease): the registry lives in the
        # namespace's slot, so it cannot be touched by a script on the tenant's slot.
        now = time.monotonic()
        if now - process.registered.get(plan.tenant, -math.inf) < plan.token_ms / 2000:
            return
        try:
            client = self._sync_conns(process).main
            args = [plan.tenant, plan.token_ms]
            eval_sync(client, REGISTER, [self._registry], args)
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
            client.publish(self._channel, dump(message))
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
                    self._breaker = Breaker(self._breaker._limit, self._breaker._cooldown)
                    self._errors_lock = threading.Lock()
                    process = self._process = _Process(self)
                    process.subscriber.start()
        return process

    def _sync_conns(self, process: _Process) -> Conns:
        conns = process.sync
        if conns is None:
            with process.lock:
                conns = process.sync
                if conns is None:
                    conns = process.sync = Conns(
                        sync_client(self._endpoint, self._op_timeout, self._op_timeout),
                        # A blocked BLMOVE lasts up to the lease: its socket must wait longer.
                        sync_client(
                            self._endpoint, self._lease + self._op_timeout, self._op_timeout
                        ),
                    )
        return conns

    def _loop_conns(self, process: _Process) -> Conns:
        loop = asyncio.get_running_loop()
        found = process.loops.get(id(loop))
        if found is not None and found[0]() is loop:
            return found[1]
        with process.lock:
            for ident, (ref, _) in list(process.loops.items()):
                alive = ref()
                if alive is None or alive.is_closed():
                    del process.loops[ident]
            conns = Conns(
                async_client(self._endpoint, self._op_timeout, self._op_timeout),
                async_client(self._endpoint, self._lease + self._op_timeout, self._op_timeout),
            )
            process.loops[id(loop)] = (weakref.ref(loop), conns)
        return conns

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
