"""The shared tier's protocol, written once, without I/O: what to send next and what a reply means.

A load is a small state machine (:class:`Load`). The tier's two drivers, sync and async, only
carry out what it asks for and feed the result back:

* :class:`~.scripts.Run`: send this command; pass the reply to ``replied`` (or the error to
  ``failed``);
* :class:`Block`: wait on this signal list for up to ``seconds`` (``BLMOVE``), then ``replied``;
* :data:`FETCH`: call the upstream fetch; pass its value to ``fetched`` (or, if it raised, send
  what ``abandoned`` returns and re-raise);
* :class:`Done`: the call's result.

The story of one load, in the order it happens:

1. **Pending invalidations first.** Invalidations that could not reach Redis are kept by the
   process (:class:`Pending`, bounded) and replayed (:class:`Flush`) before anything from Redis is
   served again here; if the replay fails, the load fetches directly.
2. **get-or-lease** answers HIT (tokens match and the envelope's own expiry is ahead), LEASE (this
   process fetches) or WAIT (another holds the lease). With a secret, a HIT is served only if its
   MAC verifies (:class:`Values`); a HIT that is forged or does not decode is asked again with its
   header rejected, which makes it a miss that leases and stores over it. A second refused entry
   in one load (someone rewriting it meanwhile) is not chased: the load fetches without the tier.
3. **Waiting** blocks on the holder's signal list until woken or the lease ends, then asks again.
   A dead leader's lease expires: exactly one waiter takes it (``SET NX``), the rest wait for that
   one. Waiting as a whole is bounded by ``WAIT_LEASES`` leases; past that a caller fetches itself.
4. **Storing** is a compare-and-set against the tokens seen at lease time; it releases the lease
   and wakes every waiter whatever happens, a full server included. A store that fails on the wire
   is followed by a release.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from .._api.tenancy import TenantScope
from .._core import SharedCodec, TierResult
from .encoding import canonical_key, digest, dump
from .health import unreachable
from .scripts import GET_OR_LEASE, REGISTER, STORE, Run

__all__ = [
    "CLEAR",
    "FETCH",
    "Block",
    "Done",
    "Fetch",
    "Flush",
    "Invalidation",
    "Layout",
    "Ledger",
    "Load",
    "Pending",
    "Plan",
    "SharedOutcome",
    "Values",
    "mac_key",
]

SharedOutcome = Literal[
    "hit", "miss", "lease", "wait", "wait_timeout", "store_refused", "forged", "error"
]
"""What one tier operation ended in, as reported to ``on_operation``. ``forged``: an entry whose
MAC did not verify under the tier's secret, refused (then a miss that leases)."""

SCHEMA: Final = b"wm2"
SIGNAL_MS: Final = 1000  # a wake-up outlives its push by 1 s: covers a waiter arriving just after
WAIT_LEASES: Final = 2  # a caller waits at most this many leases in all (a dead leader's, then
# its replacement's), then fetches itself
PENDING_MAX: Final = 1024  # pending invalidations kept; beyond, they collapse into one "clear"


# -- tenants and names ---------------------------------------------------------------------


class Layout:
    """Every name the tier uses in Redis, and tenant fingerprints (never an API key)."""

    def __init__(self, namespace: str, secret: bytes | None, lease: float, cluster: bool) -> None:
        self.namespace = namespace
        self.prefix = f"{namespace}:v1:"
        self.channel = f"{namespace}:v1:invalidate"
        self.registry = f"{namespace}:v1:{{t:{namespace}}}:tenants"
        # The fleet's settling scopes: a hash (scope -> deadline, epoch ms) and its channel.
        self.settling = f"{namespace}:v1:{{t:{namespace}}}:settling"
        self.settling_channel = f"{namespace}:v1:settling"
        self.lease_ms = max(int(lease * 1000), 1)
        self.cluster = cluster
        self._secret = secret
        # The key of status rounds' and settle announcements' MACs, derived for that alone.
        self._settle_key = (
            None
            if secret is None
            else hmac.digest(secret, b"wm_middleware shared-tier settle MAC v1", "sha256")
        )
        self._tenants: dict[tuple[str, str], str] = {}

    def tenant(self, scope: Hashable) -> str | None:
        """The fingerprint of the tenant ``scope`` names (HMAC-SHA256 under the secret)."""
        parsed = TenantScope.parse(scope)
        if parsed is None:
            return None
        pair = parsed.tenant
        found = self._tenants.get(pair)
        if found is None:
            text = f"{pair[0]}\n{pair[1]}".encode()
            if self._secret is not None:
                found = hmac.new(self._secret, text, hashlib.sha256).hexdigest()[:32]
            else:
                found = hashlib.sha256(text).hexdigest()[:32]
            if len(self._tenants) > 4096:
                self._tenants.clear()
            self._tenants[pair] = found
        return found

    def tokens(self, tenant: str) -> str:
        """The prefix of a tenant's generation-token keys (``g:all``, ``g:k:..``, ``g:s:..``)."""
        return f"{self.prefix}{{t:{tenant}}}:g:"

    def poll(self, tenant: str) -> tuple[str, str]:
        """A tenant's fleet-wide status round: the key of its last result, and the key of the
        lease of the process making the next one (one hash slot: the tenant's)."""
        result = f"{self.prefix}{{t:{tenant}}}:poll"
        return result, f"{result}:lease"

    def seal(self, key: str, payload: bytes) -> bytes:
        """``payload`` as stored or sent at ``key`` (a key, a hash field, a channel): after its
        MAC under the secret (a key derived for this one purpose) when the tier has one, so a
        Redis writer without it cannot forge a status round or a settle announcement, nor move
        one elsewhere; as it is without one."""
        if self._settle_key is None:
            return payload
        return b"%s %s" % (self._settle_mac(self._settle_key, key, payload), payload)

    def unsealed(self, key: str, stored: bytes) -> bytes | None:
        """What :meth:`seal` stored at ``key``, or ``None`` when its MAC does not verify."""
        if self._settle_key is None:
            return stored
        mac, _, payload = stored.partition(b" ")
        expected = self._settle_mac(self._settle_key, key, payload)
        return payload if hmac.compare_digest(mac, expected) else None

    @staticmethod
    def _settle_mac(settle_key: bytes, key: str, payload: bytes) -> bytes:
        return hmac.digest(settle_key, b"%s\n%s" % (key.encode(), payload), "sha256").hex().encode()

    def plan(self, key: Hashable, scopes: tuple[Hashable, ...], ttl: float) -> Plan | None:
        """The keys of one load, or None when it cannot be shared (a key no other process could
        spell, or a ttl that is not a positive finite number)."""
        try:
            key_text = canonical_key(key)
            scope_texts = [canonical_key(s) for s in scopes]
        except TypeError:
            return None
        if not (ttl > 0 and math.isfinite(ttl)):
            return None
        tenant = next((t for t in map(self.tenant, scopes) if t is not None), self.namespace)
        base = f"{self.prefix}{{t:{tenant}}}:"
        key_digest = digest(key_text)
        scope_digests = tuple(digest(t) for t in scope_texts)
        ttl_ms = max(int(ttl * 1000), 1)
        return Plan(
            tenant=tenant,
            entry=f"{base}e:{key_digest}",
            lease=f"{base}l:{key_digest}",
            tokens=(
                f"{base}g:all",
                f"{base}g:k:{key_digest}",
                *(f"{base}g:s:{d}" for d in scope_digests),
            ),
            ttl_ms=ttl_ms,
            token_ms=2 * ttl_ms + self.lease_ms,
            key_digest=key_digest,
            scope_digests=scope_digests,
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """The Redis keys of one load, all under one hash tag (one Cluster slot)."""

    tenant: str  # the hash-tag body
    entry: str
    lease: str
    tokens: tuple[str, ...]  # tenant-wide, key, then one per scope
    ttl_ms: int
    token_ms: int
    key_digest: str
    scope_digests: tuple[str, ...]

    def signal(self, owner: str) -> str:
        return f"{self.lease}:{owner}"


# -- actions a driver carries out --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Block:
    """Wait on ``signal`` (``BLMOVE signal signal``) for up to ``seconds``."""

    signal: str
    seconds: float


class Fetch:
    """Call the upstream fetch."""


FETCH: Final = Fetch()


@dataclass(frozen=True, slots=True)
class Done:
    result: TierResult


Action = Run | Block | Fetch | Done


class Ledger(Protocol):
    """What the tier keeps across loads: accounting, the breaker, pending invalidations."""

    def succeeded(self) -> None: ...
    def failed(self, started: float, error: BaseException) -> None: ...
    def report(self, outcome: SharedOutcome, started: float) -> None: ...
    def forged(self, started: float) -> None: ...
    def flush(self) -> Flush | None: ...
    def flushed(self, flush: Flush) -> None: ...
    def unregistered(self, plan: Plan) -> bool: ...
    def registered(self, plan: Plan) -> None: ...


# -- invalidation ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Invalidation:
    """One invalidation: token names per tenant (None: every tenant) and the digests it names."""

    names: tuple[tuple[str | None, tuple[str, ...]], ...]
    keys: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    everything: bool = False

    @classmethod
    def of(
        cls, layout: Layout, keys: Iterable[Hashable], scopes: Iterable[Hashable]
    ) -> Invalidation:
        by_tenant: dict[str | None, list[str]] = {}
        key_digests, scope_digests = _digests(keys), []
        for text in key_digests:
            by_tenant.setdefault(None, []).append("k:" + text)
        for scope in scopes:
            found = _digests((scope,))
            if found:
                scope_digests.append(found[0])
                by_tenant.setdefault(layout.tenant(scope), []).append("s:" + found[0])
        names = tuple((t, tuple(n)) for t, n in by_tenant.items())
        return cls(names, tuple(key_digests), tuple(scope_digests))


CLEAR: Final = Invalidation(((None, ("all",)),), everything=True)


def _digests(items: Iterable[Hashable]) -> list[str]:
    """Digests of the items' canonical texts; items no other process could spell are left out."""
    found = []
    for item in items:
        try:
            found.append(digest(canonical_key(item)))
        except TypeError:
            continue
    return found


class Pending:
    """Invalidations this process could not deliver yet, oldest first; bounded by collapsing into
    one ``clear`` (which covers every key) when full."""

    def __init__(self, limit: int = PENDING_MAX) -> None:
        self._items: list[Invalidation] = []
        self._limit = limit
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: Invalidation) -> None:
        with self._lock:
            if len(self._items) >= self._limit:
                self._items = [CLEAR]
            elif CLEAR not in self._items:
                self._items.append(item)

    def snapshot(self) -> tuple[Invalidation, ...]:
        with self._lock:
            return tuple(self._items)

    def remove(self, done: Iterable[Invalidation]) -> None:
        gone = {id(item) for item in done}
        with self._lock:
            self._items = [item for item in self._items if id(item) not in gone]


@dataclass(slots=True)
class Flush:
    """Delivers pending invalidations: deletes their token keys (a missing token is a mismatch, so
    this works on a full server too), then publishes their digests, whatever the deletes did.
    ``ok`` only when every step succeeded; an unreachable server stops it at once."""

    items: tuple[Invalidation, ...]
    layout: Layout
    ok: bool = True
    _steps: list[Run] = field(default_factory=list)
    _everywhere: list[str] = field(default_factory=list)

    def start(self) -> Run:
        by_tenant: dict[str, list[str]] = {}
        for item in self.items:
            for tenant, names in item.names:
                if tenant is None:
                    self._everywhere.extend(names)
                else:
                    by_tenant.setdefault(tenant, []).extend(names)
        self._steps = self._deletes(by_tenant)
        self._steps.append(Run(("PUBLISH", self.layout.channel, self._message())))
        if self._everywhere:
            return Run(("SMEMBERS", self.layout.registry))  # the tenants that may hold entries
        return self._steps.pop(0)

    def replied(self, reply: Any) -> Run | None:
        if isinstance(reply, (set, list)) and self._everywhere:
            tenants = {str(t, "utf-8") if isinstance(t, bytes) else str(t) for t in reply}
            tenants.add(self.layout.namespace)
            names = list(dict.fromkeys(self._everywhere))
            self._everywhere = []
            self._steps[:0] = self._deletes({t: names for t in sorted(tenants)})
        return self._steps.pop(0) if self._steps else None

    def failed(self, error: BaseException) -> Run | None:
        self.ok = False
        if unreachable(error):
            return None
        self._everywhere = []
        return self._steps.pop(0) if self._steps else None  # publish regardless

    def _deletes(self, by_tenant: dict[str, list[str]]) -> list[Run]:
        steps = []
        for tenant, names in by_tenant.items():
            base = self.layout.tokens(tenant)
            steps.append(Run(("DEL", *(base + n for n in dict.fromkeys(names)))))
        return steps

    def _message(self) -> str:
        keys = sorted({d for item in self.items for d in item.keys})
        scopes = sorted({d for item in self.items for d in item.scopes})
        return dump({"k": keys, "s": scopes, "all": any(i.everything for i in self.items)})


# -- one load --------------------------------------------------------------------------------


_NOTHING: Final = object()


@dataclass(slots=True, eq=False)
class Load:
    """The protocol of one ``load``: see the module docstring for the order of its steps.

    Each step is timed from when it is handed out: what ``replied`` and ``failed`` report covers
    the driver's round trip, and the fetch time stored with a value covers the fetch.
    """

    plan: Plan
    layout: Layout
    ledger: Ledger
    codec: SharedCodec | None
    values: Values
    trusted: Callable[[], bool]  # whether the subscriber stayed confirmed since the load began
    owner: str = field(init=False, default_factory=lambda: secrets.token_hex(8))
    _phase: str = field(init=False, default="ask")
    _started: float = field(init=False, default=0.0)  # when the current step was handed out
    _flush: Flush | None = field(init=False, default=None)
    _signature: str | None = field(init=False, default=None)  # set while holding the lease
    _rejected: bytes = field(init=False, default=b"")  # the header of an entry refused (as sent)
    _waiting_until: float | None = field(init=False, default=None)
    _value: Any = field(init=False, default=_NOTHING)

    def start(self) -> Action:
        self._flush = self.ledger.flush()
        if self._flush is not None:
            self._phase = "flush"
            return self._handed(self._flush.start())
        return self._handed(self._ask())

    def replied(self, reply: Any) -> Action:
        self.ledger.succeeded()
        return self._handed(_AFTER[self._phase](self, reply))

    def failed(self, error: BaseException) -> Action:
        self.ledger.failed(self._started, error)
        return self._handed(self._after_failure(error))

    def fetched(self, value: Any) -> Action:
        seconds = time.perf_counter() - self._started
        if self._signature is None:
            return Done(TierResult(value, "fetched"))
        self._value = value
        self._phase = "store"
        envelope = self.values.envelope(self._signature, value, seconds, self.plan, self.codec)
        return self._handed(self._store(envelope))

    def abandoned(self) -> Run | None:
        """The fetch raised: release the lease (and wake waiters), if this call holds it."""
        if self._signature is None:
            return None
        self._phase = "release"
        return self._store(b"")

    # -- steps -----------------------------------------------------------------------------
    def _handed(self, action: Action) -> Action:
        self._started = time.perf_counter()
        return action

    def _after_failure(self, error: BaseException) -> Action:
        if self._phase == "flush" and self._flush is not None:
            step = self._flush.failed(error)
            return step if step is not None else self._alone()
        if self._phase == "store":
            return self._release()
        if self._phase == "release":
            return Done(TierResult(self._value, "fetched"))
        if self._phase == "register":
            return FETCH  # still the leader: an unregistered tenant only misses a broad clear
        return self._alone()

    def _ask(self) -> Run:
        self._phase = "ask"
        plan = self.plan
        registry = ("", "") if self.layout.cluster else (self.layout.registry, plan.tenant)
        args = (
            secrets.token_hex(8),
            plan.token_ms,
            self.layout.lease_ms,
            self.owner,
            int(time.time() * 1000),
            self._rejected,
            *registry,
        )
        return Run(args, GET_OR_LEASE, (plan.entry, plan.lease, *plan.tokens))

    def _store(self, envelope: bytes) -> Run:
        plan = self.plan
        keys = (plan.entry, plan.lease, plan.signal(self.owner), *plan.tokens)
        return Run((self._signature, self.owner, envelope, plan.ttl_ms, SIGNAL_MS), STORE, keys)

    def _release(self) -> Run:
        self._phase = "release"
        return self._store(b"")

    def _alone(self) -> Fetch:
        """Fetch without the tier (no store, no lease held)."""
        self._signature = None
        self._phase = "alone"
        return FETCH

    def _after_flush(self, reply: Any) -> Action:
        assert self._flush is not None
        step = self._flush.replied(reply)
        if step is not None:
            return step
        if not self._flush.ok:
            return self._alone()
        self.ledger.flushed(self._flush)
        return self._ask()

    def _after_ask(self, reply: Any) -> Action:
        kind = reply[0]
        if kind == b"HIT":
            return self._hit(reply[1])
        if kind == b"LEASE":
            self._signature = str(reply[1], "utf-8")
            self.ledger.report("lease", self._started)
            if self.layout.cluster and self.ledger.unregistered(self.plan):
                self._phase = "register"
                return Run(
                    (self.plan.tenant, self.plan.token_ms), REGISTER, (self.layout.registry,)
                )
            self._phase = "fetch"
            return FETCH
        return self._wait(str(reply[1], "utf-8"), int(reply[2]))

    def _hit(self, envelope: bytes) -> Action:
        header, _, payload = envelope.partition(b"\n")
        if not self.values.authentic(self.plan.entry, header, payload):
            self.ledger.forged(self._started)
            return self._refuse(header)
        if header.split(b" ")[3:4] == [b"local"]:
            # The leader's value could not be shared: fetch here, as if there were no tier.
            self.ledger.report("miss", self._started)
            return self._alone()
        try:
            value = self.values.decode(payload, self.codec)
        except Exception as error:
            # Unreadable: a miss that leases and stores over it, not a refetch on every call.
            self.ledger.failed(self._started, error)
            return self._refuse(header)
        waited = self._waiting_until is not None
        if not waited:
            self.ledger.report("hit", self._started)
        return Done(
            TierResult(
                value, "shared_wait" if waited else "shared_hit", self.trusted(), _left(header)
            )
        )

    def _refuse(self, header: bytes) -> Action:
        """Ask again past this entry (its exact header bytes), or, for a second refused entry,
        fetch without the tier rather than chase a writer."""
        if self._rejected:
            return self._alone()
        self._rejected = header
        return self._ask()

    def _wait(self, holder: str, lease_left_ms: int) -> Action:
        now = time.monotonic()
        if self._waiting_until is None:
            self._waiting_until = now + WAIT_LEASES * self.layout.lease_ms / 1000
        remaining = self._waiting_until - now
        if remaining <= 0:
            self.ledger.report("wait_timeout", self._started)
            return self._alone()
        self._phase = "block"
        # A lease about to expire (0 ms left) is looked at again at once, not polled: the next
        # ask takes it over or finds its successor's, which has a whole lease to run.
        lease_left = max(lease_left_ms, 1) / 1000
        return Block(self.plan.signal(holder), min(lease_left + 0.001, remaining))

    def _after_block(self, _reply: Any) -> Action:
        self.ledger.report("wait", self._started)
        return self._ask()

    def _after_register(self, _reply: Any) -> Action:
        self.ledger.registered(self.plan)
        self._phase = "fetch"
        return FETCH

    def _after_store(self, reply: Any) -> Action:
        stored = int(reply)
        if stored == 1:
            return Done(TierResult(self._value, "fetched"))
        if stored < 0:  # refused by the server (out of memory); the script released the lease
            self.ledger.failed(self._started, MemoryError("the server refused the entry"))
            return Done(TierResult(self._value, "fetched"))
        # Refused: a write happened during the fetch, so the value may already be stale. The
        # callers of this flight get it (they asked before the write), L1 does not keep it.
        self.ledger.report("store_refused", self._started)
        return Done(TierResult(self._value, "fetched", keep_local=False))

    def _after_release(self, _reply: Any) -> Action:
        return Done(TierResult(self._value, "fetched"))


_AFTER: Final[dict[str, Callable[[Load, Any], Action]]] = {
    "flush": Load._after_flush,
    "ask": Load._after_ask,
    "block": Load._after_block,
    "register": Load._after_register,
    "store": Load._after_store,
    "release": Load._after_release,
}


# -- values ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Values:
    """How a value becomes an envelope and back: JSON (or the caller's codec), never pickle.

    An envelope is one header line, ``wm2 <signature> <expires ms> json <created ms> <fetch ms>``
    (or ``... local <created ms>`` for a value that stays in its process), then the payload.
    With a MAC key (a tier given a ``secret``) the header ends in ``<mac>``: hex HMAC-SHA256 of
    the entry's Redis key, the header before it and the payload, so an entry is authentic only
    where it was stored, as it was stored; :meth:`authentic` checks it in constant time. Without
    one, any entry with matching tokens is served: whoever can write the keys chooses the value.
    """

    dumps: Callable[[Any], bytes | None]  # the tier's ``encode``
    loads: Callable[[bytes], Any]  # its ``decode``
    max_value_bytes: int
    mac_key: bytes | None = field(default=None, repr=False)  # never shown

    def envelope(
        self, signature: str, value: Any, seconds: float, plan: Plan, codec: SharedCodec | None
    ) -> bytes:
        try:
            shared = value if codec is None else codec.dump(value)
            payload = None if shared is None and codec is not None else self.dumps(shared)
        except Exception:
            payload = None
        created = int(time.time() * 1000)
        head = b"%s %s %d" % (SCHEMA, signature.encode(), created + plan.ttl_ms)
        if payload is None or len(payload) > self.max_value_bytes:
            return self._sealed(plan.entry, b"%s local %d" % (head, created), b"")
        header = b"%s json %d %d" % (head, created, int(seconds * 1000))
        return self._sealed(plan.entry, header, payload)

    def authentic(self, entry: str, header: bytes, payload: bytes) -> bool:
        """Whether the entry read at ``entry`` is one this tier's secret sealed there (always
        True without a secret)."""
        if self.mac_key is None:
            return True
        head, _, mac = header.rpartition(b" ")
        return hmac.compare_digest(mac, _mac(self.mac_key, entry, head, payload))

    def decode(self, payload: bytes, codec: SharedCodec | None) -> Any:
        value = self.loads(payload)
        return value if codec is None else codec.load(value)

    def _sealed(self, entry: str, header: bytes, payload: bytes) -> bytes:
        if self.mac_key is None:
            return b"%s\n%s" % (header, payload)
        return b"%s %s\n%s" % (header, _mac(self.mac_key, entry, header, payload), payload)


def _left(header: bytes) -> float | None:
    """Seconds an entry with ``header`` has left (its expiry, epoch ms, is the third field)."""
    try:
        return int(header.split(b" ")[2]) / 1000 - time.time()
    except (IndexError, ValueError):
        return None


def mac_key(secret: bytes) -> bytes:
    """The key entries are authenticated with: derived from ``secret`` for this one purpose, so
    it is never the key tenant names are made with (HKDF-style domain separation)."""
    return hmac.digest(secret, b"wm_middleware shared-tier entry MAC v1", "sha256")


def _mac(key: bytes, entry: str, header: bytes, payload: bytes) -> bytes:
    """Hex HMAC-SHA256 of an entry's Redis key, header (without its MAC) and payload; no part
    holds a newline but the payload, which comes last, so the message has one reading."""
    message = b"%s\n%s\n%s" % (entry.encode(), header, payload)
    return hmac.digest(key, message, "sha256").hex().encode()
