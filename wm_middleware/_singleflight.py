"""Single-flight: one fetch per key, shared by every caller that asks for it while it runs.

:class:`Group` is the whole mechanism, as Go's ``singleflight.Group``: the in-flight table, the
leader and its waiters, and the background refresh. Its owner (the working memory) lends it its
lock and four callbacks: ``lookup`` (is the key stored now?), ``coalesced`` (count a follower),
``store`` (keep a result) and ``refresh_failed`` (re-arm a refresh that produced nothing). The
group knows nothing of entries, TTLs or tiers; a leader runs a *load*, a thunk returning a
:class:`~wm_middleware.TierResult`.

Callers may be asyncio tasks on one loop, tasks on several loops in several threads, plain threads,
or a mix. A :class:`Flight` is the meeting point. How a waiter is woken depends on what it is:

* a thread blocks on one shared :class:`threading.Event`;
* an asyncio task awaits a future of its own loop; the finisher wakes each loop's futures with one
  ``call_soon_threadsafe`` (or directly when it already runs on that loop), never touching a future
  from a foreign thread.

The hard cases, handled on purpose:

* **A waiter is cancelled.** Only its own future is cancelled, never the fetch. The fetch task is
  cancelled when the last waiter leaves (``abandon``), so nobody pays for work nobody wants.
* **The fetch is cancelled by someone else** (its loop shut down, or ``KeyboardInterrupt`` in the
  thread that ran it: Go's ``Goexit``). The flight ends ``cancelled``; the waiters still there start
  again rather than fail for a reason that is not theirs.
* **The fetch raises** (Go's panic is our exception). Every current waiter gets the same exception;
  nothing is stored, and the waiters do not re-run the fetch one after another.
* **The key is forgotten mid-flight** (``invalidate``, an explicit ``set``: Go's ``Forget``). The
  flight is ``detached``: it leaves the table (new callers start a new fetch) and its result is
  delivered to its own waiters but never stored.
* **The fetch asks for its own key** (directly, or from a task or call it started). Waiting for
  itself would hang that key for every caller, so the inner call raises :class:`RuntimeError`. A
  context variable names the flights the current context is leading; tasks inherit it.
* **The leader's event loop was closed while its fetch ran** (closed without cancelling its
  tasks). The fetch will never end, so the flight is dead: the next caller to find it, or a waiter
  on another loop or thread (it checks every :data:`DEAD_LEADER_POLL` seconds), ends it as
  cancelled, and its waiters start again.
* **A background refresh** is a flight with no waiter of its own; at most one runs per key, and a
  failed one leaves the stored value as it was (the owner re-arms it).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable
from contextvars import ContextVar
from typing import Any, Final, cast

from ._tier import TierResult

__all__ = ["DEAD_LEADER_POLL", "MISSING", "Flight", "Group", "running_loop"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""What ``lookup`` returns for a key that is not stored (``None`` is a valid value)."""

DEAD_LEADER_POLL: Final = 0.25
"""Seconds between checks, by a waiter on another thread or loop, that the leader's loop lives."""

# The flights whose fetch the current context is running (a tuple: usually zero or one).
_LEADING: ContextVar[tuple[Flight, ...]] = ContextVar("wm_middleware_leading", default=())

# A leader's load. Its argument says whether to count this caller's lookup: a caller that led
# after its first flight died was counted already (leaders count themselves, by outcome).
Load = Callable[[bool], TierResult]
AsyncLoad = Callable[[bool], Awaitable[TierResult]]


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or ``None`` (without raising and catching)."""
    return asyncio.events._get_running_loop()


def _wake(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class Flight:
    """One fetch in progress for one key.

    Fields marked *lock* are read and written only under the group's lock until ``done``; once
    ``done`` is set the result fields are read-only and may be read without the lock.
    """

    __slots__ = (
        "_event",
        "_futures",
        "cancelled",
        "detached",
        "done",
        "error",
        "info",
        "joins",
        "key",
        "loop",
        "outcome",
        "refresh",
        "scopes",
        "task",
        "ttl",
        "value",
        "waiters",
    )

    def __init__(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        info: object,
        loop: asyncio.AbstractEventLoop | None,
        *,
        refresh: bool = False,
    ) -> None:
        # Immutable after construction.
        self.key = key
        self.scopes = scopes
        self.ttl = ttl
        self.info = info  # the leader's handle (e.g. its span context), for followers to link to
        self.loop = loop  # the loop running the fetch task; None when a thread runs the fetch
        self.refresh = refresh  # a background refresh of a stored entry: nobody waits for it
        # Who may join: callers whose flight key (``do(..., flight=)``) equals this one.
        self.joins: Hashable | None = None
        # Written once by the leader right after the task is created; read by ``abandon``.
        self.task: asyncio.Task[Any] | None = None
        # lock: callers currently waiting (the leader included).
        self.waiters = 0
        # lock: forgotten or abandoned; its result must not be stored.
        self.detached = False
        # lock until done; then read-only.
        self.done = False
        self.value: Any = None
        self.outcome = "fetched"  # the TierResult's outcome, for the leader's accounting
        self.error: BaseException | None = None
        self.cancelled = False
        # lock: how to wake waiters.
        self._event: threading.Event | None = None
        self._futures: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}

    # -- joining (lock held) -------------------------------------------------------------------
    def join_thread(self) -> threading.Event:
        """Register a blocking waiter; it waits on the returned event. Lock held."""
        self.waiters += 1
        if self._event is None:
            self._event = threading.Event()
        return self._event

    def join_async(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """Register a waiter on ``loop``; it awaits the returned future. Lock held."""
        self.waiters += 1
        future: asyncio.Future[None] = loop.create_future()
        self._futures.setdefault(loop, []).append(future)
        return future

    def leave_async(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> bool:
        """Unregister a cancelled waiter. True when it was the last one. Lock held."""
        futures = self._futures.get(loop)
        if futures is not None and future in futures:
            futures.remove(future)
        self.waiters -= 1
        return self.waiters == 0

    def blocks(self, loop: asyncio.AbstractEventLoop | None) -> bool:
        """True when a thread running ``loop`` must not block on this flight: it needs ``loop``."""
        return loop is not None and loop is self.loop

    def dead(self) -> bool:
        """True when the loop running the fetch was closed under it: it will never end."""
        return not self.done and self.loop is not None and self.loop.is_closed()

    # -- ending (lock held), then waking (lock released) ---------------------------------------
    def finish(self, value: Any, error: BaseException | None, cancelled: bool) -> None:
        """Record the outcome. Lock held; call :meth:`wake` after releasing it."""
        self.value = value
        self.error = error
        self.cancelled = cancelled
        self.done = True

    def wake(self) -> None:
        """Wake every waiter registered before :meth:`finish`. Lock released."""
        if self._event is not None:
            self._event.set()
        here = running_loop()
        for loop, futures in self._futures.items():
            if not futures:
                continue
            if loop is here:
                _wake(futures)
                continue
            try:
                loop.call_soon_threadsafe(_wake, futures)
            except RuntimeError:
                pass  # that loop is closed, and its waiting tasks with it

    def abandon(self) -> None:
        """Cancel the fetch task: its last waiter left. Lock held (cancel is only scheduled)."""
        self.detached = True
        task, loop = self.task, self.loop
        if task is None or loop is None or task.done():
            return
        if loop is running_loop():
            task.cancel()
            return
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:
            pass  # loop closed: the task can no longer run anyway


def _reentered(key: Hashable) -> RuntimeError:
    return RuntimeError(
        f"the fetch of cache key {key!r} asked for that same key while computing it: "
        "waiting for itself would never end"
    )


class Group:
    """The in-flight table of one cache: who fetches each key, and who waits for whom.

    Args:
        lock: the owner's lock; the group takes it around every change of the table, and calls
            the callbacks with it held.
        lookup: ``lookup(key, count)`` returns the stored value or :data:`MISSING`, counting a
            hit when ``count`` is true.
        coalesced: counts one caller joining a flight already running.
        store: ``store(key, value, ttl, scopes)`` keeps a leader's result.
        refresh_failed: ``refresh_failed(key)`` re-arms the refresh of a stored entry whose
            background refresh stored nothing.

    :meth:`do` / :meth:`ado` return ``(value, outcome, leader_info)``: ``outcome`` is ``"hit"``
    (stored already), ``"coalesced"`` (joined another caller's flight) or, for the leader, the
    :class:`~wm_middleware.TierResult` outcome of its load. Leaders count themselves in their load.
    """

    __slots__ = (
        "_background",
        "_coalesced",
        "_flights",
        "_lock",
        "_lookup",
        "_refresh_failed",
        "_store",
    )

    def __init__(
        self,
        lock: threading.Lock,
        *,
        lookup: Callable[[Hashable, bool], Any],
        coalesced: Callable[[], None],
        store: Callable[[Hashable, Any, float, tuple[Hashable, ...]], None],
        refresh_failed: Callable[[Hashable], None],
    ) -> None:
        self._lock = lock
        self._lookup = lookup
        self._coalesced = coalesced
        self._store = store
        self._refresh_failed = refresh_failed
        # lock: key -> the flight in progress for it.
        self._flights: dict[Hashable, Flight] = {}
        # Strong references to background refresh tasks and threads until they end.
        self._background: set[object] = set()

    def __len__(self) -> int:
        """Flights running now (dead ones are ended on the way)."""
        with self._lock:
            dead = [flight for flight in self._flights.values() if flight.dead()]
            for flight in dead:
                self._end_dead_locked(flight)
        for flight in dead:
            flight.wake()
        return len(self._flights)

    @property
    def background(self) -> int:
        """Background refreshes still running."""
        return len(self._background)

    # -- forgetting (lock held) ----------------------------------------------------------------
    def forget_locked(self, key: Hashable) -> None:
        """Detach the flight of ``key``: callers arriving now start a new one. Lock held."""
        flight = self._flights.pop(key, None)
        if flight is not None:
            flight.detached = True

    def forget_matching_locked(self, matches: Callable[[Flight], bool]) -> None:
        """Detach every flight ``matches`` accepts. Lock held."""
        for key, flight in list(self._flights.items()):
            if matches(flight):
                flight.detached = True
                del self._flights[key]

    def forget_all_locked(self) -> None:
        """Detach every flight. Lock held."""
        for flight in self._flights.values():
            flight.detached = True
        self._flights.clear()

    # -- the table (lock held) -----------------------------------------------------------------
    def _end_dead_locked(self, flight: Flight) -> None:
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        flight.detached = True
        if flight.refresh:
            self._refresh_failed(flight.key)
            self._background.discard(flight.task)  # that task will never run again
        flight.finish(None, None, cancelled=True)

    def _running_locked(self, key: Hashable) -> tuple[Flight | None, Flight | None]:
        """The live flight for ``key`` (or ``None``), and a dead one ended here (to wake)."""
        flight = self._flights.get(key)
        if flight is None:
            return None, None
        if flight in _LEADING.get():
            raise _reentered(key)
        if flight.dead():
            self._end_dead_locked(flight)
            return None, flight
        return flight, None

    # -- sync callers --------------------------------------------------------------------------
    def do(
        self,
        key: Hashable,
        load: Load,
        ttl: float,
        scopes: tuple[Hashable, ...],
        info: object,
        flight_key: Hashable | None = None,
    ) -> tuple[Any, str, object]:
        """Return the stored value, or lead or join the one flight of ``key``, in this thread.

        A caller joins a running flight only when its ``flight_key`` equals the leader's; one whose
        differs runs its own load beside it, unshared and unstored (the leader stores its value).
        """
        counted = False
        here = running_loop()
        while True:
            with self._lock:
                value = self._lookup(key, not counted)
                if value is not MISSING:
                    return value, "hit", None
                flight, dead = self._running_locked(key)
                alone = flight is not None and (flight.blocks(here) or flight.joins != flight_key)
                leader = flight is None
                if flight is None:
                    flight = Flight(key, scopes, ttl, info, None)
                    flight.joins = flight_key
                    flight.waiters = 1
                    self._flights[key] = flight
                elif not alone:
                    event = flight.join_thread()
                    if not counted:
                        self._coalesced()
                counted_before, counted = counted, True
            if dead is not None:
                dead.wake()
            if alone:
                # Its fetch runs on the loop this thread would block (waiting would deadlock), or
                # its options differ from this caller's (its outcome is not this caller's).
                result = load(not counted_before)
                return result.value, result.outcome, info
            if leader:
                return self._lead(flight, load, not counted_before), flight.outcome, info
            if flight.loop is None:
                event.wait()
            else:
                while not event.wait(DEAD_LEADER_POLL):
                    if self._ended_if_dead(flight):
                        break
            if flight.cancelled:
                continue  # its fetch died of something not ours: start again
            if flight.error is not None:
                raise flight.error
            return flight.value, "coalesced", flight.info

    def _lead(self, flight: Flight, load: Load, count: bool) -> Any:
        token = _LEADING.set((*_LEADING.get(), flight))
        try:
            result = load(count)
        except Exception as error:
            self._finish(flight, None, error, cancelled=False)
            raise
        except BaseException:
            # KeyboardInterrupt, SystemExit...: not the waiters' failure; they start again.
            self._finish(flight, None, None, cancelled=True)
            raise
        finally:
            _LEADING.reset(token)
        self._finish(flight, result, None, cancelled=False)
        return result.value

    def _ended_if_dead(self, flight: Flight) -> bool:
        with self._lock:
            if not flight.dead():
                return False
            self._end_dead_locked(flight)
        flight.wake()
        return True

    # -- async callers -------------------------------------------------------------------------
    async def ado(
        self,
        key: Hashable,
        load: AsyncLoad,
        ttl: float,
        scopes: tuple[Hashable, ...],
        info: object,
        flight_key: Hashable | None = None,
    ) -> tuple[Any, str, object]:
        """Async :meth:`do`: the leader's load runs in a task of its own on this loop."""
        loop = asyncio.get_running_loop()
        counted = False
        while True:
            with self._lock:
                value = self._lookup(key, not counted)
                if value is not MISSING:
                    return value, "hit", None
                flight, dead = self._running_locked(key)
                alone = flight is not None and flight.joins != flight_key
                leader = flight is None
                if flight is None:
                    flight = Flight(key, scopes, ttl, info, loop)
                    flight.joins = flight_key
                    self._flights[key] = flight
                elif not counted and not alone:
                    self._coalesced()
                if not alone:
                    waiter = flight.join_async(loop)
            counted_before, counted = counted, True
            if dead is not None:
                dead.wake()
            if alone:  # another caller's options: its outcome is not this caller's
                result = await load(not counted_before)
                return result.value, result.outcome, info
            if leader:
                # Created outside the lock: a task factory may run code eagerly.
                flight.task = loop.create_task(self._run(flight, load, not counted_before))
            try:
                if flight.loop is loop:
                    await waiter
                else:
                    while not (await asyncio.wait((waiter,), timeout=DEAD_LEADER_POLL))[0]:
                        if self._ended_if_dead(flight):
                            break
            except asyncio.CancelledError:
                with self._lock:
                    if flight.leave_async(loop, waiter) and not flight.done:
                        if self._flights.get(key) is flight:
                            del self._flights[key]
                        flight.abandon()
                raise
            if flight.cancelled:
                continue
            if flight.error is not None:
                raise flight.error
            if leader:
                return flight.value, flight.outcome, flight.info
            return flight.value, "coalesced", flight.info

    async def _run(self, flight: Flight, load: AsyncLoad, count: bool) -> None:
        # This task runs in a copy of the leader's context: the mark stays in it and its children.
        _LEADING.set((*_LEADING.get(), flight))
        try:
            result = await load(count)
        except asyncio.CancelledError:
            self._finish(flight, None, None, cancelled=True)
            raise
        except Exception as error:
            self._finish(flight, None, error, cancelled=False)
        except BaseException:
            self._finish(flight, None, None, cancelled=True)
            raise
        else:
            self._finish(flight, result, None, cancelled=False)

    # -- ending --------------------------------------------------------------------------------
    def _finish(
        self,
        flight: Flight,
        result: TierResult | None,
        error: BaseException | None,
        *,
        cancelled: bool,
    ) -> None:
        with self._lock:
            if self._flights.get(flight.key) is flight:
                del self._flights[flight.key]
            if result is not None:
                flight.outcome = result.outcome
                if result.keep_local and not flight.detached:
                    self._store(flight.key, result.value, flight.ttl, flight.scopes)
                elif flight.refresh:
                    self._refresh_failed(flight.key)
            elif flight.refresh:
                self._refresh_failed(flight.key)
            flight.finish(None if result is None else result.value, error, cancelled)
        flight.wake()

    # -- background refresh --------------------------------------------------------------------
    def refresh(
        self,
        key: Hashable,
        claim: Callable[[], bool],
        load: Load | AsyncLoad,
        ttl: float,
        scopes: tuple[Hashable, ...],
        *,
        is_async: bool,
    ) -> None:
        """Start the one background refresh of ``key``, unless one runs or ``claim()`` says no.

        ``claim`` runs under the lock and marks the entry as being refreshed. ``load`` is a
        :data:`Load` in a worker thread, or an :data:`AsyncLoad` in a task of the running loop
        when ``is_async`` (no running loop: no refresh). Its outcome reaches nobody: a failure
        only re-arms the entry through ``refresh_failed``.
        """
        loop = running_loop() if is_async else None
        if is_async and loop is None:
            return
        dead: Flight | None = None
        with self._lock:
            running = self._flights.get(key)
            if running is not None and running.dead():
                self._end_dead_locked(running)
                running, dead = None, running
            started = running is None and claim()
            if started:
                flight = Flight(key, scopes, ttl, None, loop, refresh=True)
                self._flights[key] = flight
        if dead is not None:
            dead.wake()
        if not started:
            return
        if loop is not None:
            task = loop.create_task(self._run(flight, cast(AsyncLoad, load), False))
            flight.task = task
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return

        def refresh() -> None:
            try:
                self._lead(flight, cast(Load, load), False)
            except Exception:
                pass  # the stored value stays until its TTL; a later hit retries
            finally:
                self._background.discard(thread)

        thread = threading.Thread(target=refresh, name="wm-refresh", daemon=True)
        self._background.add(thread)
        thread.start()
