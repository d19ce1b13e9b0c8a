"""The process's subscriber: invalidations published by any process reach this one's L1.

One daemon thread per process and tier, started lazily in the process that uses it. It pings
every 0.1 s, so a lost connection (or a hung server) is noticed within 0.5 s. On a loss it drops
the bound memories (messages sent meanwhile are gone), and again when it is back (what was
fetched in between may have been invalidated unheard). Until it is subscribed, the tier returns
values from Redis without letting L1 keep them (``trusted``).
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final

from .._core import InvalidationSink
from .connections import Endpoint, sync_client
from .encoding import key_from_canonical

__all__ = ["Subscriber"]

_PING_EVERY: Final = 0.1
_SILENCE_LIMIT: Final = 0.4  # + one read timeout: a lost subscriber is noticed within 0.5 s


class Subscriber:
    """The process's listener for invalidations published by any process.

    ``epoch`` moves on every loss of the connection; a load compares the epoch at its start and
    end, so a value fetched across a loss is not kept in L1 (its invalidation may be lost).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        op_timeout: float,
        channel: str,
        memories: Callable[[], list[InvalidationSink]],
    ) -> None:
        self._endpoint = endpoint
        self._op_timeout = op_timeout
        self._channel = channel
        # Weak: a tier dropped by its owner stops its subscriber.
        self._memories = weakref.WeakMethod(memories)
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
            if self._memories() is None:
                return
            pubsub = None
            try:
                client = sync_client(self._endpoint, self._op_timeout, self._op_timeout)
                pubsub = client.pubsub()
                pubsub.subscribe(self._channel)
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
                    if self._memories() is None:
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
        for memory in self._bound():
            try:
                memory.drop_local(everything=True)
            except Exception:
                pass

    def _bound(self) -> list[InvalidationSink]:
        memories = self._memories()
        return [] if memories is None else memories()

    def _deliver(self, data: bytes) -> None:
        try:
            message = json.loads(data)
            keys = [key_from_canonical(k) for k in message.get("k", ())]
            scopes = [key_from_canonical(s) for s in message.get("s", ())]
            everything = bool(message.get("all"))
        except Exception:
            return  # not ours, or malformed: nothing to drop
        for memory in self._bound():
            try:
                memory.drop_local(keys=keys, scopes=scopes, everything=everything)
            except Exception:
                pass
