"""Running the emulator: in-process background server and blocking ``serve``.

Contract:

* :class:`EmulatorServer` is an :class:`~wm_middleware.emulator.core.Emulator` that
  can run uvicorn on a daemon thread. ``start()`` binds ``host:port`` itself (port
  ``0`` picks a free port, exposed as :attr:`EmulatorServer.port`) and returns only
  once the server accepts connections; ``stop()`` releases hung requests, shuts
  uvicorn down and joins the thread. It is a (sync and async) context manager and is
  safe to use from async tests because the server never runs on the caller's loop.
* :func:`serve` binds ``host:port`` (raising :class:`OSError` when it cannot), reports the
  address it listens on, then runs the emulator in the foreground until interrupted (the CLI).
* :func:`supermemory_target` is the set-up of a script that runs against the real API when
  ``SUPERMEMORY_API_KEY`` is set, and against a seeded :class:`EmulatorServer` otherwise.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Unpack

import uvicorn

from .app import create_app
from .core import Emulator, EmulatorOptions
from .latency import LatencySpec
from .store import DEFAULT_CONTAINER_TAG, SeedMemory

__all__ = ["EmulatorServer", "serve", "supermemory_target"]


def _listen(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host:port`` (``0`` picks a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: without it, Nagle's algorithm and delayed ACKs add
        # ~40 ms to every request after the first on a kept-alive connection.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class EmulatorServer(Emulator):
    """An emulator served over HTTP from a background thread.

    Args:
        host: interface to bind (default loopback).
        port: TCP port; ``0`` (default) picks a free one.
        log_level: uvicorn log level (default ``"warning"``).
        startup_timeout: seconds ``start()`` waits for the server to come up.
        **options: forwarded to :class:`Emulator` (``latency``, ``seed``,
            ``error_rate``, ``error_statuses``, ``api_keys``, ``indexing_delay``).

    Example::

        with EmulatorServer() as server:
            server.seed("sk-test", ["User has a peanut allergy"], container_tag="u1")
            client = supermemory.Supermemory(api_key="sk-test", base_url=server.base_url)
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        startup_timeout: float = 10.0,
        **options: Unpack[EmulatorOptions],
    ) -> None:
        super().__init__(**options)
        self.host = host
        self._requested_port = port
        self.port: int = port
        self.log_level = log_level
        self.startup_timeout = startup_timeout
        self.app = create_app(self)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` -- pass as ``base_url`` to either SDK generation."""
        return _base_url(self.host, self.port)

    @property
    def running(self) -> bool:
        """Whether the server thread is alive and serving."""
        return (
            self._thread is not None
            and self._thread.is_alive()
            and bool(self._server and self._server.started)
        )

    def url(self, path: str) -> str:
        """Absolute URL for ``path`` on this server."""
        return self.base_url + (path if path.startswith("/") else "/" + path)

    def start(self) -> EmulatorServer:
        """Start serving (idempotent); returns ``self`` once connections are accepted."""
        if self._thread is not None:
            return self
        self.stopping.clear()
        sock = _listen(self.host, self._requested_port)
        self._socket = sock
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=1,
            timeout_keep_alive=5,
        )
        server = uvicorn.Server(config)
        self._server = server
        thread = threading.Thread(
            target=server.run,
            kwargs={"sockets": [sock]},
            name=f"wm-emulator:{self.port}",
            daemon=True,
        )
        self._thread = thread
        thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"emulator failed to start on {self.host}:{self.port}")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and join the thread (idempotent); hung requests are released."""
        self.stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        if self._socket is not None:
            self._socket.close()
        self._server = None
        self._thread = None
        self._socket = None

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EmulatorServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


def serve(
    host: str = "127.0.0.1",
    port: int = 8787,
    *,
    seed_data: Mapping[str, Iterable[SeedMemory | str | Mapping[str, Any]]] | None = None,
    container_tag: str = DEFAULT_CONTAINER_TAG,
    log_level: str = "info",
    on_listening: Callable[[str], None] | None = None,
    **options: Unpack[EmulatorOptions],
) -> None:
    """Serve the emulator on ``host:port`` in the foreground until interrupted.

    ``seed_data`` maps an API key to memories to seed before serving (plain strings
    go to ``container_tag``). Other options are those of :class:`Emulator`. Once the
    socket is bound, ``on_listening`` receives the base URL with the real port (``port=0``
    picks a free one); a failed bind raises :class:`OSError` before anything is served.
    """
    emulator = Emulator(**options)
    for key, memories in (seed_data or {}).items():
        emulator.seed(key, memories, container_tag=container_tag)
    sock = _listen(host, port)
    try:
        if on_listening is not None:
            on_listening(_base_url(host, int(sock.getsockname()[1])))
        config = uvicorn.Config(create_app(emulator), log_level=log_level, lifespan="off")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


@contextmanager
def supermemory_target(
    memories: Iterable[SeedMemory | str | Mapping[str, Any]],
    *,
    container_tag: str = DEFAULT_CONTAINER_TAG,
    latency: LatencySpec = 0.05,
    api_key: str = "sk-example",
) -> Iterator[tuple[str, str | None]]:
    """``(api_key, base_url)`` for a client: the real API, or an emulator seeded with ``memories``.

    With ``SUPERMEMORY_API_KEY`` set, yields that key and ``SUPERMEMORY_BASE_URL`` (``None`` when
    unset: the SDK's default) and starts nothing; ``memories`` are not written anywhere. Without
    it, starts an :class:`EmulatorServer` on a free loopback port with ``latency`` (seconds per
    request, 50 ms by default), seeds ``memories`` for ``api_key`` (plain strings go to
    ``container_tag``), prints ``(no SUPERMEMORY_API_KEY: using the emulator at URL)`` and yields
    ``api_key`` and the emulator's base URL; the emulator stops when the block ends.
    """
    real_key = os.environ.get("SUPERMEMORY_API_KEY")
    if real_key:
        yield real_key, os.environ.get("SUPERMEMORY_BASE_URL")
        return
    with EmulatorServer(latency=latency) as server:
        server.seed(api_key, memories, container_tag=container_tag)
        print(f"(no SUPERMEMORY_API_KEY: using the emulator at {server.base_url})")
        yield api_key, server.base_url
