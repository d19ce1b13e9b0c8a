"""Cost of the WorkingMemory core, measured side by side with the caches it is judged against.

Run from the repository root::

    python benchmarks/bench_core.py            # full run, about 25 s on 2 vCPUs
    python benchmarks/bench_core.py --quick    # smoke test: smaller counts, same rows
    python benchmarks/bench_core.py --json results.json

Every claim is a ratio of two costs measured in this one process, so that it travels between
machines; absolute nanoseconds are printed for orientation only.

Method. Each timed sample is a tight loop of one statement (like :mod:`timeit`: the loop's own
cost is included and nothing is subtracted), with the garbage collector off while it runs. The
candidates of a section are interleaved: every round runs each of them once, in a rotated order,
so that drift in machine load hits them alike. A row's figure is the MEDIAN over rounds of the
per-call nanoseconds; its ratio is the median of the candidate over the median of the baseline.
Every sampler runs once before the rounds start (that run calibrates the loop count and warms up).

The ``floor:`` rows time, each on its own, what a hit cannot skip: the call of ``search``'s
signature with no body, a ``time.monotonic()`` read, an ``OrderedDict`` probe and LRU move, and
(with parameters) the memo probe. A sum of them counts the loop's own cost once.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import os
import platform
import random
import statistics
import sys
import threading
import time
import tracemalloc
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from itertools import repeat
from pathlib import Path
from typing import Any, Final

import cachetools
from async_lru import alru_cache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from benchmarks._common import Row, parse_arguments, report, rotated
from wm_middleware import WorkingMemory

# Peers that may be absent: their rows are skipped, saying why.
_PEER_ERRORS: dict[str, str] = {}
try:
    import cachebox
except ImportError as error:  # pragma: no cover - depends on the environment
    cachebox = None
    _PEER_ERRORS["cachebox"] = str(error)
try:
    import theine
except ImportError as error:  # pragma: no cover - depends on the environment
    theine = None
    _PEER_ERRORS["theine"] = str(error)

VALUE: Final = ("the", "cached", "value")
# A search response of 10 results, as the API's JSON: what ``copy=True`` deep-copies per hit.
SEARCH_RESPONSE: Final = {
    "results": [
        {
            "id": f"memory-{i}",
            "memory": "User prefers green tea in the morning and coffee after lunch",
            "similarity": 0.87,
            "metadata": {"source": "chat", "turn": i},
            "updatedAt": "2025-01-01T00:00:00Z",
            "version": 1,
            "documents": [{"id": f"doc-{i}", "title": "chat", "type": "text"}],
            "context": {"children": [], "parents": []},
        }
        for i in range(10)
    ],
    "timing": 12,
    "total": 10,
}
TAGS: Final = ["user-1"]


def fetch_value() -> tuple[str, ...]:
    return VALUE


async def afetch_value() -> tuple[str, ...]:
    return VALUE


async def afetch_after_one_yield() -> tuple[str, ...]:
    """The single-flight fetch: suspends exactly once, as any real I/O would."""
    await asyncio.sleep(0)
    return VALUE


@dataclass(frozen=True)
class Config:
    """How much to measure. ``quick`` keeps every row but cuts every count."""

    rounds: int
    sample_ns: int  # target duration of one timed sample
    flight_rounds: int
    sizes: tuple[int, ...]
    scale_rounds: int
    misses_per_sample: int
    bytes_entries: int


FULL: Final = Config(
    rounds=51,
    sample_ns=8_000_000,
    flight_rounds=41,
    sizes=(100, 10_000, 1_000_000),
    scale_rounds=21,
    misses_per_sample=4_000,
    bytes_entries=100_000,
)
QUICK: Final = replace(
    FULL,
    rounds=7,
    sample_ns=1_000_000,
    flight_rounds=5,
    scale_rounds=5,
    misses_per_sample=1_000,
    bytes_entries=20_000,
)


# The hit guards: regression bounds for the plain hit path, the best of five full runs on a quiet
# machine plus 15% (docs/benchmarks.md gives the runs): 6.86x, 10.82x and 8.36x `lru_cache`.
HIT_BOUND: Final = 7.9
PARAMS_HIT_BOUND: Final = 12.4
ASYNC_HIT_BOUND: Final = 9.6


# -- samplers ------------------------------------------------------------------------------------
# A sampler runs a loop of ``count`` calls and returns nanoseconds per call. Loops are generated
# from one template, as timeit does, so that the candidate and its baseline differ only in the
# statement under test; every name the statement uses is a local of the generated function.

_SYNC_LOOP = """
def loop(_it, _timer, {names}):
    _t0 = _timer()
    for {var} in _it:
        {stmt}
    return _timer() - _t0
"""
_ASYNC_LOOP = "async " + _SYNC_LOOP.lstrip()


def _compile_loop(template: str, stmt: str, names: Iterable[str], var: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(template.format(names=", ".join(names), stmt=stmt, var=var), namespace)
    return namespace["loop"]


Sampler = Callable[[int], float]
AsyncSampler = Callable[[int], Awaitable[float]]


def sync_sampler(stmt: str, **names: Any) -> Sampler:
    """Time ``stmt`` repeated ``count`` times; ``names`` are bound as locals."""
    loop = _compile_loop(_SYNC_LOOP, stmt, names, "_")

    def sample(count: int) -> float:
        elapsed: int = loop(repeat(None, count), time.perf_counter_ns, **names)
        return elapsed / count

    return sample


def async_sampler(stmt: str, **names: Any) -> AsyncSampler:
    """Like :func:`sync_sampler`, the loop being a coroutine run on the current event loop."""
    loop = _compile_loop(_ASYNC_LOOP, stmt, names, "_")

    async def sample(count: int) -> float:
        elapsed: int = await loop(repeat(None, count), time.perf_counter_ns, **names)
        return elapsed / count

    return sample


def keyed_sampler(stmt: str, keys: Callable[[int], Sequence[str]], **names: Any) -> Sampler:
    """Time ``stmt`` once per key of ``keys(count)`` (built before the clock starts) as ``q``."""
    loop = _compile_loop(_SYNC_LOOP, stmt, names, "q")

    def sample(count: int) -> float:
        batch = keys(count)
        elapsed: int = loop(batch, time.perf_counter_ns, **names)
        return elapsed / len(batch)

    return sample


def _calibrate(first_ns_per_call: float, cfg: Config) -> int:
    return max(1_000, int(cfg.sample_ns / max(first_ns_per_call, 1.0)))


def interleave(samplers: dict[str, Sampler], cfg: Config, rounds: int) -> dict[str, list[float]]:
    """Median-ready samples: ``rounds`` rounds, each running every sampler once, order rotated."""
    counts = {name: _calibrate(sample(1_000), cfg) for name, sample in samplers.items()}
    samples: dict[str, list[float]] = {name: [] for name in samplers}
    for order in rotated(list(samplers), rounds):
        for name in order:
            samples[name].append(samplers[name](counts[name]))
    return samples


async def ainterleave(
    samplers: dict[str, AsyncSampler], cfg: Config, rounds: int
) -> dict[str, list[float]]:
    """Async :func:`interleave`, on the running loop."""
    counts = {name: _calibrate(await sample(1_000), cfg) for name, sample in samplers.items()}
    samples: dict[str, list[float]] = {name: [] for name in samplers}
    for order in rotated(list(samplers), rounds):
        for name in order:
            samples[name].append(await samplers[name](counts[name]))
    return samples


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# -- 1. sync hit ---------------------------------------------------------------------------------
class LockedLruTtl:
    """The plain competitor: OrderedDict LRU + monotonic TTL + a lock + a hit counter."""

    def __init__(self, max_entries: int, ttl: float) -> None:
        self._max_entries = max_entries
        self._ttl = ttl
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()
        self.hits = 0

    def get(self, key: Hashable, fetch: Callable[[], Any]) -> Any:
        with self._lock:
            entry = self._data.get(key)
            if entry is not None and entry[1] > time.monotonic():
                self._data.move_to_end(key)
                self.hits += 1
                return entry[0]
        value = fetch()
        with self._lock:
            self._data[key] = (value, time.monotonic() + self._ttl)
            self._data.move_to_end(key)
            while len(self._data) > self._max_entries:
                self._data.popitem(last=False)
        return value


class _Source(str):
    """Text that ``inspect.Signature`` prints as it is: the name of a default in a namespace."""

    def __repr__(self) -> str:
        return str(self)


def without_body(method: Callable[..., Any]) -> Callable[..., Any]:
    """A function with ``method``'s name, parameters, kinds and defaults, doing nothing.

    Built from the signature (annotations aside: they cost nothing at call time), so that it
    cannot drift from the method it stands for; an ``async def`` for a coroutine function.
    """
    namespace: dict[str, Any] = {}
    parameters = []
    for parameter in inspect.signature(method).parameters.values():
        if parameter.default is not parameter.empty:
            name = f"_default_{parameter.name}"
            namespace[name] = parameter.default
            parameter = parameter.replace(default=_Source(name))
        parameters.append(parameter.replace(annotation=parameter.empty))
    prefix = "async def" if inspect.iscoroutinefunction(method) else "def"
    exec(f"{prefix} {method.__name__}{inspect.Signature(parameters)}: return None", namespace)
    function: Callable[..., Any] = namespace[method.__name__]
    return function


class SameSignature:
    """``WorkingMemory.search``'s and ``asearch``'s signatures and no body: what calling them
    costs before they run."""

    search = without_body(WorkingMemory.search)
    asearch = without_body(WorkingMemory.asearch)


def _searching(stmt: str, search: Callable[..., Any], query: str) -> Sampler:
    # The query, the fetch and the tags as locals: a hit and its floor differ in ``search``.
    return sync_sampler(stmt, search=search, q=query, fetch=fetch_value, tags=TAGS)


_NO_PARAMS: Final = "search(q, fetch)"
_TWO_PARAMS: Final = "search(q, fetch, limit=5, container_tags=tags)"


def _sync_peers(query: str) -> dict[str, Sampler]:
    """The caches a sync hit is judged against, each holding ``query`` already."""

    @functools.lru_cache(maxsize=100)
    def lru(q: str) -> Any:
        return VALUE

    @cachetools.cached(cache=cachetools.TTLCache(maxsize=100, ttl=3600), lock=threading.Lock())
    def ttl_cache(q: str) -> Any:
        return VALUE

    plain = LockedLruTtl(100, 3600.0)
    lru(query)
    ttl_cache(query)
    plain.get(query, fetch_value)
    peers = {
        "lru": sync_sampler("f(q)", f=lru, q=query),
        "cachetools": sync_sampler("f(q)", f=ttl_cache, q=query),
    }
    if cachebox is not None:

        @cachebox.cached(cachebox.TTLCache(100, 3600.0))
        def box(q: str) -> Any:
            return VALUE

        box(query)
        peers["cachebox"] = sync_sampler("f(q)", f=box, q=query)
    if theine is not None:

        @theine.Memoize(100, timedelta(seconds=3600))
        def memoized(q: str) -> Any:
            return VALUE

        memoized(query)
        peers["theine"] = sync_sampler("f(q)", f=memoized, q=query)
    peers["plain"] = sync_sampler("get(q, fetch)", get=plain.get, q=query, fetch=fetch_value)
    return peers


def _sync_floor(query: str) -> dict[str, Sampler]:
    """The floor of a hit: what it cannot avoid doing, each part timed on its own."""
    same = SameSignature()
    table: OrderedDict[Hashable, Any] = OrderedDict({query: VALUE})
    memo = {(query, 5, tuple(TAGS)): VALUE}
    return {
        "empty": sync_sampler("pass"),
        "call": _searching(_NO_PARAMS, same.search, query),
        "call_params": _searching(_TWO_PARAMS, same.search, query),
        "clock": sync_sampler("clock()", clock=time.monotonic),
        "probe": sync_sampler("get(q); move(q)", get=table.get, move=table.move_to_end, q=query),
        "memo": sync_sampler("get((q, 5, tuple(tags)))", get=memo.get, q=query, tags=TAGS),
    }


def bench_sync_hit(cfg: Config) -> list[Row]:
    query = "what does the user prefer for breakfast"
    wm: WorkingMemory[Any] = WorkingMemory(max_entries=100, ttl=3600.0)
    wm.search(query, fetch_value)
    wm.search(query, fetch_value, limit=5, container_tags=TAGS)
    wm.search(query, fetch_value, limit=5, container_tags=TAGS, threshold=0.5)
    copying: WorkingMemory[Any] = WorkingMemory(max_entries=100, ttl=3600.0, copy=True)
    copying.search(query, lambda: SEARCH_RESPONSE)
    peers = _sync_peers(query)
    three_params = "search(q, fetch, limit=5, container_tags=tags, threshold=0.5)"
    hits_before = wm.stats().hits
    samples = interleave(
        {
            "lru": peers.pop("lru"),
            "wm": _searching(_NO_PARAMS, wm.search, query),
            "wm_params": _searching(_TWO_PARAMS, wm.search, query),
            "wm_params3": _searching(three_params, wm.search, query),
            "cachetools": peers.pop("cachetools"),
            "copy": _searching(_NO_PARAMS, copying.search, query),
            **peers,
            **_sync_floor(query),
        },
        cfg,
        cfg.rounds,
    )
    stats = wm.stats()
    assert stats.misses == 3, stats  # every timed call was a hit
    assert stats.hits > hits_before, stats
    return _sync_rows(samples)


def _sync_rows(samples: dict[str, list[float]]) -> list[Row]:
    base = median(samples["lru"])
    section = "1. sync hit"

    def row(name: str, label: str, goal: float | None = None, note: str = "") -> Row:
        ns = median(samples[name])
        return Row(section, label, ns, "ns", ns / base, goal, note)

    rows = [
        row("wm", "wm.search(q, fetch) hit", HIT_BOUND),
        row("lru", "functools.lru_cache f(q) hit (baseline)"),
        row("wm_params", "wm.search(q, fetch, limit=, container_tags=) hit", PARAMS_HIT_BOUND),
        row("wm_params3", "wm.search(q, fetch, 3 params) hit", note="info"),
        row("cachetools", "cachetools.cached(TTLCache, lock=Lock) hit", note="context"),
        row("copy", "WorkingMemory(copy=True) hit, 10-result response", note="info"),
    ]
    for name, label in (
        ("cachebox", "cachebox.cached(TTLCache) hit (Rust)"),
        ("theine", "theine.Memoize(ttl) hit"),
    ):
        if name in samples:
            rows.append(row(name, label, note="context"))
        else:
            print(f"skipped the {name} row: {_PEER_ERRORS[name]}")
    empty = median(samples["empty"])

    def floor(label: str, *names: str) -> Row:
        # Each sample includes one loop iteration: the sum counts it once.
        ns = sum(median(samples[name]) for name in names) - (len(names) - 1) * empty
        return Row(section, label, ns, "ns", ns / base, None, "context: floor")

    return [
        *rows,
        row("plain", "OrderedDict LRU+TTL + Lock + counter hit", note="context"),
        row("empty", "empty loop iteration (included in every row)", note="context"),
        row("call", "floor: call of search's signature, no body", note="context: floor"),
        row("clock", "floor: time.monotonic()", note="context: floor"),
        row("probe", "floor: OrderedDict get + move_to_end", note="context: floor"),
        floor("floor: those three (a hit without params)", "call", "clock", "probe"),
        row("call_params", "floor: the call with limit, container_tags", note="context: floor"),
        row("memo", "floor: memo probe get((q, limit, tuple(tags)))", note="context: floor"),
        floor(
            "floor: call, clock, memo, probe (two params)", "call_params", "clock", "memo", "probe"
        ),
    ]


# -- 2. async hit --------------------------------------------------------------------------------
async def bench_async_hit(cfg: Config) -> list[Row]:
    query = "what does the user prefer for breakfast"
    wm: WorkingMemory[Any] = WorkingMemory(max_entries=100, ttl=3600.0)
    await wm.asearch(query, afetch_value)

    @functools.lru_cache(maxsize=100)
    def lru(q: str) -> Any:
        return VALUE

    @alru_cache(maxsize=100)
    async def alru(q: str) -> Any:
        return VALUE

    async def constant(q: str) -> Any:
        return VALUE

    lru(query)
    await alru(query)
    copying: WorkingMemory[Any] = WorkingMemory(max_entries=100, ttl=3600.0, copy=True)
    copying.search(query, lambda: SEARCH_RESPONSE)
    same = SameSignature()
    table: OrderedDict[Hashable, Any] = OrderedDict({query: VALUE})

    samples = await ainterleave(
        {
            "lru": async_sampler("f(q)", f=lru, q=query),
            "wm": async_sampler(
                "await asearch(q, fetch)", asearch=wm.asearch, q=query, fetch=afetch_value
            ),
            "alru": async_sampler("await f(q)", f=alru, q=query),
            "coroutine": async_sampler("await f(q)", f=constant, q=query),
            "wm_sync": async_sampler(
                "search(q, fetch)", search=wm.search, q=query, fetch=fetch_value
            ),
            "empty": async_sampler("pass"),
            "call": async_sampler(
                "await asearch(q, fetch)", asearch=same.asearch, q=query, fetch=afetch_value
            ),
            "clock": async_sampler("clock()", clock=time.monotonic),
            "probe": async_sampler(
                "get(q); move(q)", get=table.get, move=table.move_to_end, q=query
            ),
        },
        cfg,
        cfg.rounds,
    )
    assert wm.stats().misses == 1
    return _async_rows(samples)


def _async_rows(samples: dict[str, list[float]]) -> list[Row]:
    base = median(samples["lru"])
    # Each sample includes one loop iteration: the sum counts it once.
    floor = sum(median(samples[n]) for n in ("call", "clock", "probe")) - 2 * median(
        samples["empty"]
    )
    section = "2. async hit (in one running loop)"

    def row(name: str, label: str, goal: float | None = None, note: str = "") -> Row:
        ns = median(samples[name])
        return Row(section, label, ns, "ns", ns / base, goal, note)

    return [
        row("wm", "await wm.asearch(q, fetch) hit", ASYNC_HIT_BOUND),
        row("lru", "functools.lru_cache f(q) hit (baseline)"),
        row("alru", "async_lru alru_cache: await f(q) hit", note="context"),
        row("coroutine", "await of a coroutine returning a constant", note="context: floor"),
        row("wm_sync", "wm.search(q, fetch) hit in the same loop", note="context"),
        row("call", "floor: await of asearch's signature, no body", note="context: floor"),
        Row(
            section,
            "floor: that, time.monotonic(), get + move_to_end",
            floor,
            "ns",
            floor / base,
            None,
            "context: floor",
        ),
    ]


# -- 3. single-flight ----------------------------------------------------------------------------
async def _await_shared(shared: asyncio.Future[Any]) -> Any:
    return await shared


async def _bare_coalesce(waiters: int) -> list[Any]:
    """The least any coalescing needs: one task fetches, N coroutines await its one future."""
    loop = asyncio.get_running_loop()
    shared: asyncio.Future[Any] = loop.create_future()

    async def lead() -> None:
        shared.set_result(await afetch_after_one_yield())

    task = loop.create_task(lead())
    results = await asyncio.gather(*[_await_shared(shared) for _ in range(waiters)])
    await task
    return results


async def bench_single_flight(cfg: Config) -> list[Row]:
    rows: list[Row] = []
    section = "3. single-flight, cold key"
    for waiters in (100, 1_000):
        wm: WorkingMemory[Any] = WorkingMemory(max_entries=100, ttl=3600.0)

        @alru_cache(maxsize=100)
        async def alru(key: str) -> Any:
            return await afetch_after_one_yield()

        async def run_wm(key: str, n: int = waiters, wm: WorkingMemory[Any] = wm) -> list[Any]:
            return await asyncio.gather(
                *[wm.asearch(key, afetch_after_one_yield) for _ in range(n)]
            )

        async def run_alru(key: str, n: int = waiters, f: Any = alru) -> list[Any]:
            return await asyncio.gather(*[f(key) for _ in range(n)])

        async def run_bare(key: str, n: int = waiters) -> list[Any]:
            return await _bare_coalesce(n)

        runners: dict[str, Callable[[str], Awaitable[list[Any]]]] = {
            "bare": run_bare,
            "wm": run_wm,
            "alru": run_alru,
        }
        samples: dict[str, list[float]] = {name: [] for name in runners}
        # Round -1 warms up, untimed.
        for round_, order in enumerate(rotated(list(runners), cfg.flight_rounds + 1), start=-1):
            for name in order:
                key = f"single-flight {waiters} round {round_} {name}"  # always a cold key
                gc.collect()
                start = time.perf_counter_ns()
                results = await runners[name](key)
                elapsed = time.perf_counter_ns() - start
                assert len(results) == waiters, name
                assert all(r is VALUE for r in results), name
                if round_ >= 0:
                    samples[name].append(elapsed / waiters)
        stats = wm.stats()
        rounds = cfg.flight_rounds + 1
        assert stats.misses == rounds, stats
        assert stats.coalesced == rounds * (waiters - 1), stats
        base = median(samples["bare"])
        for name, label, goal, note in (
            ("wm", f"gather of {waiters} wm.asearch", 2.5, ""),
            ("bare", f"gather of {waiters} awaits of one future (baseline)", None, ""),
            ("alru", f"gather of {waiters} alru_cache calls", None, "context"),
        ):
            ns = median(samples[name])
            rows.append(Row(section, label, ns, "ns/waiter", ns / base, goal, note))
    return rows


# -- 4. scaling ----------------------------------------------------------------------------------
def _query(i: int) -> str:
    return f"memory search number {i:07d} about the user's projects"


class _Stream:
    """Fresh keys handed out in batches of at most ``per``, built before any clock starts."""

    def __init__(self, keys: list[str], per: int) -> None:
        self._keys = keys
        self._per = per
        self._next = 0

    def take(self, count: int) -> list[str]:
        count = min(count, self._per)
        batch = self._keys[self._next : self._next + count]
        if len(batch) < count:
            raise RuntimeError("benchmark bug: the stream of fresh keys ran out")
        self._next += count
        return batch


def _cycling(keys: list[str]) -> Callable[[int], list[str]]:
    """``count`` keys cycling over ``keys``."""
    return lambda count: (keys * (count // len(keys) + 1))[:count]


# Hit working sets, in distinct queries. Each set is spread at random over the whole table. The
# judged one is small enough that its entries stay in the CPU caches at every size, so only the
# table size varies; the larger ones add the memory hierarchy (lru_cache shows its share) and,
# past the 4,096 queries of the key module's normalisation memo, a memo miss on every lookup.
_HIT_SETS: Final = ((100, 1.5), (1_000, None), (10_000, None))


def bench_scaling(cfg: Config) -> list[Row]:
    rng = random.Random(20240601)
    groups: dict[str, dict[str, Sampler]] = {f"hit {n}": {} for n, _ in _HIT_SETS}
    groups["miss"] = {}
    caches: list[WorkingMemory[Any]] = []
    keep_alive: list[object] = []
    per = cfg.misses_per_sample
    for size in cfg.sizes:
        # Fresh keys: one batch per sample, plus calibration (1,000) and headroom.
        fresh = (cfg.scale_rounds + 2) * per + 1_000
        keys = [_query(i) for i in range(size + 2 * fresh)]
        resident, wm_new, lru_new = keys[:size], keys[size : size + fresh], keys[size + fresh :]
        wm: WorkingMemory[Any] = WorkingMemory(max_entries=size, ttl=3600.0)
        for key in resident:
            wm.set(key, VALUE)

        @functools.lru_cache(maxsize=size)
        def lru(q: str) -> Any:
            return VALUE

        for key in resident:
            lru(key)
        caches.append(wm)
        keep_alive += [lru, keys]
        for hot, _ in _HIT_SETS:
            working_set = _cycling(rng.sample(resident, min(hot, size)))
            groups[f"hit {hot}"][f"wm {size}"] = keyed_sampler(
                "search(q, fetch)", working_set, search=wm.search, fetch=fetch_value
            )
            groups[f"hit {hot}"][f"lru {size}"] = keyed_sampler("f(q)", working_set, f=lru)
        wm_stream, lru_stream = _Stream(wm_new, per), _Stream(lru_new, per)
        groups["miss"][f"wm {size}"] = keyed_sampler(
            "search(q, fetch)",
            wm_stream.take,
            search=wm.search,
            fetch=fetch_value,
        )
        groups["miss"][f"lru {size}"] = keyed_sampler("f(q)", lru_stream.take, f=lru)
    # Each group is interleaved over the sizes on its own: the normalisation memo is shared by
    # every cache in the process, and one group's keys must not flush another's.
    samples = {name: interleave(group, cfg, cfg.scale_rounds) for name, group in groups.items()}
    for wm in caches:
        assert wm.stats().evictions > 0
        assert len(wm) == wm.max_entries
    del caches, keep_alive, groups
    gc.collect()
    return _scaling_rows(cfg, samples)


def _scaling_rows(cfg: Config, samples: dict[str, dict[str, list[float]]]) -> list[Row]:
    section = "4. scaling with cache size"
    rows: list[Row] = []
    small, large = cfg.sizes[0], cfg.sizes[-1]
    labels = [(f"hit {n}", f"hit, {n:,}-query working set", goal) for n, goal in _HIT_SETS]
    labels.insert(1, ("miss", "miss + one eviction", 1.5))
    for group, label, goal in labels:
        got = {name: median(values) for name, values in samples[group].items()}
        for size in cfg.sizes:
            ns, lru_ns = got[f"wm {size}"], got[f"lru {size}"]
            note = f"x lru_cache of that size ({lru_ns:,.0f} ns)"
            hot = next((n for n, _ in _HIT_SETS if group == f"hit {n}"), 0)
            if hot > size:
                note += f"; set capped at {size:,}"
            rows.append(Row(section, f"wm {label} @ {size:,}", ns, "ns", ns / lru_ns, None, note))
        lru_growth = got[f"lru {large}"] / got[f"lru {small}"]
        rows.append(
            Row(
                section,
                f"  {large:,} vs {small:,} entries",
                got[f"wm {large}"],
                "ns",
                got[f"wm {large}"] / got[f"wm {small}"],
                goal,
                f"lru_cache: {lru_growth:.2f}x" + ("" if goal else "; info"),
            )
        )
    return rows


# -- 5. memory -----------------------------------------------------------------------------------
def _traced_growth(fill: Callable[[], object], entries: int) -> float:
    """Bytes allocated and still held by ``fill()``, per entry. Everything else exists already."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = fill()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del held
    return (after - before) / entries


def bench_memory(cfg: Config) -> list[Row]:
    section = "5. memory beyond the value"
    entries = cfg.bytes_entries
    queries = [f"bytes query {i:07d} about the user" for i in range(entries)]
    values = [(i,) for i in range(entries)]  # distinct objects, all allocated before tracing
    params: dict[str, Any] = {"limit": 5, "container_tags": TAGS}

    def fill_wm(**params: Any) -> Callable[[], object]:
        wm: WorkingMemory[Any] = WorkingMemory(max_entries=2 * entries, ttl=3600.0)

        def fill() -> object:
            store = wm.set
            for query, value in zip(queries, values, strict=True):
                store(query, value, **params)
            assert len(wm) == entries
            return wm

        return fill

    def fill_lru() -> Callable[[], object]:
        lookup = dict(zip(queries, values, strict=True)).__getitem__
        cached = functools.lru_cache(maxsize=2 * entries)(lookup)

        def fill() -> object:
            for query in queries:
                cached(query)
            return cached

        return fill

    def fill_ttl_cache() -> object:
        cache: cachetools.TTLCache[str, Any] = cachetools.TTLCache(2 * entries, ttl=3600)
        for query, value in zip(queries, values, strict=True):
            cache[query] = value
        return cache

    plain = _traced_growth(fill_wm(), entries)
    with_params = _traced_growth(fill_wm(**params), entries)
    lru = _traced_growth(fill_lru(), entries)
    ttl_cache = _traced_growth(fill_ttl_cache, entries)
    label = f"{entries:,} entries"
    return [
        Row(section, f"wm, query without params ({label})", plain, "B/entry", None, 400.0),
        Row(
            section,
            "wm, query + limit=5, container_tags=[..]",
            with_params,
            "B/entry",
            None,
            None,
            "info",
        ),
        Row(section, "functools.lru_cache(maxsize=2N)", lru, "B/entry", None, None, "context"),
        Row(section, "cachetools.TTLCache", ttl_cache, "B/entry", None, None, "context"),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(__doc__, argv, quick="smaller counts: a smoke test")
    cfg = QUICK if args.quick else FULL

    started = time.perf_counter()
    print(
        f"wm_middleware bench_core: Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {'quick' if args.quick else 'full'} run; "
        f"median over interleaved rounds ({cfg.rounds} rounds for hits, {cfg.flight_rounds} "
        f"for single-flight, {cfg.scale_rounds} for scaling)"
    )
    rows: list[Row] = []
    gc.collect()
    gc.disable()  # as timeit: no collection pauses inside a timed loop
    try:
        rows += bench_sync_hit(cfg)
        rows += asyncio.run(bench_async_hit(cfg))
        rows += asyncio.run(bench_single_flight(cfg))
        rows += bench_scaling(cfg)
    finally:
        gc.enable()
    rows += bench_memory(cfg)
    elapsed = time.perf_counter() - started
    report(rows, arguments=args, config=cfg, seconds=elapsed, label_width=50, ratio_digits=2)
    return 0  # a missed goal is a finding, not a failure of the program


if __name__ == "__main__":
    raise SystemExit(main())
