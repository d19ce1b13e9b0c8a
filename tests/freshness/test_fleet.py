"""Across processes: a write in one process makes every process sharing the tier settle."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.shared.servers import Server, server_binary
from wm_middleware.emulator import EmulatorServer

from .conftest import Sdk, mentions, wait_until
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
        asked: list[int] = []
        seen = [False] * 3

        def every_process_sees_it() -> bool:
            for i in (1, 2, 0):
                if not seen[i]:
                    seen[i] = workers[i].ask("search", "espresso")[0]
                    asked.append(i)
            return all(seen)

        # Every process sees the fact once the API does (rounds of reads until then) ...
        wait_until(every_process_sees_it, what="the fact in every process")
        # ... and the fleet kept answering most reads from the cache meanwhile, status checks
        # included (each process fetches what it cannot confirm, as an uncached one would).
        assert sdk.reads(emulator) - upstream + sdk.status_checks(emulator) < len(asked) / 2

        def settle_ended() -> bool:
            if not raw.hgetall("wm:v1:{t:wm}:settling"):
                return True
            workers[0].ask("search", "espresso")
            return False

        # The writer's reads go on; the first status check that finds the document indexed
        # ends the settle, and the end is announced.
        wait_until(settle_ended, what="the end of the settle announced")
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


INTERVAL = 4.0  # settle_interval: a copy, a lease and a stored round live 3 s (a loaded machine)


def _two_processes_following_writes(
    sdk: Sdk, emulator: EmulatorServer, tiers: list[Any], tags: list[str]
) -> tuple[list[Any], list[str], list[float]]:
    """A client per tier (as two processes would have), each with a write of its own pending
    (the first client's written first) and a copy answering for it; the ids of the documents
    written, and when each write began (monotonic)."""
    import time

    import wm_middleware

    emulator.set_indexing_delay(3600.0)
    clients = [
        wm_middleware.wrap(
            sdk.client("sync", emulator.base_url), shared=tier, settle_interval=INTERVAL
        )
        for tier in tiers
    ]
    documents, began = [], []
    for client, tag in zip(clients, tags, strict=True):
        for _ in range(3):
            sdk.search(client, tag)  # a fetch, then hits: credits for status checks
        began.append(time.monotonic())
        documents.append(str(sdk.add(client, f"The {tag} likes espresso", tag).id))
        sdk.search(client, tag)  # fetched while the write is pending: the copy
    return clients, documents, began


def _read_until(read: Any, holds: Any) -> None:
    """Read every 10 ms until ``holds()`` (bounded: 2000 reads). A status check starts beside
    the reads once what answers them runs short (half the 3 s a copy is answered for)."""
    import time

    for _ in range(2000):
        read()
        if holds():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def _read_past(read: Any, moment: float) -> None:
    """Read every 10 ms until the monotonic clock passes ``moment``."""
    import time

    _read_until(read, lambda: time.monotonic() > moment)


@pytest.mark.parametrize("secret", [None, "s3cret"])
def test_a_tenants_status_round_is_made_once_for_the_fleet(
    sdk: Sdk, emulator: EmulatorServer, valkey: Server, secret: str | None
) -> None:
    """Two processes of one tenant, each following a write to its own container tag: the
    first check makes the round, under the tenant's lease, and shares its answer; the other
    process's check takes it without a request, and it vouches for that process's copy past
    what its own write's answer did. 3.x: the processing list, which answers for every
    document; 5.x: the status of the older write's document, which, pending, answers for the
    younger one (documents are indexed roughly in order)."""
    from wm_middleware import RedisTier

    namespace = f"round{secret is not None}"
    tags = ["user-a", "user-b"]
    with (
        RedisTier(valkey.url, namespace=namespace, op_timeout=5.0, secret=secret) as one,
        RedisTier(valkey.url, namespace=namespace, op_timeout=5.0, secret=secret) as two,
    ):
        clients, _, began = _two_processes_following_writes(sdk, emulator, [one, two], tags)
        checks = sdk.status_checks(emulator)
        first, second = (
            lambda c=c, t=t: sdk.search(c, t) for c, t in zip(clients, tags, strict=True)
        )
        _read_until(first, lambda: sdk.status_checks(emulator) == checks + 1)
        reads = sdk.reads(emulator)
        # Past what the second write's own answer vouched for (3 s from its start): its copy
        # still answers, vouched for by the round the first process made.
        _read_past(second, began[1] + 0.75 * INTERVAL + 0.2)
        assert not mentions(sdk.search(clients[1], tags[1]), "espresso")  # still pending
        assert sdk.status_checks(emulator) == checks + 1  # one status request for both
        # The second process's reads (about 300) are answered by the round, but one that comes
        # while its check of the round is still on its way fetches, as uncached (fail safe).
        assert sdk.reads(emulator) - reads <= 1


def test_under_5x_a_round_about_a_younger_document_does_not_answer_for_an_older_one(
    sdk: Sdk, emulator: EmulatorServer, valkey: Server
) -> None:
    """The younger write's process checks first: its document pending says nothing of the
    older one. The older write's process makes no request of its own while the round's lease
    is held: once its write's own answer vouches no more, it fetches, as uncached."""
    from wm_middleware import RedisTier

    if sdk.major == "3":
        pytest.skip("3.x shares the processing list, which answers for every document")
    tags = ["user-a", "user-b"]
    with (
        RedisTier(valkey.url, namespace="younger", op_timeout=5.0) as one,
        RedisTier(valkey.url, namespace="younger", op_timeout=5.0) as two,
    ):
        clients, _, began = _two_processes_following_writes(sdk, emulator, [one, two], tags)
        checks = sdk.status_checks(emulator)
        older, younger = (
            lambda c=c, t=t: sdk.search(c, t) for c, t in zip(clients, tags, strict=True)
        )
        _read_until(younger, lambda: sdk.status_checks(emulator) == checks + 1)
        reads = sdk.reads(emulator)
        _read_past(older, began[0] + 0.75 * INTERVAL + 0.2)
        assert not mentions(sdk.search(clients[0], tags[0]), "espresso")  # still pending
        assert sdk.status_checks(emulator) == checks + 1  # the younger document's only
        assert sdk.reads(emulator) > reads  # the older write's reader fetched


def test_a_status_round_not_sealed_under_the_secret_is_ignored(
    sdk: Sdk, emulator: EmulatorServer, valkey: Server
) -> None:
    """A Redis writer without the secret stores a round saying the second write is indexed: a
    process that believed it would end its settle; it ignores it, asks for itself, and keeps
    following."""
    import json
    import time

    from wm_middleware import RedisTier

    raw = redis.Redis(host="127.0.0.1", port=valkey.port)
    settling = "forged:v1:{t:forged}:settling"
    tags = ["user-a", "user-b"]
    with (
        RedisTier(valkey.url, namespace="forged", op_timeout=5.0, secret="s3cret") as one,
        RedisTier(valkey.url, namespace="forged", op_timeout=5.0, secret="s3cret") as two,
    ):
        clients, documents, _ = _two_processes_following_writes(sdk, emulator, [one, two], tags)
        checks = sdk.status_checks(emulator)
        first, second = (
            lambda c=c, t=t: sdk.search(c, t) for c, t in zip(clients, tags, strict=True)
        )
        _read_until(first, lambda: bool(raw.keys("forged:v1:*:poll")))  # the round, sealed
        (key,) = raw.keys("forged:v1:*:poll")
        # 3.x: nothing is processing any more; 5.x: the second write's document is done.
        said: dict[str, Any] = (
            {} if sdk.major == "3" else {"document": documents[1], "status": "done", "written": 0}
        )
        raw.set(key, json.dumps({"at": time.time() + 60, "answer": said}), px=60_000)
        raw.delete(key + b":lease")

        def second_settles() -> bool:
            return any(b'"user-b"' in scope for scope in raw.hgetall(settling))

        assert second_settles()
        _read_until(second, lambda: sdk.status_checks(emulator) == checks + 2)  # its own
        assert not mentions(sdk.search(clients[1], tags[1]), "espresso")
        assert second_settles()  # the forged round did not end the second write's settle
