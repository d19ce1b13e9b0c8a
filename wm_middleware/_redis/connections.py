"""Connections the tier makes for itself: its own timeouts, no retries, one set per process
(sync) and per event loop (async), from a URL or from a client's address and credentials.

redis-py's ``socket_timeout`` bounds each read, not a reply: a link that trickles one byte at a
time never trips it. The tier's sync connections put one deadline on a whole command (its send,
and every read of its reply, pipelines included); asyncio clients already bound a whole reply.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from .urls import checked, masked

__all__ = [
    "Conns",
    "Endpoint",
    "aclose_client",
    "async_client",
    "close_client",
    "endpoint_of",
    "subscribed",
    "sync_client",
]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the server is and how to reach it; the tier makes every connection from this."""

    cluster: bool
    nodes: tuple[tuple[str, int], ...]  # cluster start-up nodes
    kind: Literal["tcp", "ssl", "unix"]
    kwargs: tuple[tuple[str, Any], ...]  # host/port/db/credentials/ssl settings
    shown: str = ""  # where, for logs and reprs: never a password

    def __repr__(self) -> str:
        return f"Endpoint({self.shown})"


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


def _shown(kind: str, kwargs: dict[str, Any]) -> str:
    if kind == "unix":
        return f"unix://{kwargs.get('path', '')}"
    scheme = "rediss" if kind == "ssl" else "redis"
    return f"{scheme}://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def endpoint_of(target: object) -> Endpoint:
    if isinstance(target, str):
        checked(target, "RedisTier target")
        try:
            parsed = dict(redis.connection.parse_url(target))  # type: ignore[no-untyped-call]
        except ValueError:
            raise ValueError(f"RedisTier target is not a valid URL: {masked(target)!r}") from None
        cls = parsed.pop("connection_class", redis.Connection)
        return Endpoint(False, (), _kind_of(cls), _kept(parsed), masked(target))
    if isinstance(target, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)):
        nodes = tuple((n.host, int(n.port)) for n in target.get_nodes())
        if isinstance(target, redis.cluster.RedisCluster):
            kwargs = dict(target.get_connection_kwargs())  # type: ignore[no-untyped-call]
        else:
            kwargs = dict(target.connection_kwargs)
        kind: Literal["tcp", "ssl", "unix"] = "ssl" if kwargs.get("ssl") else "tcp"
        shown = "cluster " + ",".join(f"{h}:{p}" for h, p in nodes)
        return Endpoint(True, nodes, kind, _kept(kwargs), shown)
    if isinstance(target, (redis.Redis, redis.asyncio.Redis)):
        pool = target.connection_pool
        found = _kind_of(pool.connection_class)
        kwargs = dict(pool.connection_kwargs)
        return Endpoint(False, (), found, _kept(kwargs), _shown(found, kwargs))
    raise TypeError(
        "RedisTier target must be a redis:// URL or a redis-py client "
        f"(Redis, RedisCluster or their asyncio twins), not {type(target).__name__}"
    )


def _client_kwargs(endpoint: Endpoint, socket_timeout: float, connect_timeout: float) -> Any:
    kwargs = dict(endpoint.kwargs)
    kwargs.update(
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        health_check_interval=0,
    )
    return kwargs


class _DeadlineSocket:
    """A connected socket whose reads stop at the deadline of the command they belong to."""

    def __init__(self, sock: Any, owner: Any) -> None:
        self._sock = sock
        self._owner = owner  # the connection: it sets ``wm_deadline`` when it sends a command
        self._timeout: float | None = sock.gettimeout()

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._sock.settimeout(timeout)

    def gettimeout(self) -> float | None:
        return self._timeout

    def recv(self, size: int, *flags: int) -> bytes:
        if self._timeout != 0:  # a non-blocking probe (is there data?) is never cut short
            left = self._owner.wm_deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the reply did not arrive within the operation's deadline")
            cap = math.inf if self._timeout is None else self._timeout
            self._sock.settimeout(min(left, cap))
        return self._sock.recv(size, *flags)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _bounded(base: Any) -> type:
    """``base`` (a redis-py connection class) with one deadline per command."""

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        self.wm_deadline = time.monotonic() + (self.socket_timeout or math.inf)
        base.send_packed_command(self, command, check_health)

    def _connect(self: Any) -> Any:
        return _DeadlineSocket(base._connect(self), self)

    namespace = {"wm_deadline": math.inf, "send_packed_command": send_packed_command}
    namespace["_connect"] = _connect
    return type(f"Bounded{base.__name__}", (base,), namespace)


_SYNC_CLASSES: Final = {
    "tcp": _bounded(redis.Connection),
    "ssl": _bounded(redis.SSLConnection),
    "unix": _bounded(redis.UnixDomainSocketConnection),
}


_PLAIN_CLASSES: Final = {
    "tcp": redis.Connection,
    "ssl": redis.SSLConnection,
    "unix": redis.UnixDomainSocketConnection,
}


def sync_client(
    endpoint: Endpoint, socket_timeout: float, connect_timeout: float, *, listener: bool = False
) -> Any:
    """A client whose every command (send and whole reply) ends within ``socket_timeout``.

    A pub/sub ``listener`` reads what nobody asked for, so its reads are bounded one by one, and
    it never reconnects by itself: its owner must notice every loss (messages were missed).
    On Cluster, redis-py builds each node's connections itself: there ``socket_timeout`` bounds
    each read.
    """
    kwargs = _client_kwargs(endpoint, socket_timeout, connect_timeout)
    # One immediate retry on a broken connection (a pooled socket the server closed while idle,
    # after a restart); none on a timeout: redis-py's default turns 50 ms into seconds.
    retry = Retry(NoBackoff(), 0 if listener else 1, supported_errors=(RedisConnectionError,))
    cls = (_PLAIN_CLASSES if listener else _SYNC_CLASSES)[endpoint.kind]
    if endpoint.cluster:
        for name in ("host", "port", "db", "path"):
            kwargs.pop(name, None)
        nodes = [redis.cluster.ClusterNode(h, p) for h, p in endpoint.nodes]  # type: ignore[no-untyped-call]
        return redis.cluster.RedisCluster(
            startup_nodes=nodes, retry=retry, ssl=endpoint.kind == "ssl", **kwargs
        )
    pool = redis.ConnectionPool(connection_class=cls, retry=retry, **kwargs)
    return redis.Redis(connection_pool=pool)


def close_client(client: Any) -> None:
    """Close every connection of a sync client the tier made (its own pool included)."""
    try:
        if isinstance(client, redis.cluster.RedisCluster):
            client.close()
        else:
            client.connection_pool.disconnect()
    except Exception:
        pass  # closing never fails a caller


@contextmanager
def subscribed(client: Any, *channels: str) -> Iterator[Any]:
    """A pub/sub of ``client`` (a sync client the tier made) subscribed to ``channels``.

    On the way out, however the block ends, the pub/sub is reset and ``client`` closed.
    """
    try:
        pubsub = client.pubsub()
        try:
            pubsub.subscribe(*channels)
            yield pubsub
        finally:
            try:
                pubsub.reset()
            except Exception:
                pass  # closing never fails a caller
    finally:
        close_client(client)


async def aclose_client(client: Any) -> None:
    """Close every connection of an asyncio client the tier made."""
    try:
        await client.aclose()
        if not isinstance(client, redis.asyncio.cluster.RedisCluster):
            await client.connection_pool.disconnect()
    except Exception:
        pass


def async_client(endpoint: Endpoint, socket_timeout: float, connect_timeout: float) -> Any:
    kwargs = _client_kwargs(endpoint, socket_timeout, connect_timeout)
    retry = redis.asyncio.retry.Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
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


@dataclass(slots=True)
class Conns:
    """The connections of one process (sync) or one event loop (async)."""

    main: Any
    blocking: Any
