"""The seam to a shared second tier, exercised with a small in-process tier.

Order (L1, then the local flight, then the tier, then the fetch), accounting, ``keep_local``,
the codec an adapter hands the tier, invalidation fan-out, and that neither a broken tier nor the
seam ever changes a fetch's error.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

import pytest

from wm_middleware import WorkingMemory
from wm_middleware._core import (
    MISSING,
    InvalidationSink,
    SharedCodec,
    SharedTier,
    TierResult,
    make_key,
)

from ..conftest import until
from .conftest import wait_for

if TYPE_CHECKING:
    from wm_middleware._core.outcomes import TierOutcome


class LocalTier:
    """A shared tier held in a dict. ``answer`` forces the outcome of the next loads.

    With a codec it stores ``codec.dump(value)`` (nothing when that is None) and answers a hit
    with ``codec.load(stored)``, as a tier shared by processes does."""

    def __init__(self) -> None:
        self.stored: dict[Hashable, Any] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.bound: list[InvalidationSink] = []
        self.answer: tuple[TierOutcome, Any] | None = None
        self.keep_local = True
        self.broken: str | None = None  # "before" or "after" the fetch: raise a tier error
        self.failures = 0
        self.release = threading.Event()
        self.release.set()

    @property
    def errors(self) -> int:
        return self.failures

    def bind(self, memory: InvalidationSink) -> None:
        self.bound.append(memory)

    def _answer(self, key: Hashable, codec: SharedCodec | None) -> TierResult | None:
        if self.broken == "before":
            raise ConnectionError("tier down")
        if self.answer is not None:
            outcome, value = self.answer
            return TierResult(value, outcome, self.keep_local)
        if key in self.stored:
            value = self.stored[key]
            value = value if codec is None else codec.load(value)
            return TierResult(value, "shared_hit", self.keep_local)
        return None

    def _fetched(self, key: Hashable, value: Any, codec: SharedCodec | None) -> TierResult:
        if self.broken == "after":
            raise ConnectionError("tier lost the store")
        shared = value if codec is None else codec.dump(value)
        if shared is not None:
            self.stored[key] = shared
        return TierResult(value, "fetched", self.keep_local)

    def _record_load(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Record a load; return its arguments by name, bound by the signature of ``method``
        (``SharedTier.load`` or ``aload``): the stand-in takes exactly what the protocol says."""
        bound = inspect.signature(method).bind(self, *args, **kwargs)
        bound.apply_defaults()
        call = bound.arguments
        self.calls.append(("load", call["key"], call["scopes"], call["ttl"]))
        return call

    def load(self, *args: Any, **kwargs: Any) -> TierResult:
        call = self._record_load(SharedTier.load, *args, **kwargs)
        self.release.wait(timeout=30)
        key, codec = call["key"], call["codec"]
        return self._answer(key, codec) or self._fetched(key, call["fetch"](), codec)

    async def aload(self, *args: Any, **kwargs: Any) -> TierResult:
        call = self._record_load(SharedTier.aload, *args, **kwargs)
        while not self.release.is_set():  # noqa: ASYNC110 - released from another thread
            await asyncio.sleep(0.001)
        key, codec = call["key"], call["codec"]
        return self._answer(key, codec) or self._fetched(key, await call["fetch"](), codec)

    def invalidate(self, *, keys: Iterable[Hashable] = (), scopes: Iterable[Hashable] = ()) -> None:
        keys, scopes = tuple(keys), tuple(scopes)
        self.calls.append(("invalidate", keys, scopes))
        for key in keys:
            self.stored.pop(key, None)

    def clear(self) -> None:
        self.calls.append(("clear",))
        self.stored.clear()

    def loads(self) -> int:
        return sum(call[0] == "load" for call in self.calls)


@pytest.fixture
def tier() -> LocalTier:
    return LocalTier()


@pytest.fixture(params=["sync", "async"])
def search(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``search(wm, query, value_or_exception, **params)`` through search or asearch."""

    def call(wm: WorkingMemory[Any], query: str, result: Any, **params: Any) -> Any:
        def fetch() -> Any:
            if isinstance(result, BaseException):
                raise result
            return result

        if request.param == "sync":
            return wm.search(query, fetch, **params)

        async def afetch() -> Any:
            return fetch()

        return asyncio.run(wm.asearch(query, afetch, **params))

    return call


def test_the_tier_is_a_shared_tier_and_is_bound_at_construction(tier: LocalTier) -> None:
    assert isinstance(tier, SharedTier)
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    assert tier.bound == [wm]
    assert wm.shared is tier


def test_something_that_is_not_a_tier_is_refused() -> None:
    with pytest.raises(TypeError, match="shared must be a SharedTier"):
        WorkingMemory(shared="redis://localhost")  # type: ignore[arg-type]


def test_a_miss_asks_the_tier_once_and_the_fetch_fills_both(
    tier: LocalTier, search: Callable[..., Any]
) -> None:
    wm: WorkingMemory[str] = WorkingMemory(ttl=30.0, shared=tier)
    assert search(wm, "q", "v", limit=3) == "v"
    assert tier.calls == [("load", make_key("q", {"limit": 3}), ("q",), 30.0)]
    assert search(wm, "q", "other", limit=3) == "v"  # an L1 hit: the tier is not asked
    assert tier.loads() == 1
    stats = wm.stats()
    assert (stats.misses, stats.hits, stats.shared_hits, stats.shared_waits) == (1, 1, 0, 0)


def test_a_shared_hit_is_a_hit_and_fills_l1(tier: LocalTier, search: Callable[..., Any]) -> None:
    tier.stored["q"] = "from another process"
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    assert search(wm, "q", "fetched here") == "from another process"
    assert search(wm, "q", "fetched here") == "from another process"
    assert tier.loads() == 1
    stats = wm.stats()
    assert (stats.hits, stats.shared_hits, stats.misses, stats.coalesced) == (2, 1, 0, 0)


def test_a_shared_wait_is_coalesced(tier: LocalTier, search: Callable[..., Any]) -> None:
    tier.answer = ("shared_wait", "another process fetched it")
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    assert search(wm, "q", "fetched here") == "another process fetched it"
    stats = wm.stats()
    assert (stats.coalesced, stats.shared_waits, stats.misses, stats.hits) == (1, 1, 0, 0)


@pytest.mark.parametrize(
    ("answer", "outcome", "tier_name"),
    [
        (None, "miss", "local"),
        (("shared_hit", "v"), "hit", "shared"),
        (("shared_wait", "v"), "coalesced", "shared"),
    ],
)
def test_load_reports_the_outcome_and_the_tier(
    tier: LocalTier, answer: Any, outcome: str, tier_name: str
) -> None:
    tier.answer = answer
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    loaded = wm.load("key", lambda: "v", scopes=("s",), info="my span")
    assert (loaded.value, loaded.outcome, loaded.tier) == ("v", outcome, tier_name)
    assert loaded.leader == ("my span" if outcome == "miss" else None)
    again = wm.load("key", lambda: "other")
    assert (again.value, again.outcome, again.tier) == ("v", "hit", "local")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_codec_given_to_load_carries_the_value_across_the_tier_and_only_there(
    tier: LocalTier, mode: str
) -> None:
    calls: list[str] = []

    def dump(snapshot: bytes) -> Any:
        calls.append("dump")
        return {"text": snapshot.decode()}

    def load(data: Any) -> bytes:
        calls.append("load")
        return str(data["text"]).encode()

    codec = SharedCodec(dump, load)

    def call(wm: WorkingMemory[Any], value: bytes) -> Any:
        if mode == "sync":
            return wm.load("key", lambda: value, codec=codec)

        async def fetch() -> bytes:
            return value

        return asyncio.run(wm.aload("key", fetch, codec=codec))

    writer: WorkingMemory[Any] = WorkingMemory(shared=tier)
    assert call(writer, b"snapshot").value == b"snapshot"
    assert tier.stored["key"] == {"text": "snapshot"}  # what other processes read: plain data
    assert call(writer, b"other").value == b"snapshot"  # an L1 hit: no codec call
    assert calls == ["dump"]
    reader: WorkingMemory[Any] = WorkingMemory(shared=tier)  # another process, sharing the tier
    loaded = call(reader, b"fetched there")
    assert (loaded.value, loaded.outcome, loaded.tier) == (b"snapshot", "hit", "shared")
    assert calls == ["dump", "load"]


def test_local_followers_share_the_leaders_one_tier_call(tier: LocalTier) -> None:
    tier.release.clear()
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(wm.search("q", lambda: "v")))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: wm.stats().coalesced == 7, "the waiters never joined")
    tier.release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert results == ["v"] * 8
    assert tier.loads() == 1
    stats = wm.stats()
    assert (stats.misses, stats.coalesced, stats.shared_waits) == (1, 7, 0)


async def test_async_followers_share_the_leaders_one_tier_call(tier: LocalTier) -> None:
    tier.stored["q"] = "shared"
    tier.release.clear()
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)

    async def fetch() -> str:
        return "fetched"

    callers = [asyncio.create_task(wm.asearch("q", fetch)) for _ in range(50)]
    await until(lambda: wm.stats().coalesced == 49)
    tier.release.set()
    assert await asyncio.gather(*callers) == ["shared"] * 50
    stats = wm.stats()
    assert (stats.hits, stats.shared_hits, stats.coalesced, stats.misses) == (1, 1, 49, 0)


def test_a_value_the_tier_cannot_keep_local_is_returned_not_stored(
    tier: LocalTier, search: Callable[..., Any]
) -> None:
    tier.keep_local = False
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    assert search(wm, "q", "v1") == "v1"
    assert not wm.has("q")
    assert search(wm, "q", "v2") == "v1"  # asked the tier again, which kept it
    assert tier.loads() == 2


def test_a_fetch_error_passes_through_the_tier_unchanged_and_is_cached_nowhere(
    tier: LocalTier, search: Callable[..., Any]
) -> None:
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    error = LookupError("upstream 404")
    with pytest.raises(LookupError) as raised:
        search(wm, "q", error)
    assert raised.value is error
    assert tier.stored == {}
    assert not wm.has("q")
    assert search(wm, "q", "v") == "v"
    assert wm.stats().misses == 2


@pytest.mark.parametrize("broken", ["before", "after"])
def test_a_tier_that_raises_never_reaches_the_caller(
    tier: LocalTier, search: Callable[..., Any], broken: str
) -> None:
    tier.broken = broken
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    fetches: list[int] = []

    class Counted(str):
        def __new__(cls, value: str) -> Counted:
            fetches.append(1)
            return super().__new__(cls, value)

    assert search(wm, "q", Counted("v")) == "v"
    assert fetches == [1]  # the fetch ran once, whether the tier broke before or after it
    assert wm.get("q") == "v"
    stats = wm.stats()
    assert (stats.shared_errors, stats.misses) == (1, 1)
    tier.broken = None
    assert search(wm, "p", "w") == "w"


def test_a_fetch_that_fails_after_the_tier_broke_raises_its_own_error_counted_once(
    tier: LocalTier, search: Callable[..., Any]
) -> None:
    tier.broken = "before"  # the leader then runs the fetch itself, which fails
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    error = LookupError("upstream 404")
    with pytest.raises(LookupError) as raised:
        search(wm, "q", error)
    assert raised.value is error
    assert not wm.has("q")
    stats = wm.stats()
    assert (stats.shared_errors, stats.misses, stats.hits) == (1, 1, 0)


def test_a_fetch_stopped_by_a_base_exception_through_the_tier_is_counted_a_miss(
    tier: LocalTier,
) -> None:
    class Stopped(BaseException):
        """Not an Exception, as KeyboardInterrupt is not: never taken for a tier fault."""

    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    stop = Stopped()

    def stopped() -> str:
        raise stop

    with pytest.raises(Stopped) as raised:
        wm.search("q", stopped)
    assert raised.value is stop
    assert not wm.has("q")
    stats = wm.stats()
    assert (stats.shared_errors, stats.misses, stats.inflight) == (0, 1, 0)
    assert wm.search("q", lambda: "v") == "v"  # the flight ended: the next caller fetches


def test_shared_errors_are_read_from_the_tier(tier: LocalTier) -> None:
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    tier.failures = 5
    assert wm.stats().shared_errors == 5


def test_invalidation_reaches_the_tier_and_local_calls_stay_local(tier: LocalTier) -> None:
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    wm.set("q", "v", limit=1)
    wm.get("q", limit=1)
    wm.has("q")
    wm.pin("q", limit=1)
    wm.unpin("q", limit=1)
    assert tier.calls == []  # get / set / has / pin stay local
    assert wm.invalidate("q", limit=1) == 1
    assert wm.invalidate("q") == 0
    assert wm.invalidate_scope("tenant", "tag") == 0
    wm.clear()
    assert wm.invalidate() == 0
    assert tier.calls == [
        ("invalidate", (make_key("q", {"limit": 1}),), ()),
        ("invalidate", ("q",), ("q",)),
        ("invalidate", (), ("tenant", "tag")),
        ("clear",),
        ("clear",),
    ]


def test_drop_local_drops_and_detaches_without_calling_the_tier(tier: LocalTier) -> None:
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    wm.set("a", "1", limit=1)
    wm.set("b", "2")
    wm.load("k", lambda: "3", scopes=("tenant",))
    assert wm.drop_local(scopes=("tenant",)) == 1
    assert wm.drop_local(keys=("b",)) == 1
    assert wm.drop_local(everything=True) == 1
    assert len(wm) == 0
    assert [call for call in tier.calls if call[0] != "load"] == []

    # A flight running when another process invalidates its scope is detached: not stored.
    tier.release.clear()
    result: list[str] = []
    leader = threading.Thread(
        target=lambda: result.append(wm.load("k2", lambda: "old", scopes=("tenant",)).value)
    )
    leader.start()
    wait_for(lambda: wm.stats().inflight == 1, "no flight started")
    wm.drop_local(scopes=("tenant",))
    tier.release.set()
    leader.join(timeout=30)
    assert result == ["old"]
    assert wm.lookup("k2") is MISSING


def test_every_drop_is_heard_by_the_memorys_drop_listeners(tier: LocalTier) -> None:
    """Whatever keeps copies beside the memory hears each drop: invalidations here, another
    process's through the tier (``drop_local``)."""
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    heard: list[tuple[tuple[Hashable, ...], tuple[Hashable, ...], bool]] = []
    wm.on_drop(lambda keys, scopes, everything: heard.append((keys, scopes, everything)))
    wm.set("q", "v", limit=1)
    wm.invalidate("q", limit=1)
    wm.invalidate_scope("tenant", "tag")
    wm.drop_local(keys=("k",), scopes=("other",))
    wm.clear()
    assert heard == [
        ((make_key("q", {"limit": 1}),), (), False),
        ((), ("tenant", "tag"), False),
        (("k",), ("other",), False),
        ((), (), True),
    ]


class BrokenTier(LocalTier):
    """A tier whose invalidation and counters raise: the memory must carry on regardless."""

    down = False  # set once bound: ``isinstance(tier, SharedTier)`` reads ``errors`` too

    @property
    def errors(self) -> int:
        if self.down:
            raise ConnectionError("tier down")
        return 0

    def invalidate(self, *, keys: Iterable[Hashable] = (), scopes: Iterable[Hashable] = ()) -> None:
        raise ConnectionError("tier down")

    def clear(self) -> None:
        raise ConnectionError("tier down")


def test_a_tier_whose_invalidation_raises_does_not_fail_the_caller() -> None:
    tier = BrokenTier()
    wm: WorkingMemory[str] = WorkingMemory(shared=tier)
    tier.down = True
    wm.set("q", "v", limit=1)
    wm.set("p", "w")
    assert wm.invalidate_scope("q") == 1
    assert wm.invalidate("p") == 1
    wm.clear()
    assert len(wm) == 0
    assert wm.stats().shared_errors == 3  # stats() itself survives the broken counter too
