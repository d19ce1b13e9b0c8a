"""Connections the tier makes for itself: its own timeouts, no retries, one set per process
(sync) and per event loop (async), from a URL or from a client's address and credentials."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["Conns", "Endpoint", "async_client", "endpoint_of", "sync_client"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the server is and how to reach it; the tier makes every connection from this."""

    cluster: bool
    nodes: tuple[tuple[str, int], ...]  # cluster start-up nodes
    kind: Literal["tcp", "ssl", "unix"]
    kwargs: tuple[tuple[str, Any], ...]  # host/port/db/credentials/ssl settings


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


def endpoint_of(target: object) -> Endpoint:
    if isinstance(target, str):
        if not target.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"RedisTier target must be a redis://, rediss:// or unix:// URL, got {target!r}"
            )
        parsed = dict(redis.connection.parse_url(target))  # type: ignore[no-untyped-call]
        cls = parsed.pop("connection_class", redis.Connection)
        return Endpoint(False, (), _kind_of(cls), _kept(parsed))
    if isinstance(target, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)):
        nodes = tuple((n.host, int(n.port)) for n in target.get_nodes())
        if isinstance(target, redis.cluster.RedisCluster):
            kwargs = dict(target.get_connection_kwargs())  # type: ignore[no-untyped-call]
        else:
            kwargs = dict(target.connection_kwargs)
        kind: Literal["tcp", "ssl", "unix"] = "ssl" if kwargs.get("ssl") else "tcp"
        return Endpoint(True, nodes, kind, _kept(kwargs))
    if isinstance(target, (redis.Redis, redis.asyncio.Redis)):
        pool = target.connection_pool
        return Endpoint(
            False, (), _kind_of(pool.connection_class), _kept(dict(pool.connection_kwargs))
        )
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


def sync_client(endpoint: Endpoint, socket_timeout: float, connect_timeout: float) -> Any:
    kwargs = _client_kwargs(endpoint, socket_timeout, connect_timeout)
    # No retries: redis-py's default turns a 50 ms timeout into seconds of retrying.
    retry = Retry(NoBackoff(), 0)
    if endpoint.cluster:
        for name in ("host", "port", "db", "path"):
            kwargs.pop(name, None)
        nodes = [redis.cluster.ClusterNode(h, p) for h, p in endpoint.nodes]  # type: ignore[no-untyped-call]
        return redis.cluster.RedisCluster(
            startup_nodes=nodes, retry=retry, ssl=endpoint.kind == "ssl", **kwargs
        )
    cls = {
        "tcp": redis.Connection,
        "ssl": redis.SSLConnection,
        "unix": redis.UnixDomainSocketConnection,
    }[endpoint.kind]
    pool = redis.ConnectionPool(connection_class=cls, retry=retry, **kwargs)
    return redis.Redis(connection_pool=pool)


def async_client(endpoint: Endpoint, socket_timeout: float, connect_timeout: float) -> Any:
    kwargs = _client_kwargs(endpoint, socket_timeout, connect_timeout)
    retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
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
