"""Which scopes settle anywhere in the fleet: write-aware freshness across processes.

A process that writes settles the written scopes (see :mod:`wm_middleware._freshness`). Other
processes sharing the tier must know too, or one of them refetches the pre-indexing answer and
keeps it (in its L1 and in Redis) for the full TTL. So a settle is announced, through the tier:

* **State.** One hash per namespace (``Layout.settling``): field = the scope's canonical text,
  value = its deadline (epoch milliseconds). It expires with its latest deadline
  (:data:`~.scripts.BEGIN_SETTLE`, only ever lengthened), so a writer that dies leaves nothing
  behind for longer than ``settle_max``.
* **Delivery.** A message on ``Layout.settling_channel`` when a settle begins or ends. The
  tier's :class:`~.subscriber.Subscriber` listens on it, on its one connection, beside the
  invalidation channel; each time it (re)subscribes, the whole hash is read again, so a process
  started mid-settle, or back from a lost connection, knows what settles.
* **Whose.** Each message names the board that sent it (a token per process), so a process
  knows which settles are another's: it never confirms a copy for a scope another process's
  write settles (it does not know those documents), it fetches. What a reload reads from the
  hash counts as another's.
* **Rounds.** :meth:`SharedSettling.status_round` makes a tenant's status request once for the
  fleet per round, under the tenant's lease, and stores its answer (sealed under the tier's
  secret, if any) for the other processes following writes of that tenant: under SDK 3.x the
  processing list (it answers for every document of the tenant), under 5.x the status of one
  document, which answers for the documents written after it while it is pending.
* **Sealed.** With a secret, every announcement (each hash value, each message) carries a MAC
  under it (:meth:`Layout.seal`), bound to where it is stored or sent: a Redis writer without
  the secret can neither make a settle up nor end one, and one it copies to another scope or
  replays is refused. An end names the deadline it ends, so a replayed old end cannot end a
  later settle of the same scope. What it can still do is delete the hash (a process that
  subscribes after that misses settles begun before it; those already heard stay).
* **Use.** A process caps the ttl of what it fetches for a settling scope (L1 and the shared
  entry) and says so on the read's span. The end of a settle needs nothing more here: the
  writer's invalidation reaches every L1 through the tier's own channel.

This module holds the state and the messages; the tier carries the I/O (its connections, its
scripts). Every Redis error is swallowed (logged at debug): freshness is best effort and never
breaks a read or a write.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from .._core.tier import Answers
from .encoding import canonical_key, key_from_canonical
from .protocol import Layout
from .scripts import BEGIN_SETTLE, Run

__all__ = ["SharedSettling"]

logger = logging.getLogger(__name__)


class SharedSettling:
    """The fleet's settling scopes, as this process knows them (see the module docstring).

    Args:
        layout: the tier's names (the hash and the channel).
        send: runs one step on the tier's connection of this process (raises on a failure).
    """

    def __init__(self, layout: Layout, send: Callable[[Run], Any]) -> None:
        self._layout = layout
        self.key = layout.settling
        self.channel = layout.settling_channel
        self._send = send
        self._lock = threading.Lock()
        # lock: scope -> {origin: deadline as announced, epoch ms}; origin "" is unknown (read
        # from the hash, which holds the latest deadline of the scope whoever announced it)
        self._deadlines: dict[Hashable, dict[str, int]] = {}
        self._pid = -1
        self._token = ""
        self.loaded = threading.Event()  # the hash was read since the last (re)subscription
        self._warned: set[str] = set()  # what failed its MAC, logged once each

    # -- what freshness calls ----------------------------------------------------------------
    def begin(self, scopes: Iterable[Hashable], seconds: float) -> None:
        """Announce that ``scopes`` settle for ``seconds`` (at most)."""
        texts = [canonical_key(scope) for scope in scopes]
        deadline_ms = int((time.time() + seconds) * 1000)
        origin = self.origin
        self._apply(texts, deadline_ms, origin)
        message = json.dumps({"b": texts, "d": deadline_ms, "o": origin}).encode()
        args: list[Any] = [int(seconds * 1000) + 1000, self.channel, self._sealed_message(message)]
        for text in texts:
            args += [text, self._layout.seal(self._field(text), b"%d" % deadline_ms)]
        self._quietly(Run(tuple(args), BEGIN_SETTLE, (self.key,)), "announce a settle")

    def end(self, scopes: Iterable[Hashable]) -> None:
        """Announce that ``scopes`` have settled."""
        scopes = list(scopes)
        texts = [canonical_key(scope) for scope in scopes]
        origin = self.origin
        # The latest deadline this process announced for them: the end ends no later settle.
        with self._lock:
            upto = max((self._deadlines.get(s, {}).get(origin, 0) for s in scopes), default=0)
        self._forget(texts, origin, upto)
        self._quietly(Run(("HDEL", self.key, *texts)), "announce a settle's end")
        message = json.dumps({"e": texts, "d": upto, "o": origin}).encode()
        step = Run(("PUBLISH", self.channel, self._sealed_message(message)))
        self._quietly(step, "announce a settle's end")

    def deadline(self, scopes: Iterable[Hashable]) -> float | None:
        """The earliest monotonic deadline of a settle covering any of ``scopes``, or None."""
        if not self._deadlines:
            return None
        found = [deadline for _, deadline in self._covering(scopes)]
        return _monotonic(min(found)) if found else None

    def foreign(self, scopes: Iterable[Hashable]) -> bool:
        """Whether another process's settle (or one of unknown origin) covers any of ``scopes``."""
        if not self._deadlines:
            return False
        origin = self.origin
        return any(by != origin for by, _ in self._covering(scopes))

    def status_round(
        self, scopes: Iterable[Hashable], seconds: float, ask: Callable[[], Any], answers: Answers
    ) -> tuple[Any, float] | None:
        """One status round for the tenant of ``scopes``, made once for the whole fleet.

        The answer another process stored for the tenant, if ``answers(answer, began)`` says
        it answers this round (``began``: when its request began, epoch seconds); else, under
        the tenant's lease (held ``seconds``), ``ask()`` here, its answer (a JSON object)
        stored for ``seconds`` for the other processes. Returns the answer with when its
        request began (epoch seconds); ``None`` when another process is making the round now
        (no request here this round: the read fetches, as an uncached one would) or ``ask``
        failed. Without the tier (a Redis error), ``ask()`` as one process would.
        """
        tenant = next((t for t in map(self._layout.tenant, scopes) if t is not None), None)
        if tenant is None:
            return _asked(ask)
        key, lease = self._layout.poll(tenant)
        ms = max(int(seconds * 1000), 1)
        try:
            shared = self._shared_round(key, self._send(Run(("GET", key))))
            if shared is not None and answers(*shared):
                return shared
            if not self._send(Run(("SET", lease, self.origin, "NX", "PX", ms))):
                return None
        except Exception:
            logger.debug("wm_middleware: no shared status round", exc_info=True)
            return _asked(ask)
        asked = _asked(ask)
        if asked is not None and isinstance(asked[0], dict):
            payload = json.dumps({"at": asked[1], "answer": asked[0]}).encode()
            step = Run(("SET", key, self._layout.seal(key, payload), "PX", ms))
            self._quietly(step, "share a status round")
        return asked

    def _shared_round(self, key: str, stored: Any) -> tuple[dict[str, Any], float] | None:
        """A round another process stored at ``key``: its answer and when it began, or None
        (none, unreadable, or not sealed under the tier's secret)."""
        if not isinstance(stored, bytes):
            return None
        payload = self._unsealed(key, stored, "a shared status round")
        if payload is None:
            return None
        try:
            data = json.loads(payload)
            answer = data["answer"]
            return (answer, float(data["at"])) if isinstance(answer, dict) else None
        except Exception:
            return None

    @property
    def origin(self) -> str:
        """This process's token in the messages (a new one after a fork)."""
        if self._pid != os.getpid():
            self._token, self._pid = f"{os.getpid()}-{secrets.token_hex(4)}", os.getpid()
        return self._token

    def _field(self, text: str) -> str:
        """Where the hash value of a scope's settle is stored: what its MAC is bound to."""
        return f"{self.key}\n{text}"

    def _sealed_message(self, message: bytes) -> bytes:
        return self._layout.seal(self.channel, message)

    def _unsealed(self, key: str, stored: bytes, what: str) -> bytes | None:
        """``stored`` as sealed at ``key``, or ``None`` (logged once per ``what``: a forger
        must not flood the log either)."""
        payload = self._layout.unsealed(key, stored)
        if payload is None and what not in self._warned:
            self._warned.add(what)
            logger.warning("wm_middleware: %s failed its MAC; ignored", what)
        return payload

    def _covering(self, scopes: Iterable[Hashable]) -> list[tuple[str, int]]:
        """``(origin, deadline)`` of the live settles covering ``scopes``; drops dead ones."""
        now = time.time() * 1000
        found: list[tuple[str, int]] = []
        with self._lock:
            for scope in scopes:
                settles = self._deadlines.get(scope)
                if not settles:
                    continue
                for by, deadline in list(settles.items()):
                    if deadline <= now:
                        del settles[by]
                    else:
                        found.append((by, deadline))
                if not settles:
                    del self._deadlines[scope]
        return found

    # -- what the subscriber calls ----------------------------------------------------------
    def heard(self, data: bytes | None) -> None:
        """A message on the channel; ``None``: (re)subscribed, read the whole hash again."""
        if data is None:
            self.reload()
            return
        payload = self._unsealed(self.channel, data, "a settle announcement")
        if payload is None:
            return
        try:
            message = json.loads(payload)
            origin = str(message.get("o", ""))
            if "b" in message:
                self._apply(message["b"], int(message["d"]), origin)
            if "e" in message:
                self._forget(message["e"], origin, int(message["d"]))
        except Exception:  # not a message of this library's
            return

    def reload(self) -> None:
        """Everything that settles now, read from the hash."""
        try:
            fields = self._send(Run(("HGETALL", self.key)))
        except Exception:
            logger.debug("wm_middleware: could not read the settling scopes", exc_info=True)
            return
        now_ms = time.time() * 1000
        read: list[tuple[Hashable, int]] = []
        for field, value in _pairs(fields):
            try:
                text = str(field, "utf-8")
                sealed = self._unsealed(self._field(text), value, "a settle announcement")
                deadline_ms = int(sealed) if sealed is not None else 0
                scope = key_from_canonical(text)
            except Exception:
                continue
            if deadline_ms > now_ms:
                read.append((scope, deadline_ms))
        origin = self.origin
        with self._lock:
            # This process's own settles stay its own; the rest is what was read, swapped in at
            # once: a reader never sees a scope that settles throughout go and come back.
            deadlines = {
                scope: {origin: settles[origin]}
                for scope, settles in self._deadlines.items()
                if origin in settles
            }
            for scope, deadline_ms in read:
                if deadlines.get(scope, {}).get(origin) != deadline_ms:  # not this process's
                    deadlines.setdefault(scope, {})[""] = deadline_ms
            self._deadlines = deadlines
        self.loaded.set()

    # -- state ---------------------------------------------------------------------------------
    def _apply(self, texts: Iterable[str], deadline_ms: int, origin: str) -> None:
        with self._lock:
            for scope in _scopes(texts):
                self._deadlines.setdefault(scope, {})[origin] = deadline_ms

    def _forget(self, texts: Iterable[str], origin: str, upto_ms: int) -> None:
        """The end of ``origin``'s settles of ``texts`` that end by ``upto_ms`` (and of those
        of unknown origin, read from the hash, that do: the end's HDEL removed them)."""
        with self._lock:
            for scope in _scopes(texts):
                settles = self._deadlines.get(scope, {})
                for by in (origin, ""):
                    if settles.get(by, upto_ms + 1) <= upto_ms:
                        del settles[by]
                if not settles:
                    self._deadlines.pop(scope, None)

    def _quietly(self, step: Run, what: str) -> None:
        try:
            self._send(step)
        except Exception:
            logger.debug("wm_middleware: could not %s", what, exc_info=True)


def _scopes(texts: Iterable[str]) -> Iterator[Hashable]:
    """The scopes named by ``texts`` (canonical keys); a text that names none is passed over."""
    for text in texts:
        try:
            yield key_from_canonical(text)
        except Exception:
            continue


def _monotonic(epoch_ms: int) -> float:
    """The ``time.monotonic()`` reading of the epoch time ``epoch_ms``."""
    return time.monotonic() + (epoch_ms / 1000 - time.time())


def _asked(ask: Callable[[], Any]) -> tuple[Any, float] | None:
    """``ask()`` with when it began (epoch seconds); None when it failed (returned None)."""
    began = time.time()
    got = ask()
    return None if got is None else (got, began)


def _pairs(fields: Any) -> list[tuple[bytes, bytes]]:
    """HGETALL's reply as pairs: a dict (RESP3, or parsed), or a flat list (raw RESP2)."""
    if isinstance(fields, dict):
        return list(fields.items())
    flat = list(fields or ())
    return list(zip(flat[::2], flat[1::2], strict=True))
