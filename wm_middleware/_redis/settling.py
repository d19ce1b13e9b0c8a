"""Which scopes settle anywhere in the fleet: write-aware freshness across processes.

A process that writes settles the written scopes (see :mod:`wm_middleware._freshness`). Other
processes sharing the tier must know too, or one of them refetches the pre-indexing answer and
keeps it (in its L1 and in Redis) for the full TTL. So a settle is announced:

* **State.** One hash per namespace, ``<namespace>:v1:{t:<namespace>}:settling``: field = the
  scope's canonical text, value = its deadline (epoch milliseconds). The hash expires with its
  latest deadline (``PEXPIRE``, only ever lengthened), so a writer that dies leaves nothing
  behind for longer than ``settle_max``.
* **Delivery.** ``PUBLISH`` on ``<namespace>:v1:settling`` when a settle begins or ends; one
  daemon thread per process listens, and reads the whole hash again each time it (re)subscribes,
  so a process started mid-settle, or back from a lost connection, knows what settles.
* **Use.** A process caps the ttl of what it fetches for a settling scope (L1 and the shared
  entry) to the deadline, and says so on the read's span. The end of a settle needs nothing
  more here: the writer's invalidation reaches every L1 through the tier's own channel.

Every Redis error is swallowed (counted nowhere else, logged at debug): freshness is best effort
and never breaks a read or a write.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Hashable, Iterable
from typing import Any, Final

from .connections import Endpoint, subscribed, sync_client
from .encoding import canonical_key, key_from_canonical

__all__ = ["SharedSettling", "shared_settling"]

logger = logging.getLogger(__name__)

# KEYS[1] the hash; ARGV[1] ms to live, ARGV[2] channel, ARGV[3] message, ARGV[4..] field, value.
_BEGIN: Final = """
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
"""
_RETRY: Final = 0.5


class SharedSettling:
    """The fleet's settling scopes, as this process knows them (see the module docstring)."""

    def __init__(
        self, endpoint: Endpoint, namespace: str, op_timeout: float, owner: Any = None
    ) -> None:
        # The tier this serves, weakly: its listener stops once the tier is gone.
        self._owner = (lambda: True) if owner is None else weakref.ref(owner)
        self._endpoint = endpoint
        self._op_timeout = op_timeout
        self.key = f"{namespace}:v1:{{t:{namespace}}}:settling"
        self.channel = f"{namespace}:v1:settling"
        self._lock = threading.Lock()
        self._deadlines: dict[Hashable, float] = {}  # lock: scope -> monotonic deadline
        self._pid = -1
        self._client: Any = None
        self.subscribed = threading.Event()

    # -- what freshness calls ----------------------------------------------------------------
    def begin(self, scopes: Iterable[Hashable], seconds: float) -> None:
        """Announce that ``scopes`` settle for ``seconds`` (at most)."""
        texts = [canonical_key(scope) for scope in scopes]
        deadline_ms = int((time.time() + seconds) * 1000)
        self._apply(texts, deadline_ms)
        args: list[Any] = [int(seconds * 1000) + 1000, self.channel]
        args.append(json.dumps({"b": texts, "d": deadline_ms}))
        for text in texts:
            args += [text, deadline_ms]
        try:
            self._redis().eval(_BEGIN, 1, self.key, *args)
        except Exception:
            logger.debug("wm_middleware: could not announce a settle", exc_info=True)

    def end(self, scopes: Iterable[Hashable]) -> None:
        """Announce that ``scopes`` have settled."""
        texts = [canonical_key(scope) for scope in scopes]
        self._forget(texts)
        try:
            client = self._redis()
            client.hdel(self.key, *texts)
            client.publish(self.channel, json.dumps({"e": texts}))
        except Exception:
            logger.debug("wm_middleware: could not announce a settle's end", exc_info=True)

    def deadline(self, scopes: Iterable[Hashable]) -> float | None:
        """The earliest monotonic deadline of a settle covering any of ``scopes``, or None."""
        if not self._deadlines:
            return None
        self._redis()  # (re)starts the listener in a new process
        now = time.monotonic()
        found: float | None = None
        with self._lock:
            for scope in scopes:
                deadline = self._deadlines.get(scope)
                if deadline is None:
                    continue
                if deadline <= now:
                    del self._deadlines[scope]
                elif found is None or deadline < found:
                    found = deadline
        return found

    # -- state ---------------------------------------------------------------------------------
    def _apply(self, texts: Iterable[str], deadline_ms: int) -> None:
        deadline = time.monotonic() + (deadline_ms / 1000 - time.time())
        with self._lock:
            for text in texts:
                try:
                    self._deadlines[key_from_canonical(text)] = deadline
                except Exception:
                    continue

    def _forget(self, texts: Iterable[str]) -> None:
        with self._lock:
            for text in texts:
                try:
                    self._deadlines.pop(key_from_canonical(text), None)
                except Exception:
                    continue

    def _redis(self) -> Any:
        """This process's client; the first call in a process starts its listener."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._client = sync_client(self._endpoint, self._op_timeout, self._op_timeout)
                    self.subscribed = threading.Event()
                    self._pid = os.getpid()
                    threading.Thread(
                        target=self._listen, name="wm-middleware-shared-settling", daemon=True
                    ).start()
        return self._client

    def _listening(self, pid: int) -> bool:
        return self._pid == pid and self._owner() is not None

    def _listen(self) -> None:
        pid = os.getpid()
        while self._listening(pid):
            try:
                client = sync_client(self._endpoint, self._op_timeout, self._op_timeout)
                with subscribed(client, self.channel) as pubsub:
                    self._read(client, pubsub, pid)
            except Exception:
                logger.debug("wm_middleware: settle listener lost its connection", exc_info=True)
                self.subscribed.clear()
                time.sleep(_RETRY)

    def _read(self, client: Any, pubsub: Any, pid: int) -> None:
        """Apply what the channel says until this process stops listening; raises on a loss."""
        while self._listening(pid):
            message = pubsub.get_message(timeout=0.1)
            if message is None:
                pubsub.ping()
                continue
            if message["type"] == "subscribe":
                self._reload(client)
                self.subscribed.set()
            elif message["type"] == "message":
                self._deliver(message["data"])

    def _reload(self, client: Any) -> None:
        """Everything that settles now, read from the hash (after (re)subscribing)."""
        now_ms = time.time() * 1000
        fields = client.hgetall(self.key)
        with self._lock:
            self._deadlines.clear()
        for text, value in fields.items():
            deadline_ms = int(value)
            if deadline_ms > now_ms:
                self._apply([str(text, "utf-8")], deadline_ms)

    def _deliver(self, data: bytes) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if "b" in message:
            self._apply(message["b"], int(message["d"]))
        if "e" in message:
            self._forget(message["e"])


_BY_TIER: weakref.WeakKeyDictionary[Any, SharedSettling] = weakref.WeakKeyDictionary()
_BY_TIER_LOCK = threading.Lock()


def shared_settling(tier: Any) -> SharedSettling:
    """The :class:`SharedSettling` of ``tier`` (a ``RedisTier``): one per tier, listening."""
    with _BY_TIER_LOCK:
        found = _BY_TIER.get(tier)
        if found is None:
            found = _BY_TIER[tier] = SharedSettling(
                tier.endpoint, tier.namespace, tier.op_timeout, tier
            )
    found._redis()
    return found
