"""The process's subscriber: invalidations published by any process reach this one's L1.

One daemon thread per process and tier, started lazily in the process that uses it. It pings
every 0.1 s, so a lost connection (or a hung server) is noticed within 0.5 s. On a loss it drops
the bound memories (messages sent meanwhile are gone), and again when it is back (what was
fetched in between may have been invalidated unheard). Until it is subscribed, the tier returns
values from Redis without letting L1 keep them (``trusted``). Each confirmation is a successful
contact: the tier replays the invalidations it could not deliver (``on_confirmed``).

The same connection listens on the settling channel (``settling``: its name and who hears it):
each message is handed over as it comes, and ``None`` on each (re)subscription, when what was
said meanwhile may have been missed (see :mod:`.settling`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Final

from .connections import Endpoint, subscribed, sync_client
from .health import Health
from .memories import Memories

__all__ = ["Subscriber"]

_PING_EVERY: Final = 0.1
# A request (the SUBSCRIBE, a ping) unanswered this long means the connection is lost; with a
# ping every 0.1 s and reads of 0.05 s, a lost subscriber is noticed within 0.5 s.
_SILENCE_LIMIT: Final = 0.3


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
        memories: Memories,
        health: Health,
        on_confirmed: Callable[[], None],
        settling: tuple[str, Callable[[bytes | None], None]] | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._op_timeout = op_timeout
        self._channel = channel
        self._settling = settling
        # Weak: a tier dropped by its owner (and with it its memories) stops its subscriber.
        self._memories = weakref.ref(memories)
        self._health = health
        self._on_confirmed = on_confirmed
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

    def stop(self, wait: float) -> None:
        """Stop the thread and close its connection; wait up to ``wait`` seconds for it."""
        self.stopped.set()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)

    def trusted(self, epoch: int) -> bool:
        return self.confirmed and self.epoch == epoch

    def _run(self) -> None:
        backoff = 0.05
        while not self.stopped.is_set() and self._memories() is not None:
            try:
                client = sync_client(
                    self._endpoint, self._op_timeout, self._op_timeout, listener=True
                )
                channels = [self._channel]
                if self._settling is not None:
                    channels.append(self._settling[0])
                with subscribed(client, *channels) as pubsub:
                    self._listen(pubsub)
            except Exception as error:
                self._lost(error)
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
            else:
                backoff = 0.05
        self.confirmed = False

    def _listen(self, pubsub: object) -> None:
        """Read messages until stopped; raises when the connection is lost or silent.

        Silence runs from the oldest request still unanswered (the SUBSCRIBE, then a ping) to
        the start of a read that finds nothing: a reply that came in meanwhile is found by that
        read, so a thread that was not scheduled for a while (a loaded machine, the GIL held
        elsewhere) does not take its own pause for the server's.
        """
        last_ping = time.monotonic()
        asked: float | None = last_ping  # when the oldest request still unanswered was sent
        while not self.stopped.is_set():
            reading = time.monotonic()
            message = pubsub.get_message(timeout=_PING_EVERY / 2)  # type: ignore[attr-defined]
            now = time.monotonic()
            if message is not None:
                asked = None  # any reply shows the link alive
                if self._settles(message):
                    pass
                elif message["type"] == "subscribe":
                    self._confirmed()
                elif message["type"] == "message":
                    memories = self._memories()
                    if memories is None:
                        return
                    memories.heard(message["data"])
            elif asked is not None and reading - asked > _SILENCE_LIMIT:
                raise TimeoutError("no reply from the server")
            if now - last_ping >= _PING_EVERY:
                pubsub.ping()  # type: ignore[attr-defined]
                last_ping = now
                if asked is None:
                    asked = now
            if self._memories() is None:
                return

    def _settles(self, message: dict[str, object]) -> bool:
        """Hand a message of the settling channel over (True), or say it is not one (False)."""
        settling = self._settling
        if settling is None or _text(message.get("channel")) != settling[0]:
            return False
        data = message.get("data")
        if message["type"] == "subscribe":
            settling[1](None)
        elif message["type"] == "message" and isinstance(data, bytes):
            settling[1](data)
        return True

    def _confirmed(self) -> None:
        self.confirmed = True
        self._health.succeeded()
        if self._missed:
            # Back after a loss: what this process fetched meanwhile may have been invalidated
            # by a message it never heard.
            self._missed = False
            self._drop_everything()
        try:
            self._on_confirmed()
        except Exception:
            pass  # a replay that fails stays pending; the next contact tries again

    def _lost(self, error: Exception) -> None:
        # Messages published while we are away are gone: drop what L1 holds, once per loss.
        # Failed reconnections are not new losses: L1 keeps serving what this process fetches
        # itself (with Redis down, nobody can publish either).
        if self.confirmed:
            self.confirmed = False
            self.epoch += 1
            self._missed = True
            self._drop_everything()
        else:
            self._health.failed(error)  # could not (re)connect: the tier cannot be reached

    def _drop_everything(self) -> None:
        memories = self._memories()
        if memories is not None:
            memories.drop(everything=True)


def _text(channel: object) -> str | None:
    if isinstance(channel, bytes):
        return channel.decode("utf-8", "replace")
    return channel if isinstance(channel, str) else None
