"""Across processes: a write in one process makes every process sharing the tier settle."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.shared.servers import Server, server_binary
from wm_middleware.emulator import EmulatorServer

from .conftest import Sdk, wait_until
from .fleet_worker import serve

SPAWN = multiprocessing.get_context("spawn")

pytestmark = pytest.mark.skipif(server_binary() is None, reason="needs valkey-server")


@pytest.fixture(scope="module")
def valkey() -> Iterator[Server]:
    server = Server().start()
    try:
        yield server
    finally:
        server.close()


class Worker:
    def __init__(self, url: str, base_url: str, major: str) -> None:
        self.requests, self.replies = SPAWN.Queue(), SPAWN.Queue()
        self.process = SPAWN.Process(
            target=serve, args=(url, base_url, major, self.requests, self.replies)
        )
        self.process.start()
        assert self.replies.get(timeout=60)[0] == "ready"

    def ask(self, command: str, argument: str) -> tuple[Any, Any]:
        self.requests.put((command, argument))
        _, value, stats = self.replies.get(timeout=30)
        return value, stats

    def stop(self) -> None:
        self.requests.put(("quit", ""))
        self.process.join(30)
        assert self.process.exitcode == 0


def test_a_write_in_one_process_settles_the_scope_in_every_process(
    sdk: Sdk, emulator: EmulatorServer, valkey: Server
) -> None:
    emulator.set_indexing_delay(1.0)
    raw = redis.Redis(host="127.0.0.1", port=valkey.port)
    raw.flushall()
    workers = [Worker(valkey.url, emulator.base_url, sdk.major) for _ in range(3)]
    try:
        for worker in workers:
            assert worker.ask("search", "espresso")[0] is False  # cached everywhere
        upstream = sdk.reads(emulator)
        assert workers[0].ask("add", "The user likes espresso")[0]
        settling = raw.hgetall("wm:v1:{t:wm}:settling")
        assert settling  # the settle is announced to the fleet ...
        assert 0 < raw.pttl("wm:v1:{t:wm}:settling") <= 62_000  # ... and expires on its own
        reads = 0
        seen = [False] * 3
        for _ in range(2000):  # bounded: ~1 s of indexing, one round after it
            for i in (1, 2, 0):
                if not seen[i]:
                    seen[i] = workers[i].ask("search", "espresso")[0]
                    reads += 1
            if all(seen):
                break
        assert all(seen)  # every process sees the fact once the API does
        # ... and the fleet kept answering most reads from the cache meanwhile, status checks
        # included (each process fetches what it cannot confirm, as an uncached one would).
        assert sdk.reads(emulator) - upstream + sdk.status_checks(emulator) < reads / 2
        # The writer's reads go on; the first status check that finds the document indexed
        # ends the settle, and the end is announced.
        for _ in range(2000):
            if not raw.hgetall("wm:v1:{t:wm}:settling"):
                break
            workers[0].ask("search", "espresso")
        assert not raw.hgetall("wm:v1:{t:wm}:settling")
    finally:
        for worker in workers:
            worker.stop()


def test_a_process_knows_which_settles_are_another_processes(valkey: Server) -> None:
    from wm_middleware import RedisTier

    scope = ("tag", ("https://api", "fp"), "user-1")
    with (
        RedisTier(valkey.url, namespace="whose") as writer,
        RedisTier(valkey.url, namespace="whose") as reader,
    ):
        mine, theirs = writer.settles(), reader.settles()
        wait_until(lambda: writer.subscribed and reader.subscribed)
        mine.begin([scope], 30.0)
        wait_until(lambda: theirs.deadline([scope]) is not None)  # heard on the subscriber
        assert not mine.foreign([scope])  # its own write: it may confirm copies of the scope
        assert theirs.foreign([scope])  # another's: it fetches instead
        mine.end([scope])
        wait_until(lambda: theirs.deadline([scope]) is None)
        assert not theirs.foreign([scope])
