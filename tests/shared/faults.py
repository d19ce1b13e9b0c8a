"""Fault injection for the shared-tier tests: a bounded loopback TCP proxy.

``Proxy(port)`` listens on a free loopback port and forwards to ``127.0.0.1:port``. Faults apply to
every connection, current and new, as soon as they are set:

* ``latency``: seconds added before each chunk is forwarded, both ways;
* ``trickle``: seconds between single bytes sent back to the client (a slow, sick link);
* ``stalled``: nothing is forwarded (connections stay open: a partition that drops packets);
* ``cut()``: every connection is closed and new ones are refused until ``restore()``.

Bounded: at most ``max_connections`` at once, every thread a daemon that polls its socket with a
short timeout and stops when the proxy is closed.
"""

from __future__ import annotations

import socket
import threading
import time

__all__ = ["Proxy"]

_POLL = 0.02


class Proxy:
    def __init__(self, target_port: int, *, max_connections: int = 64) -> None:
        self.latency = 0.0
        self.trickle: float | None = None
        self.stalled = False
        self._target = target_port
        self._max = max_connections
        self._refusing = False
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL)
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="test-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def cut(self) -> None:
        """Close every connection and refuse new ones (a partition that resets)."""
        self._refusing = True
        self._drop_all()

    def restore(self) -> None:
        self._refusing = False
        self.stalled = False
        self.trickle = None
        self.latency = 0.0

    def close(self) -> None:
        self._closed.set()
        self._drop_all()
        self._listener.close()

    def _drop_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _close(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            with self._lock:
                full = len(self._pairs) >= self._max
            if self._refusing or full:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target), timeout=1)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            for source, sink, back in ((client, upstream, False), (upstream, client, True)):
                try:
                    source.settimeout(_POLL)
                except OSError:  # cut meanwhile
                    continue
                threading.Thread(
                    target=self._pump, args=(source, sink, back), name="test-proxy", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, back: bool) -> None:
        """Forward ``source`` to ``sink``; ``back`` is the server-to-client direction."""
        try:
            while not self._closed.is_set():
                if self.stalled:
                    time.sleep(_POLL)
                    continue
                try:
                    data = source.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                if self.latency:
                    time.sleep(self.latency)
                if back and self.trickle is not None:
                    for i in range(len(data)):
                        if self._closed.is_set():
                            return
                        sink.sendall(data[i : i + 1])
                        time.sleep(self.trickle)
                else:
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
