"""Single-flight: one fetch per key, shared by every caller that asks for it while it runs.

:class:`Group` is the whole mechanism, as Go's ``singleflight.Group``: the in-flight table, the
leader and its waiters, dead leaders, re-entry, background refreshes, and its own lock. Like Go's
``Do(key, fn)``, a caller hands :meth:`Group.do` (or :meth:`Group.ado`) the work its leader runs,
``lead(flight, count)``; the group knows nothing of what that work fetches or where the result is
kept. A flight is found by its key *and* its flight key (``flight``; ``None`` means the key
itself): callers whose request options differ in what decides the outcome pass different flight
keys and never share a fetch, although the result is kept under the same key. Flights also carry
their entry's ``scopes``, so an invalidation by scope finds them.

Callers may be asyncio tasks on one loop, tasks on several loops in several threads, plain threads,
tasks of an event loop that is not asyncio (trio, via anyio), or a mix. How a waiter is woken
depends on what it is:

* a thread blocks on one shared :class:`threading.Event`;
* an asyncio task awaits a future of its own loop; the finisher wakes each loop's futures with one
  ``call_soon_threadsafe`` (or directly when it already runs on that loop), never touching a future
  from a foreign thread;
* a task of another event loop (no asyncio loop is running) never waits: it leads a flight in its
  own task, which others may join, or, when one runs already, fetches alone (see below), since
  the only primitives it could wait on without blocking its loop would belong to that loop.

**An invalidation arrives during a fetch** (``invalidate``, an explicit ``set``, a write's scope,
another process: Go's ``Forget``). The owner drops its entries inside :meth:`Group.forgetting`,
which first *detaches* every matching flight under the group's lock: the flight leaves the table,
so callers arriving afterwards start a new fetch, and ``Flight.detached`` is set. A leader keeps
its result only inside :meth:`Group.committing`, which takes the same lock, removes its flight
from the table if it is still there (by identity: a newer flight of the key is left alone) and
yields whether it may store: ``not flight.detached``. The owner stores under that lock, so the two
are ordered: an invalidation before the commit makes the result answer its own waiters and never
be stored; one after it drops what was stored. A fetch started before an invalidation therefore
never writes after it, and a fetch started after it (a newer flight) is unaffected.

The other hard cases, handled on purpose:

* **A waiter is cancelled.** Only its own future is cancelled, never the fetch. The fetch task is
  cancelled when the last waiter leaves (``abandon``), so nobody pays for work nobody wants.
* **The fetch is cancelled by someone else** (its loop shut down: Go's ``Goexit``). The flight
  ends ``cancelled``; the waiters still there start again (one of them leads a new fetch) rather
  than fail for a reason that is not theirs.
* **The fetch is interrupted** (``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``). An
  interrupt or an exit belongs to the thread it was raised in: it leaves the fetch there (a sync
  leader's call; out of an async flight's task, asyncio raises it out of that loop's
  ``run_until_complete``, once), and the flight ends ``cancelled``: every waiter elsewhere starts
  again, in other threads and on other loops, and also the other tasks on the fetch's own loop
  (raised in each of them, it would reach that thread again once per waiter, even while
  ``asyncio.run`` cancels the loop's tasks on its way out; started again, they lead a new fetch
  if the loop runs on, and are cancelled with it if not).
* **The fetch raises** (Go's panic is our exception). Every current waiter gets the same exception;
  the waiters do not re-run the fetch one after another. In an async flight's task, any other
  ``BaseException`` (not a cancellation, not an interrupt: gevent's, trio's) is an outcome too:
  each caller's own fetch would have raised it uncached.
* **The fetch asks for its own flight** (directly, or from a task or call it started). Waiting for
  itself would hang that key for every caller, so the inner call raises :class:`RuntimeError`. A
  context variable names the flights the current context is leading; tasks inherit it.
* **A caller must not block on the flight it found**: a thread whose own event loop runs the
  fetch, or a task of another event loop. It runs ``lead`` alone, on a flight of its own that is
  detached from birth: it answers that caller and is never stored.
* **The leader's event loop was closed while its fetch ran** (closed without cancelling its
  tasks). The fetch will never end, so the flight is dead: the next caller to find it, or a waiter
  on another loop or thread (it checks every :data:`DEAD_LEADER_POLL` seconds), ends it as
  cancelled, and its waiters start again.
* **A background refresh** is a flight with no waiter of its own, in a worker thread or a task of
  the running loop; at most one runs per key. Its outcome reaches nobody.
* **The process forks during a fetch** (multiprocessing's fork start method, Celery's prefork
  pool, gunicorn's preload). Only the forking thread runs in the child: a flight led by another
  thread or loop would never end there, and a thread waiting for it would wait for ever. So the
  child starts with a new lock, an empty table and no background refresh (:meth:`Group._after_fork`,
  see ``forks.py``): every flight of the parent ends ``cancelled``, detached, so the child's
  callers fetch for themselves, and a task left waiting on a loop that the child runs again
  (asyncio lets no loop run on through a fork) starts again there. A fetch the forking thread
  goes on with in the child (it forked inside its own sync fetch) answers its caller and stores
  nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Iterator
from contextvars import ContextVar

from .forks import reset_in_child

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    import asyncio  # imported where a loop runs: a process that never imports asyncio runs none
    from typing import Any, Final

__all__ = ["DEAD_LEADER_POLL", "Flight", "Group", "running_loop"]

# Interrupts and exits: each belongs to the thread it was raised in (see _outcome_of).
_INTERRUPTS: Final = (KeyboardInterrupt, SystemExit, GeneratorExit)

DEAD_LEADER_POLL: Final = 0.25
"""Seconds between checks, by a waiter on another thread or loop, that the leader's loop lives."""

# The flights whose fetch the current context is running (a tuple: usually zero or one).
_LEADING: ContextVar[tuple[Flight, ...]] = ContextVar("wm_middleware_leading", default=())

if TYPE_CHECKING:
    Lead = Callable[["Flight", bool], Any]
    """A leader's work: ``lead(flight, count)`` returns the flight's value. ``count`` says whether
    to count this caller's lookup: a caller that joined a flight which then died was counted
    already."""
    AsyncLead = Callable[["Flight", bool], Awaitable[Any]]

# What a caller does with the flight _join gives it.
_LEAD: Final = "lead"
_JOIN: Final = "join"
_ALONE: Final = "alone"


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio event loop running in this thread, or ``None`` (trio, or no loop at all).

    No loop runs where asyncio was never imported: asking ``sys.modules`` spares its import.
    """
    events = sys.modules.get("asyncio.events")
    if events is None:
        return None
    loop: asyncio.AbstractEventLoop | None = events._get_running_loop()
    return loop


def _outcome_of(error: BaseException, in_task: bool) -> bool:
    """Whether ``error``, out of a leader's fetch, is the flight's outcome for every waiter (else
    the flight ends cancelled, and they start again). An ``Exception`` is; an interrupt or an exit
    never is, nor a cancellation; any other ``BaseException`` is in the flight's own asyncio task
    (``in_task``), where each caller's own fetch would have raised it uncached."""
    if isinstance(error, Exception):
        return True
    return in_task and not isinstance(error, (*_INTERRUPTS, sys.modules["asyncio"].CancelledError))


def _flight_task(
    loop: asyncio.AbstractEventLoop, run: Coroutine[Any, Any, None]
) -> asyncio.Task[None]:
    """The task that runs a flight's fetch on ``loop`` (see :func:`_interrupted`)."""
    task = loop.create_task(run)
    task.add_done_callback(_interrupted)
    return task


def _interrupted(task: asyncio.Task[Any]) -> None:
    """A flight task's done callback: an interrupt it raised has left through its loop already
    (asyncio raises it out of ``run_until_complete``); read here, it is not logged again as
    "never retrieved" when the task is collected, in whatever thread that happens."""
    if not task.cancelled():
        task.exception()


def _wake(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class Flight:
    """One fetch in progress for one key and flight key.

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
        "flight_key",
        "info",
        "key",
        "loop",
        "refresh",
        "scopes",
        "task",
        "value",
        "waiters",
    )

    def __init__(
        self,
        key: Hashable,
        flight_key: Hashable,
        scopes: tuple[Hashable, ...],
        info: object,
        loop: asyncio.AbstractEventLoop | None,
        *,
        refresh: bool = False,
        detached: bool = False,
    ) -> None:
        # Immutable after construction.
        self.key = key
        self.flight_key = flight_key  # callers share this flight only when key and this match
        self.scopes = scopes  # for invalidation by scope (forgetting)
        self.info = info  # the leader's handle (e.g. its span context), for followers to link to
        self.loop = loop  # the asyncio loop running the fetch task; None: a thread or inline
        self.refresh = refresh  # a background refresh of a stored entry: nobody waits for it
        # Written once by the leader right after the task is created; read by ``abandon``.
        self.task: asyncio.Task[Any] | None = None
        # lock: callers currently waiting (the leader included).
        self.waiters = 0
        # lock: forgotten (an invalidation came), abandoned, or alone: its result is not stored.
        self.detached = detached
        # lock until done; then read-only.
        self.done = False
        self.value: Any = None
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

    def end_in_child(self) -> None:
        """End cancelled and detached in a forked child, where only the forking thread runs, and
        wake the waiters there: no thread waits on the event (dropped, not set: a thread of the
        parent may have held its lock), and each loop's futures are woken directly, once (a loop's
        wake-up pipe is the parent's too). A later :meth:`wake`, by a fetch that goes on in the
        child, finds nothing left to wake."""
        self.detached = True
        self.finish(None, None, cancelled=True)
        futures, self._futures, self._event = self._futures, {}, None
        for waiting in futures.values():
            with contextlib.suppress(RuntimeError):  # that loop is closed
                _wake(waiting)

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

    def outcome(self) -> Any:
        """The value for a waiter, once done: raises the fetch's error."""
        if self.error is not None:
            raise self.error
        return self.value


class _Ticket:
    """What :meth:`Group._join` hands a caller: its flight, its role, and what it waits on."""

    __slots__ = ("flight", "future", "role", "thread_event")

    def __init__(self, flight: Flight, role: str) -> None:
        self.flight = flight
        self.role = role
        self.thread_event: threading.Event | None = None
        self.future: asyncio.Future[None] | None = None

    def wait(self, group: Group) -> None:
        """Block this thread until the flight ends (or its loop is found dead)."""
        assert self.thread_event is not None
        if self.flight.loop is None:
            self.thread_event.wait()
            return
        while not self.thread_event.wait(DEAD_LEADER_POLL):
            if group._ended_if_dead(self.flight):
                return

    async def await_(self, group: Group, loop: asyncio.AbstractEventLoop) -> None:
        """Await the flight's end on ``loop``; a cancelled waiter leaves, the last one abandons."""
        import asyncio  # imported already: ``loop`` runs

        flight, future = self.flight, self.future
        assert future is not None
        try:
            if flight.loop is loop or flight.loop is None:
                await future
            else:
                while not (await asyncio.wait((future,), timeout=DEAD_LEADER_POLL))[0]:
                    if group._ended_if_dead(flight):
                        return
        except asyncio.CancelledError:
            group._leave(self, loop)
            raise


def _reentered(key: Hashable) -> RuntimeError:
    return RuntimeError(
        f"the fetch of cache key {key!r} asked for that same key while computing it: "
        "waiting for itself would never end"
    )


class _Table:
    """The flights in progress: key -> flight key -> flight. Read and written under the lock."""

    __slots__ = ("_flights",)

    def __init__(self) -> None:
        self._flights: dict[Hashable, dict[Hashable, Flight]] = {}

    def get(self, key: Hashable, flight_key: Hashable) -> Flight | None:
        same = self._flights.get(key)
        return None if same is None else same.get(flight_key)

    def add(self, flight: Flight) -> None:
        self._flights.setdefault(flight.key, {})[flight.flight_key] = flight

    def remove(self, flight: Flight) -> None:
        """Take ``flight`` out, if it is still there (a newer flight of its key stays)."""
        same = self._flights.get(flight.key)
        if same is not None and same.get(flight.flight_key) is flight:
            del same[flight.flight_key]
            if not same:
                del self._flights[flight.key]

    def all(self) -> list[Flight]:
        return [flight for same in self._flights.values() for flight in same.values()]

    def end_in_child(self) -> None:
        """In a forked child: every flight ends cancelled, detached, and is taken out."""
        flights, self._flights = self.all(), {}
        for flight in flights:
            flight.end_in_child()

    def of(self, key: Hashable) -> list[Flight]:
        """Every flight of ``key``, whatever its flight key."""
        return list(self._flights.get(key, {}).values())


class Group:
    """The in-flight table of one cache: who fetches each key, and who waits for whom.

    :meth:`do` / :meth:`ado` return ``(value, led, leader_info)``: ``value`` is what ``lead``
    returned, this caller's own (``led``) or that of the leader whose flight it joined, whose
    ``info`` is ``leader_info``. ``lead``'s exception reaches every caller sharing the flight.
    """

    __slots__ = ("__weakref__", "_background", "_lock", "_table", "joined")

    def __init__(self) -> None:
        # Guards the table and every Flight field marked *lock*; never held while calling out.
        self._lock = threading.Lock()
        # lock: the flights in progress.
        self._table = _Table()
        # Strong references to background refresh tasks and threads until they end.
        self._background: set[object] = set()
        # lock: callers that joined a flight already running, each counted once per call.
        self.joined = 0
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child: a new lock, and no flight or refresh of the parent's goes on."""
        self._lock, self._background = threading.Lock(), set()
        self._table.end_in_child()

    def __len__(self) -> int:
        """Flights running now (dead ones are ended on the way)."""
        with self._lock:
            flights = self._table.all()
            dead = [flight for flight in flights if flight.dead()]
            for flight in dead:
                self._end_dead_locked(flight)
        for flight in dead:
            flight.wake()
        return len(flights) - len(dead)

    @property
    def background(self) -> int:
        """Background refreshes still running."""
        return len(self._background)

    # -- an invalidation during a fetch (see the module docstring) -----------------------------
    @contextlib.contextmanager
    def forgetting(
        self,
        keys: Iterable[Hashable] = (),
        scopes: Iterable[Hashable] = (),
        *,
        everything: bool = False,
    ) -> Iterator[None]:
        """Detach the flights of ``keys`` and those carrying ``scopes`` (or all), then hold the
        group's lock while the caller drops the matching entries."""
        wanted = frozenset(scopes)
        with self._lock:
            flights = self._table.all()
            detached = flights if everything else [f for key in keys for f in self._table.of(key)]
            if wanted:
                detached += [f for f in flights if not wanted.isdisjoint(f.scopes)]
            for flight in detached:
                self._table.remove(flight)
                flight.detached = True
            yield

    @contextlib.contextmanager
    def committing(self, flight: Flight) -> Iterator[bool]:
        """Take ``flight`` out of the table and yield whether its result may be stored (no
        invalidation detached it), holding the group's lock while the caller stores it."""
        with self._lock:
            self._table.remove(flight)
            yield not flight.detached

    # -- the table (lock held) -----------------------------------------------------------------
    def _running_locked(
        self, key: Hashable, flight_key: Hashable
    ) -> tuple[Flight | None, Flight | None]:
        """The live flight of ``(key, flight_key)`` or ``None``, and a dead one ended here."""
        flight = self._table.get(key, flight_key)
        if flight is None:
            return None, None
        if flight in _LEADING.get():
            raise _reentered(key)
        if flight.dead():
            self._end_dead_locked(flight)
            return None, flight
        return flight, None

    def _end_dead_locked(self, flight: Flight) -> None:
        self._table.remove(flight)
        flight.detached = True
        if flight.refresh:
            self._background.discard(flight.task)  # that task will never run again
        flight.finish(None, None, cancelled=True)

    def _join(
        self,
        key: Hashable,
        flight_key: Hashable,
        scopes: tuple[Hashable, ...],
        info: object,
        *,
        loop: asyncio.AbstractEventLoop | None,
        blocked: asyncio.AbstractEventLoop | None = None,
        count: bool = True,
        can_wait: bool = True,
    ) -> _Ticket:
        """Lead a new flight of ``(key, flight_key)``, join the one running, or run alone.

        ``loop`` is the asyncio loop the caller awaits on (``None``: a thread, or a caller that
        cannot wait); ``blocked`` the loop a blocking caller would block; ``count`` whether a
        join counts in :attr:`joined`.
        """
        with self._lock:
            flight, dead = self._running_locked(key, flight_key)
            if flight is None:
                ticket = _Ticket(Flight(key, flight_key, scopes, info, loop), _LEAD)
                self._table.add(ticket.flight)
            elif not can_wait or flight.blocks(blocked):
                # Waiting would block the loop the fetch needs, or one we cannot wait in.
                alone = Flight(key, flight_key, scopes, info, None, detached=True)
                ticket = _Ticket(alone, _ALONE)
            else:
                ticket = _Ticket(flight, _JOIN)
                self.joined += count
            if loop is not None:
                ticket.future = ticket.flight.join_async(loop)
            elif ticket.role == _JOIN:
                ticket.thread_event = ticket.flight.join_thread()
            else:
                ticket.flight.waiters = 1
        if dead is not None:
            dead.wake()
        return ticket

    # -- leading -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _leading(self, flight: Flight, in_task: bool = False) -> Iterator[None]:
        """Mark the context as leading ``flight``, and end it on an exception: as the waiters'
        outcome, or cancelled for them to start again (:func:`_outcome_of` says which)."""
        token = _LEADING.set((*_LEADING.get(), flight))
        try:
            yield
        except BaseException as error:
            ours = _outcome_of(error, in_task)
            # A GeneratorExit may close a leader stranded on a closed loop and collected: at any
            # allocation, in any thread, inside this group's lock too. Then only if it is free.
            wait = not isinstance(error, GeneratorExit)
            self._end(flight, None, error if ours else None, cancelled=not ours, blocking=wait)
            if not (in_task and ours) or isinstance(error, Exception):
                raise  # in the flight's own task, any other outcome stays there
        finally:
            with contextlib.suppress(ValueError):  # closed from another context (see above)
                _LEADING.reset(token)

    def _end(
        self,
        flight: Flight,
        value: Any,
        error: BaseException | None = None,
        *,
        cancelled: bool = False,
        blocking: bool = True,
    ) -> None:
        """Record ``flight``'s outcome and wake its waiters. Not ``blocking``: only if the lock is
        free; held, perhaps by this very thread, the flight's loop is closed and the next caller or
        waiter ends it."""
        if not self._lock.acquire(blocking=blocking):
            return
        try:
            self._table.remove(flight)
            flight.finish(value, error, cancelled)
        finally:
            self._lock.release()
        flight.wake()

    def _lead(self, flight: Flight, lead: Lead, count: bool) -> Any:
        with self._leading(flight):
            value = lead(flight, count)
            self._end(flight, value)
        return value

    async def _arun(self, flight: Flight, lead: AsyncLead, count: bool) -> None:
        # A task of its own, in a copy of the leader's context: the mark stays in it and in its
        # children. Its error reaches the waiters through the flight, not through the task.
        with contextlib.suppress(Exception), self._leading(flight, in_task=True):
            self._end(flight, await lead(flight, count))

    # -- sync callers --------------------------------------------------------------------------
    def do(
        self,
        key: Hashable,
        lead: Lead,
        *,
        flight: Hashable | None = None,
        scopes: tuple[Hashable, ...] = (),
        info: object = None,
    ) -> tuple[Any, bool, object]:
        """Lead or join the one flight of ``key`` and ``flight``, in this thread."""
        flight_key = key if flight is None else flight
        here = running_loop()
        count = True
        while True:
            ticket = self._join(key, flight_key, scopes, info, loop=None, blocked=here, count=count)
            if ticket.role != _JOIN:
                return self._lead(ticket.flight, lead, count), True, info
            count = False
            ticket.wait(self)
            if not ticket.flight.cancelled:
                return ticket.flight.outcome(), False, ticket.flight.info
            # Its fetch died of something not ours: start again.

    def _leave(self, ticket: _Ticket, loop: asyncio.AbstractEventLoop) -> None:
        """A cancelled waiter leaves; the last one abandons the fetch."""
        assert ticket.future is not None
        with self._lock:
            flight = ticket.flight
            if flight.leave_async(loop, ticket.future) and not flight.done:
                self._table.remove(flight)
                flight.abandon()

    def _ended_if_dead(self, flight: Flight) -> bool:
        """End ``flight`` if its loop died under it (for a waiter that polls)."""
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
        lead: AsyncLead,
        *,
        flight: Hashable | None = None,
        scopes: tuple[Hashable, ...] = (),
        info: object = None,
    ) -> tuple[Any, bool, object]:
        """Async :meth:`do`. On asyncio the leader's work runs in a task of its own; under
        another event loop (no asyncio loop running) this caller leads in its own task."""
        flight_key = key if flight is None else flight
        loop = running_loop()
        if loop is None:  # lead in this task (threads and asyncio tasks may join), or alone
            alone = self._join(key, flight_key, scopes, info, loop=None, can_wait=False).flight
            with self._leading(alone):
                value = await lead(alone, True)
                self._end(alone, value)
            return value, True, info
        count = True
        while True:
            ticket = self._join(key, flight_key, scopes, info, loop=loop, count=count)
            joined = ticket.flight
            if ticket.role == _LEAD:
                # Created outside the lock: a task factory may run code eagerly.
                joined.task = _flight_task(loop, self._arun(joined, lead, count))
            count = False
            await ticket.await_(self, loop)
            if not joined.cancelled:
                return joined.outcome(), ticket.role == _LEAD, joined.info

    # -- background refresh --------------------------------------------------------------------
    def refresh(
        self, key: Hashable, scopes: tuple[Hashable, ...], lead: Lead | AsyncLead, *, is_async: bool
    ) -> bool:
        """Start the one background refresh of ``key``, unless a flight of the key runs.

        ``lead`` is a :data:`Lead` run in a worker thread, or an :data:`AsyncLead` run in a task
        of the running asyncio loop when ``is_async`` (no running loop: no refresh). True when it
        started. Its outcome reaches nobody; ``lead`` deals with its own failure.
        """
        loop = running_loop() if is_async else None
        if is_async and loop is None:
            return False
        with self._lock:
            running, dead = self._running_locked(key, key)
            if running is None:
                flight = Flight(key, key, scopes, None, loop, refresh=True)
                self._table.add(flight)
        if dead is not None:
            dead.wake()
        if running is not None:
            return False
        if loop is not None:
            task = flight.task = _flight_task(loop, self._arun(flight, lead, False))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return True

        def refresh() -> None:
            try:
                with contextlib.suppress(Exception):  # lead has dealt with it; nobody waits
                    self._lead(flight, lead, False)
            finally:
                self._background.discard(thread)

        thread = threading.Thread(target=refresh, name="wm-refresh", daemon=True)
        self._background.add(thread)
        thread.start()
        return True
