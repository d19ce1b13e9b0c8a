"""Pending writes of one runtime, their settles, and the status checks that vouch for copies.

State, all under ``Freshness._lock``: per tenant (base URL + credentials) its pending documents
(oldest write first), its waits (one per write: the settle, the scopes, the documents left, when
they were last found pending) and whether a check of it is in flight (one at a time); per key
read while it settles, the copy fetched last (:class:`Copy`).

Reads never wait for a check. A read answered from memory may start one beside the reads
(:meth:`Freshness.ahead`); a later read uses its answer only once it has come, and only within
three quarters of ``settle_interval`` of when it began. A check that gets no answer changes
nothing: the copies it would have vouched for stay unvouched and their reads fetch.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal

from opentelemetry import trace
from opentelemetry.trace import SpanContext

from .._core import Settle, check_seconds
from .._core.forks import reset_in_child
from .ahead import Launch, Launcher
from .checks import LAUNCHED_BY, LIST_PROCESSING, NOT_FOUND, StatusChecks, document_path
from .copies import Copies, Copy, Standing
from .documents import FINISHED, Follow, field_of, status_of
from .ledger import Ledger

if TYPE_CHECKING:
    from .._calls import Read, Via, Write
    from .._core import WorkingMemory
    from .._telemetry import Telemetry

__all__ = ["Freshness", "check_settings"]

logger = logging.getLogger("wm_middleware._freshness")

_NONE: Final = object()  # no copy can answer the read: it fetches


def check_settings(freshness: object, settle_interval: object, settle_max: object) -> None:
    """Validate the three freshness settings; a ``ValueError`` names the bad one."""
    if not isinstance(freshness, bool):
        raise ValueError(f"freshness must be True or False, not {freshness!r}")
    try:
        interval = check_seconds("settle_interval", settle_interval)
        longest = check_seconds("settle_max", settle_max)
    except TypeError as error:
        raise ValueError(str(error)) from None
    if interval > longest:
        raise ValueError(
            f"settle_interval ({settle_interval}) must not exceed settle_max ({settle_max})"
        )


@dataclass(slots=True, eq=False)
class _Doc:
    id: str
    namespace: str | None
    written: float
    link: SpanContext | None  # the write's span, for the checks that ask about it


@dataclass(slots=True, eq=False)
class _Wait:
    """One write's settle, and the documents it waits for."""

    settle: Settle
    scopes: frozenset[Hashable]
    remaining: set[str]
    confirmed: float = -math.inf  # when a check last found its documents all pending
    renewed: bool = False  # its settle reached settle_max and began again


@dataclass(slots=True, eq=False)
class _Tenant:
    generation: Literal[3, 5]
    base_url: str
    via: Via  # the client of its latest write: its status requests go through it
    docs: dict[str, _Doc] = field(default_factory=dict)  # oldest write first
    waits: list[_Wait] = field(default_factory=list)
    per_document: bool = False  # no processing endpoint: GET each document
    checking: bool = False  # Freshness._lock: a check of this tenant is in flight

    def follow(self, wait: _Wait, namespace: str | None, link: SpanContext) -> None:
        """A write's ``wait`` and its documents (under ``Freshness._lock``)."""
        now = time.monotonic()
        for ident in wait.remaining:
            self.docs.pop(ident, None)  # re-written: it starts again, and goes last
            self.docs[ident] = _Doc(ident, namespace, now, link if link.is_valid else None)
        self.waits.append(wait)

    def settled(self, statuses: dict[str, str], started: float) -> list[_Wait]:
        """What a round begun at ``started`` found (under ``Freshness._lock``): finished
        documents are forgotten, waits with all of theirs asked about pending are confirmed
        from ``started``. Returns the waits that ended (and are forgotten)."""
        ended: list[_Wait] = []
        finished = {ident for ident, status in statuses.items() if status in FINISHED}
        # Past settle_max, a document the API does not know (404) is gone, not pending.
        unknown = {ident for ident, status in statuses.items() if status == "unknown"}
        for ident in finished:
            self.docs.pop(ident, None)
        for wait in self.waits:
            done = (finished | unknown) if wait.renewed else finished
            if wait.remaining & done:
                wait.remaining -= done
                if not wait.remaining:
                    ended.append(wait)
            elif wait.remaining & statuses.keys():
                wait.confirmed = started  # every document asked about is still pending
        self.waits = [w for w in self.waits if w.remaining]
        return ended


class _Rounds:
    """The status rounds of :class:`Freshness`: a check started beside the reads, what its
    answer does to the tenant's waits, and the settles begun again past ``settle_max``."""

    memory: WorkingMemory[Any]
    interval: float
    settle_max: float
    fresh_for: float
    ledger: Ledger
    launcher: Launcher
    checks: StatusChecks
    shared: Any
    _lock: threading.Lock
    _tenants: dict[Hashable, _Tenant]
    _copies: Copies

    def _check(
        self, tenant: _Tenant, waits: list[_Wait], since: float, launcher: SpanContext
    ) -> None:
        """A check started beside the reads (see :meth:`ahead`); never raises."""
        with self._launched(tenant, launcher):
            self._round(tenant, waits, since)

    async def _acheck(
        self, tenant: _Tenant, waits: list[_Wait], since: float, launcher: SpanContext
    ) -> None:
        """:meth:`_check` as a task on an async client's loop: the request is awaited (see
        :func:`_aask`); never raises."""
        with self._launched(tenant, launcher):
            asking = self._asking(tenant, waits, since)
            if asking is not None:
                try:
                    answer = await _aask(self.checks, tenant, *asking)
                except Exception:  # a surprise: the check vouches for nothing
                    logger.debug("wm_middleware: a status check failed", exc_info=True)
                    answer = None
                if answer is not None and self.shared is not None:
                    import anyio.to_thread  # the shared tier's settle ends are Redis calls

                    await anyio.to_thread.run_sync(self._answered, tenant, answer)
                else:
                    self._answered(tenant, answer)

    @contextmanager
    def _launched(self, tenant: _Tenant, launcher: SpanContext) -> Iterator[None]:
        """Around a check started beside the reads: its span links to the read that started it
        (:data:`LAUNCHED_BY`), a surprise is logged and swallowed (the check vouches for
        nothing, reads fetch), and the tenant may be checked again once it is over."""
        token = LAUNCHED_BY.set(launcher)
        try:
            yield
        except Exception:
            logger.debug("wm_middleware: a status check failed", exc_info=True)
        finally:
            LAUNCHED_BY.reset(token)
            with self._lock:
                tenant.checking = False

    def _round(self, tenant: _Tenant, waits: list[_Wait], since: float) -> None:
        """One status request about ``waits``' documents: end the finished, confirm the rest
        (no answer: nothing changes, and the copies stay unvouched). The sync driver of
        :meth:`_asking` and :meth:`_answered`; an async one awaits its request between them."""
        asking = self._asking(tenant, waits, since)
        if asking is None:
            return
        try:
            answer = _ask(self.checks, tenant, *asking)
        except Exception:  # a surprise: the check vouches for nothing
            logger.debug("wm_middleware: a status check failed", exc_info=True)
            answer = None
        self._answered(tenant, answer)

    def _asking(
        self, tenant: _Tenant, waits: list[_Wait], since: float
    ) -> tuple[list[_Doc], _Fleet] | None:
        """What a round about ``waits`` asks (their pending documents, oldest first) and where
        (the fleet's round for a copy fetched at ``since``); None: nothing to ask."""
        with self._lock:
            asked = [tenant.docs[i] for i in tenant.docs if any(i in w.remaining for w in waits)]
        if not asked:
            return None
        scopes = frozenset().union(*(wait.scopes for wait in waits))
        return asked, _Fleet(self.shared, scopes, since, self.fresh_for)

    def _answered(self, tenant: _Tenant, answer: tuple[dict[str, str], float] | None) -> None:
        """What a round found (statuses, when its request began), or None (no answer)."""
        if answer is None:
            return
        with self._lock:
            ended = tenant.settled(*answer)
            for wait in ended:  # every copy of its scopes was fetched before it was indexed
                self._copies.forget((), wait.scopes, False)
        for wait in ended:
            wait.settle.end()  # drops the scopes here and in the shared tier
            if self.shared is not None:
                self.shared.end(tuple(wait.scopes))

    def _renew(self) -> None:
        """Begin again the settle of each write that reached ``settle_max`` with documents
        still pending: its scopes keep short-lived entries until they are indexed, so the
        pre-index answer is never cached for a whole ttl. No read may come to start a check
        now, so the renewed settle asks for one every interval, while the ledger pays."""
        with self._lock:
            overdue = [(t, w) for t in self._tenants.values() for w in t.waits if _overdue(w)]
            for tenant, wait in overdue:
                wait.renewed = True
                wait.settle = self.memory.settle(
                    *wait.scopes,
                    within=self.settle_max,
                    until=partial(self._poll, tenant, wait),
                    every=self.interval,
                )
        if self.shared is not None:
            for _, wait in overdue:
                self.shared.begin(tuple(wait.scopes), self.settle_max)

    def _poll(self, tenant: _Tenant, wait: _Wait) -> bool:
        """A renewed settle's condition: start a check of its write if a credit pays for it
        (the check ends the settle if it finds the documents indexed); always "not yet"."""
        with self._lock:
            if tenant.checking or not self.ledger.take(self.memory.refreshing):
                return False
            tenant.checking = True
        since = time.monotonic() - self.fresh_for  # a fleet's round made lately answers
        job = partial(self._check, tenant, [wait], since, trace.INVALID_SPAN_CONTEXT)
        if not self.launcher.start("thread", job):
            with self._lock:
                tenant.checking = False
        return False


class Freshness(_Rounds):
    """Pending writes of one runtime: their settles, and the status checks that save reads.

    Args:
        memory: the runtime's working memory (its settles cap and drop entries).
        telemetry: where status checks are traced and counted.
        enabled: ``False``: writes only invalidate, as before.
        interval: ``settle_interval``; an entry of a settling scope is served for three quarters
            of it after it was fetched or confirmed.
        settle_max: the longest a scope settles after a write.
    """

    def __init__(
        self,
        memory: WorkingMemory[Any],
        telemetry: Telemetry,
        *,
        enabled: bool = True,
        interval: float = 1.0,
        settle_max: float = 60.0,
    ) -> None:
        check_settings(enabled, interval, settle_max)
        self.memory = memory
        self.enabled = enabled
        self.interval = float(interval)
        self.settle_max = float(settle_max)
        self.fresh_for = self.interval * 3 / 4  # under two turns of 0.5 s: one turn late at most
        self.ledger = Ledger()
        self._took = 0.0  # seconds the last settling read's request took (written unlocked)
        self._lock = threading.Lock()
        self._tenants: dict[Hashable, _Tenant] = {}  # lock
        self._copies = Copies()  # lock
        self.launcher = Launcher()  # where checks run beside the reads
        self.checks = StatusChecks(telemetry, self._pending, max(1.0, min(5.0, 2 * interval)))
        self.shared = _shared_settling(memory) if enabled else None
        # Whatever the memory drops (a write, an invalidation by hand, another process's heard
        # through the tier), its copies are forgotten with it.
        memory.on_drop(self._forget_copies)
        reset_in_child(self, _after_fork)

    # -- writes --------------------------------------------------------------------------------
    def written(self, write: Write, answer: Any, started: float) -> Standing | None:
        """A write that began at ``started`` (monotonic) succeeded: settle its scopes until the
        documents it names are indexed. Called before the write's invalidation; for a write
        that only adds documents (``Write.creates``) returns the entries it leaves true while
        they are pending, for :meth:`stand` after it.

        Never raises: freshness is best effort around a write that has already happened.
        """
        scopes, follow, standing = write.scopes, write.follow, None
        # Not with a shared tier: the write's invalidation comes back through its channel.
        if write.creates and self.enabled and self.memory.shared is None:
            found = self.memory.entries(*scopes)
            with self._lock:
                standing = self._copies.standing(found, time.monotonic())
        self._forget_copies((), scopes, False)
        if not self.enabled or follow is None or not scopes:
            return None
        try:
            pending = [i for i, status in follow.documents(answer) if status not in FINISHED]
        except Exception:
            logger.debug("wm_middleware: could not read a write's answer", exc_info=True)
            return None
        if not pending:
            return None  # indexed at once (an unchanged duplicate): the invalidation is enough
        try:
            # Its answer found them pending (no earlier than it began): that vouches for what
            # the scopes answered before it, as a status check would.
            self._follow(scopes, follow, pending, started if standing is not None else -math.inf)
        except Exception:
            logger.warning("wm_middleware: could not follow a write", exc_info=True)
            return None
        return standing

    def stand(self, standing: Standing | None) -> None:
        """After a write's invalidation: keep what :meth:`written` found standing."""
        if standing is not None:
            with self._lock:
                self._copies.stand(standing)

    def _follow(
        self, scopes: tuple[Hashable, ...], follow: Follow, pending: list[str], confirmed: float
    ) -> None:
        settle = self.memory.settle(*scopes, within=self.settle_max)
        if self.shared is not None:
            self.shared.begin(scopes, self.settle_max)
        link = trace.get_current_span().get_span_context()
        wait = _Wait(settle, frozenset(scopes), set(pending), confirmed)
        with self._lock:
            self._prune_locked()
            tenant = self._tenants.get(follow.tenant)
            if tenant is None:
                tenant = self._tenants[follow.tenant] = _Tenant(
                    follow.generation, follow.base_url.rstrip("/"), follow.via
                )
            tenant.via = follow.via  # the latest writer's client (an older one may be closed)
            tenant.follow(wait, follow.namespace, link)

    # -- reads ---------------------------------------------------------------------------------
    def served(self, read: Read, how: Launch = None) -> bool:
        """``read`` was answered from memory (one credit); whether its scopes settle. If they
        do, a status check may start beside the reads (:meth:`ahead`)."""
        self.ledger.earn()
        if not self.settling(read.scopes):
            return False
        self.ahead(read, how)
        return True

    def settling(self, scopes: tuple[Hashable, ...]) -> bool:
        """Whether a read of ``scopes`` is fetched or served while they settle (a write's
        settle past ``settle_max`` with documents still pending is begun again first)."""
        if self._tenants:
            self._renew()
        if self.memory.settling(*scopes):
            return True
        shared = self.shared
        return shared is not None and shared.deadline(scopes) is not None

    def cap(self, read: Read) -> float:
        """The ttl of an entry stored for ``read`` while its scopes settle: three quarters of
        settle_interval from when what answers it was learnt (a copy a check vouches for: from
        that check; a fetch: from its request, whose time is taken off), no longer than another
        process's settle of them."""
        ttl = min(max(self.fresh_for - self._took, self.fresh_for / 2), self.memory.ttl)
        if self._copies and read.key in self._copies:
            covering = self._covering(read)
            if covering is not None and _vouched(covering[1], covering[2], self.fresh_for):
                basis = min(wait.confirmed for wait in covering[1])
                ttl = min(ttl, max(basis + self.fresh_for - time.monotonic(), 0.001))
        shared = self.shared
        deadline = None if shared is None else shared.deadline(read.scopes)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left > 0:
                ttl = min(ttl, left)
        return ttl

    def ahead(self, read: Read, how: Launch) -> None:
        """After ``read`` of a settling scope was answered from memory: when what answers its
        key will not answer a read half a vouching from now (a turn later), start one status
        check for its tenant beside the reads, paid by a credit. One in flight per tenant;
        none under a loop nothing can run it on (``how`` None)."""
        if how is None or not self._copies:
            return
        covering = self._covering(read)
        if covering is None:
            return
        tenant, waits, saved = covering
        if _horizon(waits, saved, self.fresh_for) >= time.monotonic() + self.fresh_for / 2:
            return  # the next read (a turn away) is answered by what answers this one
        with self._lock:
            if tenant.checking or not self.ledger.take(self.memory.refreshing):
                return
            tenant.checking = True
        launcher = trace.get_current_span().get_span_context()
        job = partial(self._check, tenant, waits, saved.fetched, launcher)
        ajob = partial(self._acheck, tenant, waits, saved.fetched, launcher)
        if not self.launcher.start(how, job, ajob):
            with self._lock:
                tenant.checking = False

    def saving(self, read: Read, fetch: Callable[[], Any], how: Launch = None) -> Callable[[], Any]:
        """``fetch`` of a settling read: the copy a check vouched for lately, else fetched
        and kept. The copy is a read answered from memory (see :meth:`served`)."""

        def fetch_saved() -> Any:
            saved = self._confirmed(read)
            if saved is not _NONE:
                self.served(read, how)
                return saved
            started = time.monotonic()
            value = fetch()
            self._keep(read, value, started)
            return value

        return fetch_saved

    def asaving(
        self, read: Read, fetch: Callable[[], Awaitable[Any]], how: Launch = None
    ) -> Callable[[], Awaitable[Any]]:
        """Async :meth:`saving` (its test of the copy takes no I/O: no thread is needed)."""

        async def fetch_saved() -> Any:
            saved = self._confirmed(read)
            if saved is not _NONE:
                self.served(read, how)
                return saved
            started = time.monotonic()
            value = await fetch()
            self._keep(read, value, started)
            return value

        return fetch_saved

    def _forget_copies(
        self, keys: tuple[Hashable, ...], scopes: tuple[Hashable, ...], everything: bool
    ) -> None:
        """What the memory dropped: its copies go too (see :meth:`Copies.forget`)."""
        with self._lock:
            self._copies.forget(keys, scopes, everything)

    @property
    def pending(self) -> int:
        """Documents this process waits for."""
        with self._lock:
            self._prune_locked()
            return sum(len(t.docs) for t in self._tenants.values())

    def _pending(self) -> int:  # a method: the meter's callback holds it weakly
        return self.pending

    # -- the copies ----------------------------------------------------------------------------
    def _keep(self, read: Read, value: Any, started: float) -> None:
        self._took = time.monotonic() - started
        with self._lock:
            self._copies.keep(read.key, read.scopes, value, started)

    def _covering(self, read: Read) -> tuple[_Tenant, list[_Wait], Copy] | None:
        """The copy for ``read``, its tenant and the waits of the writes covering it, when a
        status check can vouch for the copy: every covering write is this process's own and of
        one tenant (another process's write, or several tenants: the read fetches). A copy from
        before a write answers only a read of indexed documents."""
        with self._lock:
            self._prune_locked()
            saved = self._copies.get(read.key)
            if saved is None or (saved.before and not read.indexed):
                return None
            if self.shared is not None and self.shared.foreign(saved.scopes):
                return None  # another process's write settles it too: its documents are unknown
            covering = [
                (tenant, wait)
                for tenant in self._tenants.values()
                for wait in tenant.waits
                if wait.scopes & saved.scopes
            ]
        tenants = {id(tenant): tenant for tenant, _ in covering}
        if len(tenants) != 1:
            return None
        return next(iter(tenants.values())), [wait for _, wait in covering], saved

    def _confirmed(self, read: Read) -> Any:
        """The copy for ``read`` while a check begun lately found every covering write's
        documents pending since its fetch (a pending document is in no answer yet), else
        :data:`_NONE`. A check that got no answer vouches for nothing."""
        covering = self._covering(read)
        if covering is None:
            return _NONE
        _, waits, saved = covering
        return saved.value if _vouched(waits, saved, self.fresh_for) else _NONE

    def _prune_locked(self) -> None:
        """Forget waits whose settle ended (by a check, or by hand; at the deadline only with
        nothing pending), documents nobody waits for, and copies of scopes that settle no more."""
        for key, tenant in list(self._tenants.items()):
            tenant.waits = [w for w in tenant.waits if w.settle.active or _overdue(w)]
            wanted = set().union(*(w.remaining for w in tenant.waits))
            for ident in [i for i in tenant.docs if i not in wanted]:
                del tenant.docs[ident]
            if not tenant.docs:
                del self._tenants[key]
        if self._copies and not self._tenants:
            self._copies.clear()


def _vouched(waits: list[_Wait], saved: Copy, seconds: float) -> bool:
    """Whether every wait was found pending since ``saved``'s fetch, and within ``seconds``."""
    since = time.monotonic() - seconds
    return all(wait.settle.active and saved.fetched <= wait.confirmed > since for wait in waits)


def _horizon(waits: list[_Wait], saved: Copy, seconds: float) -> float:
    """Until when (monotonic) reads of ``saved``'s key are answered without a request: its
    entry's life (``seconds``), or that long after the checks that vouch for it began."""
    vouched = -math.inf
    if all(wait.settle.active and wait.confirmed >= saved.fetched for wait in waits):
        vouched = min(wait.confirmed for wait in waits)
    return max(saved.fetched, vouched) + seconds


def _overdue(wait: _Wait) -> bool:
    """Whether ``wait``'s settle reached its deadline with documents still pending."""
    return wait.settle.reason == "deadline" and bool(wait.remaining)


class _Fleet:
    """Where a status request is made: through the shared tier's status round for the tenant
    (one request a round for the whole fleet), or here when there is no such tier."""

    def __init__(
        self, board: Any, scopes: frozenset[Hashable], since: float, seconds: float
    ) -> None:
        self.board = board
        self.scopes = scopes
        self.since = since  # monotonic: when the copy to confirm was fetched
        self.seconds = seconds

    def round(
        self, ask: Callable[[], Any], about: Callable[[dict[str, Any]], bool] = lambda _: True
    ) -> tuple[dict[str, Any], float] | None:
        """``ask()``'s answer (a JSON object), or another process's: one requested since the
        copy to confirm was fetched and ``about`` what this round asks; with when its request
        began (monotonic). ``None`` when none is had this round."""
        if self.board is None:
            began = time.monotonic()
            got = ask()
            return None if got is None else (got, began)
        offset = _epoch_offset()
        since = self.since + offset

        def answers(answer: dict[str, Any], began: float) -> bool:
            return began >= since and about(answer)

        got = self.board.status_round(self.scopes, self.seconds, ask, answers)
        return None if got is None else (got[0], got[1] - offset)


def _epoch_offset() -> float:
    """What turns a ``time.monotonic()`` reading into epoch seconds (for other processes)."""
    return time.time() - time.monotonic()


@dataclass(slots=True, eq=False)
class _Question:
    """One status request about some pending documents, written once for both drivers
    (:func:`_ask`, :func:`_aask`): what to GET, what its answer is for the fleet (a JSON object
    another process can read, or ``None``: no answer), whether another process's answer
    answers it, and the statuses an answer gives."""

    path: str
    operation: str
    params: dict[str, str]
    links: list[SpanContext]
    read: Callable[[Any], Any]  # the GET's JSON (or NOT_FOUND) -> the answer, or None
    statuses: Callable[[Any], dict[str, str] | None]
    about: Callable[[dict[str, Any]], bool] = lambda _: True

    def answered(self, answer: tuple[Any, float] | None) -> tuple[dict[str, str], float] | None:
        statuses = None if answer is None else self.statuses(answer[0])
        return None if statuses is None or answer is None else (statuses, answer[1])


def _ask(
    checks: StatusChecks, tenant: _Tenant, asked: list[_Doc], fleet: _Fleet
) -> tuple[dict[str, str], float] | None:
    """Statuses of ``asked`` from one request, and when it began (monotonic); ``None`` when the
    request failed, or the client that made the writes is closed or gone.

    3.x: the processing list (:func:`_processing`). 5.x, and a 3.x API without that list: the
    oldest document asked about (see :func:`_oldest`). With a shared tier either is one request
    a round for the tenant's whole fleet: another process's list answers for every document,
    its document for the ones written after it while it is pending. For an async client this
    is :func:`_aask`.
    """
    question = _question(tenant, asked)

    def ask() -> Any:
        q = question
        return q.read(
            checks.get(tenant.via, tenant.base_url, q.path, q.operation, q.links, q.params)
        )

    return question.answered(fleet.round(ask, question.about))


async def _aask(
    checks: StatusChecks, tenant: _Tenant, asked: list[_Doc], fleet: _Fleet
) -> tuple[dict[str, str], float] | None:
    """:func:`_ask` for an async client, on its loop: the request is awaited, no thread waits
    for it. A shared tier's round (its lease and stored answer are synchronous Redis calls)
    runs in a worker thread, the request in it back on this loop."""
    question = _question(tenant, asked)
    q = question

    async def request() -> Any:
        got = await checks.aget(tenant.via, tenant.base_url, q.path, q.operation, q.links, q.params)
        return q.read(got)

    if fleet.board is None:
        began = time.monotonic()
        got = await request()
        return question.answered(None if got is None else (got, began))
    import anyio.from_thread
    import anyio.to_thread

    def round_here() -> tuple[Any, float] | None:
        return fleet.round(lambda: anyio.from_thread.run(request), question.about)

    return question.answered(await anyio.to_thread.run_sync(round_here))


def _question(tenant: _Tenant, asked: list[_Doc]) -> _Question:
    links = [doc.link for doc in asked if doc.link is not None]
    if tenant.generation != 3 or tenant.per_document:
        return _oldest(tenant, asked, links)
    return _processing(tenant, asked, links)


def _processing(tenant: _Tenant, asked: list[_Doc], links: list[SpanContext]) -> _Question:
    """The 3.x processing list in its ``pending`` view: every document not done or failed,
    with no time cutoff (the default ``active`` view leaves out documents not updated for
    4 hours), so a document it does not list is finished. A list that says it is partial
    (pages, or a total above what it lists) answers nothing."""
    route = LIST_PROCESSING

    def read(got: Any) -> Any:
        if got is None or got is NOT_FOUND:
            return got  # NOT_FOUND is no JSON object: the fleet's round does not store it
        documents = field_of(got, "documents") or ()
        pages = field_of(field_of(got, "pagination") or {}, "totalPages")
        total = field_of(got, "totalCount")
        if (isinstance(pages, int | float) and pages > 1) or (
            isinstance(total, int | float) and total > len(documents)
        ):
            return None  # partial: a document it does not list may still be pending
        return {str(field_of(d, "id")): str(field_of(d, "status")) for d in documents}

    def statuses(listed: Any) -> dict[str, str] | None:
        if listed is NOT_FOUND:
            tenant.per_document = True  # the next round asks about a document
            return None
        found = {str(k): str(v) for k, v in listed.items()}  # another process's, maybe
        return {doc.id: found.get(doc.id, "done") for doc in asked}

    return _Question(route.template, route.operation, {"view": "pending"}, links, read, statuses)


def _oldest(tenant: _Tenant, asked: list[_Doc], links: list[SpanContext]) -> _Question:
    """The status of the oldest document asked about: documents are indexed roughly in order,
    so while it is pending the younger ones are too, most likely. A document that answers 404
    is pending (deleted, or not known yet where the API looked): ``settle_max`` bounds it."""
    oldest = asked[0]
    path = document_path(tenant.generation, oldest.id, oldest.namespace)
    written = oldest.written + _epoch_offset()  # epoch seconds: other processes compare it

    def read(got: Any) -> dict[str, Any] | None:
        if got is None:
            return None
        status = "unknown" if got is NOT_FOUND else status_of(got)
        return {"document": oldest.id, "status": status, "written": written}

    def about(found: dict[str, Any]) -> bool:
        """About this document, or about one written no later that is still pending."""
        if found.get("document") == oldest.id:
            return True
        try:
            return str(found["status"]) not in FINISHED and float(found["written"]) <= written
        except (KeyError, TypeError, ValueError):  # not an answer of this library's
            return False

    def statuses(found: dict[str, Any]) -> dict[str, str]:
        status = str(found["status"])
        if status in FINISHED:
            return {oldest.id: status}
        return {doc.id: status for doc in asked}  # the younger ones are pending too

    return _Question(path, "documents.get", {}, links[:1], read, statuses, about)


def _after_fork(freshness: Freshness) -> None:
    """:class:`Freshness` in a forked child (see ``_core/forks.py``): a new lock, and none of the
    parent's pending writes: the parent follows them (a status round of its threads, holding a
    tenant's lock, never ends here). The child's reads of their scopes fetch until the memory's
    settles of them end."""
    freshness._lock = threading.Lock()
    freshness._tenants = {}
    freshness._copies = Copies()
    freshness.launcher = Launcher()  # the parent's check tasks ran on the parent's loops


def _shared_settling(memory: WorkingMemory[Any]) -> Any:
    """The fleet-wide settle state of ``memory``'s shared tier, or None (no such tier)."""
    tier = memory.shared
    settles = getattr(tier, "settles", None)
    if settles is None:
        return None
    try:
        return settles()
    except Exception:
        logger.debug("wm_middleware: no shared settle state", exc_info=True)
        return None
