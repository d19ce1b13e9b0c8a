"""The shared tier end to end: two application processes with ``instrument(shared=url)``.

Each process (``sdk_worker.serve``, started with spawn) calls the Supermemory API emulator
through the installed SDK (3.x or 5.x); the test interleaves their calls and looks at what the
emulator received and what Redis holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import pytest
import redis

import wm_middleware
from tests.interception.conftest import Generation
from wm_middleware import RedisTier, WorkingMemoryInstrumentor
from wm_middleware.emulator import EmulatorServer

from . import sdk_worker
from .conftest import SPAWN, wait_until

MAJOR = version("supermemory").split(".")[0]
# Keys that would stand out anywhere in Redis.
KEY = "sk-live-7f3a9c2e-ALPHA-never-in-redis"
OTHER_KEY = "sk-live-0b1d4e8f-BRAVO-never-in-redis"
TAG = "user-1"
# The application processes make theirs patient too (``sdk_worker``): what is tested is what the
# tier shares, not its timeout.
pytestmark = pytest.mark.usefixtures("patient_url_tiers")


class App:
    """One application process and the last statistics of its working memory."""

    def __init__(self, redis_url: str, base_url: str) -> None:
        self.requests: Any = SPAWN.Queue()
        self.replies: Any = SPAWN.Queue()
        self.process = SPAWN.Process(
            target=sdk_worker.serve,
            args=(redis_url, base_url, MAJOR, self.requests, self.replies),
            daemon=True,
        )
        self.process.start()
        _, _, self.stats = self.replies.get(timeout=120)

    def call(self, command: str, api_key: str = KEY, tag: str = TAG) -> Any:
        self.requests.put((command, api_key, tag))
        _, value, self.stats = self.replies.get(timeout=60)
        if isinstance(value, Exception):
            raise value
        return value

    def fresh_stats(self) -> Any:
        """The working memory's statistics now."""
        self.call("stats")
        return self.stats

    def close(self) -> None:
        self.requests.put(("quit", "", ""))
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()


@pytest.fixture
def emulator(emulator_server: EmulatorServer) -> EmulatorServer:
    emulator_server.reset()
    emulator_server.set_latency(None)
    for key in (KEY, OTHER_KEY):
        emulator_server.seed(key, ["User likes green tea", "User drinks coffee"], container_tag=TAG)
    return emulator_server


@pytest.fixture
def apps(redis_url: str, emulator: EmulatorServer) -> Iterator[tuple[App, App]]:
    first, second = App(redis_url, emulator.base_url), App(redis_url, emulator.base_url)
    yield first, second
    first.close()
    second.close()


def searches(emulator: EmulatorServer) -> int:
    return emulator.count("POST", "/v4/search" if MAJOR == "3" else "/ns/*/search")


def test_a_search_made_by_one_process_is_a_shared_hit_in_another(
    apps: tuple[App, App], emulator: EmulatorServer
) -> None:
    first, second = apps
    fetched = first.call("search")
    served = second.call("search")
    assert searches(emulator) == 1
    assert type(served) is type(fetched)
    assert served == fetched
    assert (second.stats.shared_hits, second.stats.misses) == (1, 0)
    second.call("search")  # now in the second process's own memory
    assert (second.stats.hits, second.stats.shared_hits) == (2, 1)


def test_a_write_through_one_process_makes_the_other_miss_in_its_memory_and_in_redis(
    apps: tuple[App, App], emulator: EmulatorServer
) -> None:
    first, second = apps
    first.call("search")
    second.call("search")  # a shared hit, kept in the second process's memory
    dropped = second.stats.invalidations
    first.call("add")
    # The write reaches the second process's memory by pub/sub.
    wait_until(lambda: second.fresh_stats().invalidations > dropped)
    before = searches(emulator)
    second.call("search")
    assert searches(emulator) == before + 1  # missed in its memory and in Redis
    assert second.stats.misses == 1
    first.call("search")  # the fresh result the second stored is shared again
    assert searches(emulator) == before + 1


def test_two_api_keys_never_share_an_entry(apps: tuple[App, App], emulator: EmulatorServer) -> None:
    first, second = apps
    first.call("search", KEY)
    second.call("search", OTHER_KEY)
    assert searches(emulator) == 2
    assert (second.stats.shared_hits, second.stats.misses) == (0, 1)


def test_no_api_key_reaches_redis(
    apps: tuple[App, App], emulator: EmulatorServer, raw: redis.Redis
) -> None:
    first, second = apps
    listener = raw.pubsub()
    listener.psubscribe("*")
    for app, key in ((first, KEY), (second, OTHER_KEY), (second, KEY)):
        app.call("search", key)
        app.call("add", key)
        app.call("search", key)
    held: list[bytes] = []
    for name in raw.scan_iter(count=1000):
        held.append(name)
        kind = raw.type(name)
        if kind == b"string":
            held.append(raw.get(name) or b"")
        elif kind == b"list":
            held.extend(raw.lrange(name, 0, -1))
        elif kind == b"set":
            held.extend(raw.smembers(name))
        else:
            held.append(raw.dump(name) or b"")
    while (message := listener.get_message(timeout=0.2)) is not None:
        held.append(str(message["data"]).encode())
    listener.close()
    assert len(held) > 10  # entries, tokens, leases' signals, messages
    everything = b"\n".join(held)
    for key in (KEY, OTHER_KEY):
        assert key.encode() not in everything
        assert key.split("-")[2].encode() not in everything


def test_wrap_with_a_url_shares_through_a_redis_tier(
    redis_url: str, emulator: EmulatorServer
) -> None:
    generation = Generation(MAJOR)
    first, second = (
        wm_middleware.wrap(generation.client("sync", emulator.base_url, KEY), shared=redis_url)
        for _ in range(2)
    )
    for copy in (first, second):
        assert isinstance(copy.working_memory.shared, RedisTier)
        wait_until(lambda copy=copy: copy.working_memory.shared.subscribed)
    fetched = generation.search(first)
    assert generation.search(second) == fetched
    assert searches(emulator) == 1
    assert second.working_memory.stats().shared_hits == 1


def test_the_loader_path_takes_its_shared_tier_from_the_environment(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WM_MIDDLEWARE_SHARED_URL", redis_url)
    wm_middleware.uninstrument()
    WorkingMemoryInstrumentor().instrument()
    try:
        memory = WorkingMemoryInstrumentor().working_memory
        assert memory is not None
        assert isinstance(memory.shared, RedisTier)
        wait_until(lambda: memory.shared.subscribed)  # type: ignore[union-attr]
        assert memory.search("prefs", lambda: {"v": 1}) == {"v": 1}
        assert redis.Redis.from_url(redis_url).dbsize() > 0  # the entry, its tokens
    finally:
        wm_middleware.uninstrument()
