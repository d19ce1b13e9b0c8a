"""Settle announcements a Redis writer without the secret cannot forge, move or replay.

A write in one process makes every process sharing the tier settle the written scopes (see
``wm_middleware._redis.settling``): a hash field per scope and a message on the settling
channel. With ``secret``, each carries a MAC bound to where it is stored or sent. A forged begin
would make processes fetch more often; a forged or replayed end would end a settle early, and a
process would then keep the answer from before the document was indexed for a whole TTL.

What a process did not do is shown after a genuine announcement sent later on the same channel
has been heard: the subscriber reads the channel in order.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Iterator
from contextlib import ExitStack

import pytest
import redis

from wm_middleware import RedisTier
from wm_middleware._redis.encoding import canonical_key
from wm_middleware._redis.settling import SharedSettling

from .conftest import wait_until

SECRET = "s3cret"
NAMESPACE = "sealed"
CHANNEL = f"{NAMESPACE}:v1:settling"
HASH = f"{NAMESPACE}:v1:{{t:{NAMESPACE}}}:settling"
TENANT = ("https://api.supermemory.ai", "fp")
SCOPE: Hashable = ("tag", TENANT, "user-1")
OTHER: Hashable = ("tag", TENANT, "user-2")
SENTINEL: Hashable = ("tag", TENANT, "sentinel")


Pair = Callable[[str | None], tuple[SharedSettling, SharedSettling]]


@pytest.fixture
def boards(redis_url: str) -> Iterator[Pair]:
    """``boards(secret)``: the settle boards of a writer's and a reader's tier, both listening."""
    with ExitStack() as stack:

        def make(secret: str | None) -> tuple[SharedSettling, SharedSettling]:
            tiers = [
                stack.enter_context(
                    RedisTier(redis_url, namespace=NAMESPACE, secret=secret, op_timeout=5.0)
                )
                for _ in range(2)
            ]
            found = tiers[0].settles(), tiers[1].settles()
            wait_until(lambda: all(tier.subscribed for tier in tiers), what="subscribed")
            return found

        yield make


def _settling(writer: SharedSettling, reader: SharedSettling, seconds: float = 30.0) -> None:
    """The writer settles ``SCOPE`` for ``seconds``; returns once the reader has heard it."""
    writer.begin([SCOPE], seconds)
    wait_until(lambda: reader.deadline([SCOPE]) is not None, what="the settle")


def _heard_after(writer: SharedSettling, reader: SharedSettling) -> None:
    """Once this returns, the reader has handled everything published before it."""
    writer.begin([SENTINEL], 30.0)
    wait_until(lambda: reader.deadline([SENTINEL]) is not None, what="the sentinel")
    writer.end([SENTINEL])


def test_a_begin_published_without_the_secrets_mac_settles_nothing(
    boards: Pair, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    writer, reader = boards(SECRET)
    forged = {"b": [_text(SCOPE)], "d": 2**45, "o": "x"}
    with caplog.at_level(logging.WARNING, logger="wm_middleware"):
        raw.publish(CHANNEL, json.dumps(forged))
        raw.publish(CHANNEL, b"0" * 64 + b" " + json.dumps(forged).encode())
        raw.publish(CHANNEL, json.dumps({**forged, "o": "y"}))
        _heard_after(writer, reader)
    assert reader.deadline([SCOPE]) is None
    assert not reader.foreign([SCOPE])
    refused = [r for r in caplog.records if "settle announcement failed its MAC" in r.message]
    # Once by each board, however many: the reader's is in; the writer's subscriber may not
    # have read the channel this far yet.
    assert 1 <= len(refused) <= 2


def test_an_end_published_without_the_secrets_mac_ends_no_settle(
    boards: Pair, raw: redis.Redis
) -> None:
    writer, reader = boards(SECRET)
    _settling(writer, reader)
    for origin in (writer.origin, ""):  # the writer's token is on the channel for all to see
        raw.publish(CHANNEL, json.dumps({"e": [_text(SCOPE)], "d": 2**45, "o": origin}))
    _heard_after(writer, reader)
    assert reader.deadline([SCOPE]) is not None
    assert reader.foreign([SCOPE])


def test_a_replayed_end_does_not_end_a_later_settle_of_the_scope(
    boards: Pair, raw: redis.Redis
) -> None:
    """The end of one settle, captured on the channel and sent again while a later settle of
    the same scope runs, ends nothing: an end names the deadline it ends."""
    writer, reader = boards(SECRET)
    with raw.pubsub() as listener:
        listener.subscribe(CHANNEL)
        _settling(writer, reader, 10.0)  # the first settle
        writer.end([SCOPE])
        wait_until(lambda: reader.deadline([SCOPE]) is None, what="its end")
        ends = _captured(listener, b'"e"')
        assert ends, "the end was heard on the channel"
    _settling(writer, reader)  # a later write of the scope
    for end in ends:
        raw.publish(CHANNEL, end)
    _heard_after(writer, reader)
    assert reader.deadline([SCOPE]) is not None


def test_a_settle_in_the_hash_is_read_only_where_the_secret_sealed_it(
    boards: Pair, raw: redis.Redis, redis_url: str
) -> None:
    """A process that subscribes later reads the hash: a value without the MAC, or a sealed
    one copied to another scope's field, is refused; the genuine one is read."""
    writer, _ = boards(SECRET)
    writer.begin([SCOPE], 30.0)
    genuine = raw.hget(HASH, _text(SCOPE))
    assert genuine is not None
    assert b" " in genuine  # the MAC, then the deadline
    raw.hset(HASH, _text(OTHER), genuine)  # moved to another scope
    raw.hset(HASH, _text(SENTINEL), str(2**45))  # no MAC
    with RedisTier(redis_url, namespace=NAMESPACE, secret=SECRET, op_timeout=5.0) as later:
        board = later.settles()
        assert board.deadline([SCOPE]) is not None
        assert board.deadline([OTHER]) is None
        assert board.deadline([SENTINEL]) is None


def test_a_scope_that_settles_throughout_a_reload_never_reads_as_settled(
    boards: Pair, raw: redis.Redis
) -> None:
    """A reload (each (re)subscription makes one) swaps what it read in at once: a reader of
    another process's settle never sees it gone meanwhile, or it would store a full-ttl entry."""
    import threading

    writer, reader = boards(SECRET)
    for index in range(40):  # fields the reload reads and checks, one by one
        writer.begin([("tag", TENANT, f"other-{index}")], 30.0)
    _settling(writer, reader)
    gaps: list[int] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            if reader.deadline([SCOPE]) is None:
                gaps.append(1)

    looking = threading.Thread(target=read)
    looking.start()
    try:
        for _ in range(30):
            reader.reload()
    finally:
        stop.set()
        looking.join()
    assert gaps == []


def test_without_a_secret_announcements_are_plain_and_still_heard(
    boards: Pair, raw: redis.Redis
) -> None:
    writer, reader = boards(None)
    _settling(writer, reader)
    assert int(raw.hget(HASH, _text(SCOPE)) or 0) > 0  # the deadline, as it is
    writer.end([SCOPE])
    wait_until(lambda: reader.deadline([SCOPE]) is None, what="its end")


def _text(scope: Hashable) -> str:
    """The hash field (and message text) of ``scope``."""
    return canonical_key(scope)


def _captured(listener: redis.client.PubSub, marker: bytes) -> list[bytes]:
    """The messages heard so far on ``listener`` that contain ``marker``."""
    found: list[bytes] = []
    for _ in range(200):
        message = listener.get_message(timeout=0.05)
        if message is None:
            if found:
                break
            continue
        data = message.get("data")
        if isinstance(data, bytes) and marker in data:
            found.append(data)
    return found
