"""Write-aware freshness: after a write, follow its documents until Supermemory has indexed them.

Supermemory answers a write at once and indexes it afterwards (``queued -> extracting -> chunking
-> embedding -> indexing -> done``); search and profile return it only once it is done. So after
a write through an instrumented or wrapped client:

1. the adapter describes how to follow it (:class:`Follow`: API generation, base URL, the
   client's own headers, the 5.x namespace); :func:`documents_of` reads the ids and statuses of
   the documents the answer names;
2. documents not ``done`` yet are *pending*: their write's scopes settle
   (:meth:`WorkingMemory.settle`): entries fetched for them meanwhile live at most until the
   settle ends, and normal caching resumes after ``settle_max`` seconds at the latest;
3. one daemon thread per runtime checks their status, only while something is pending, with an
   ``httpx`` client of its own: per tenant (base URL + credentials), at most one round per
   ``settle_interval / 4`` and at least one per ``settle_interval``. 3.x: one
   ``GET /v3/documents/processing`` per round, whatever the number of documents (a document it
   no longer lists is finished); 5.x (no such endpoint) and a 3.x API that answers it 404:
   ``GET`` of the oldest pending documents, stopping at the first not finished (documents are
   indexed roughly in order). Within those bounds a round is timed for when a document should
   be done: the tenant's last observed indexing time, or the stage it reported (stages take
   similar slices of the time);
4. when a write's documents are all finished (``done`` or ``failed``) its settle ends and
   its scopes are dropped again, here and in the shared tier: the next read fetches the new
   state, at most one round after the API shows it.

A failed check never reaches a read: it is counted, traced and retried with a doubled gap (up
to 8 rounds). Deletes and forgets are applied at once by the API (their answers carry no status)
and only invalidate. Hits never wait for any of this.

With a shared tier (``RedisTier``) the settle is announced to every process
(:mod:`wm_middleware._redis.settling`); they cap what they store for the scope until it ends, and
the end's invalidation reaches their L1 through the tier.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import quote

from opentelemetry.metrics import CallbackOptions, NoOpMeter, Observation
from opentelemetry.trace import SpanKind, StatusCode

from ._calls import Follow, documents_of
from ._core import Settle

if TYPE_CHECKING:
    import httpx

    from ._core import WorkingMemory
    from ._telemetry import Telemetry

__all__ = [
    "FINISHED",
    "PENDING_METRIC",
    "STAGES",
    "STATUS_CHECKS_METRIC",
    "STATUS_CHECK_SPAN",
    "Follow",
    "Freshness",
    "check_settings",
    "documents_of",
]

logger = logging.getLogger(__name__)

STAGES: Final = ("queued", "extracting", "chunking", "embedding", "indexing")
"""A document's statuses before ``done``, in order."""
FINISHED: Final = frozenset({"done", "failed", "error"})
"""Statuses after which a document changes no more (``error``: a batch item that failed)."""

STATUS_CHECK_SPAN: Final = "wm.freshness.status_check"
STATUS_CHECKS_METRIC: Final = "wm.freshness.status_checks"
PENDING_METRIC: Final = "wm.freshness.pending"
CHECK_OUTCOME: Final = "wm.freshness.outcome"  # ok | not_found | error
_MAX_CASCADE: Final = 4  # document GETs per round at most (5.x, or 3.x without processing)
_MAX_BACKOFF: Final = 8  # a failing tenant is retried at most this many rounds apart
_SLEEP: Final = 0.25


def check_settings(freshness: object, settle_interval: object, settle_max: object) -> None:
    """Validate the three freshness settings; a ``ValueError`` names the bad one."""
    if not isinstance(freshness, bool):
        raise ValueError(f"freshness must be True or False, not {freshness!r}")
    for name, value in (("settle_interval", settle_interval), ("settle_max", settle_max)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number of seconds, not {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    if settle_interval > settle_max:  # type: ignore[operator]
        raise ValueError(
            f"settle_interval ({settle_interval}) must not exceed settle_max ({settle_max})"
        )


# -- what a write says --------------------------------------------------------------------------
def _field(item: Any, name: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


# -- pending state --------------------------------------------------------------------------------
@dataclass(slots=True, eq=False)
class _Doc:
    id: str
    namespace: str | None
    written: float
    status: str
    seen: float  # when ``status`` was observed


@dataclass(slots=True, eq=False)
class _Wait:
    """One write's settle, and the documents it waits for."""

    settle: Settle
    scopes: tuple[Hashable, ...]
    remaining: set[str]


@dataclass(slots=True, eq=False)
class _Tenant:
    generation: Literal[3, 5]
    base_url: str
    headers: dict[str, str]
    docs: dict[str, _Doc] = field(default_factory=dict)  # oldest write first
    waits: list[_Wait] = field(default_factory=list)
    due: float = math.inf
    failures: int = 0
    learned: float | None = None  # seconds from a write to "finished", last observed
    per_document: bool = False  # no processing endpoint: GET each document


def _predicted(tenant: _Tenant, now: float, interval: float) -> float:
    """When to ask next about ``tenant`` within the bounds, from when its documents should be
    done: the tenant's last indexing time, or the stage a document reported (stages take
    similar slices of the time). A document due within the last ``interval`` is asked about
    every quarter interval: it is about to finish. ``inf``: no idea."""
    best = math.inf
    for doc in tenant.docs.values():
        guesses = []
        if tenant.learned is not None:
            guesses.append(doc.written + tenant.learned)
        if doc.status in STAGES:
            stage = STAGES.index(doc.status)
            if stage:  # stage i began by ``seen``: done by i/5 of the way there, at the latest
                guesses.append(doc.written + (doc.seen - doc.written) * len(STAGES) / stage)
        for guess in guesses:
            if guess <= now < guess + interval:
                return now  # overdue: the caller asks again after the shortest gap
            if now < guess < best:
                best = guess
    return best


class Freshness:
    """Pending writes of one runtime, their settles, and the thread that checks their status.

    Args:
        memory: the runtime's working memory (its settles cap and drop entries).
        telemetry: where status checks are traced and counted.
        enabled: ``False``: writes only invalidate, as before.
        interval: ``settle_interval``, the longest gap between two status rounds of a tenant.
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
        self.telemetry = telemetry
        self.enabled = enabled
        self.interval = float(interval)
        self.settle_max = float(settle_max)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._tenants: dict[Hashable, _Tenant] = {}  # lock
        self._thread: threading.Thread | None = None  # lock
        self._counter = _guarded_instruments(telemetry, self)
        self.shared = _shared_settling(memory) if enabled else None

    # -- what the runtime calls --------------------------------------------------------------
    def written(self, scopes: tuple[Hashable, ...], follow: Follow | None, answer: Any) -> None:
        """A write succeeded: settle its scopes until the documents it names are indexed.

        Never raises: freshness is best effort around a write that has already happened.
        """
        if not self.enabled or follow is None or not scopes:
            return
        try:
            pending = [i for i, status in follow.documents(answer) if status not in FINISHED]
        except Exception:
            logger.debug("wm_middleware: could not read a write's answer", exc_info=True)
            return
        if not pending:
            return  # indexed at once (an unchanged duplicate): the invalidation is enough
        try:
            self._follow(scopes, follow, pending)
        except Exception:
            logger.warning("wm_middleware: could not follow a write", exc_info=True)

    def settling(self, scopes: tuple[Hashable, ...]) -> bool:
        """Whether a read of ``scopes`` is fetched or served while they settle."""
        if self.memory.settling(*scopes):
            return True
        shared = self.shared
        return shared is not None and shared.deadline(scopes) is not None

    def cap(self, scopes: tuple[Hashable, ...]) -> float | None:
        """A ttl that ends with another process's settle of ``scopes``, or None (none known)."""
        shared = self.shared
        if shared is None:
            return None
        deadline = shared.deadline(scopes)
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        return min(left, self.memory.ttl) if left > 0 else None

    @property
    def pending(self) -> int:
        """Documents this process waits for."""
        with self._lock:
            return sum(len(t.docs) for t in self._tenants.values())

    # -- bookkeeping ---------------------------------------------------------------------------
    def _follow(self, scopes: tuple[Hashable, ...], follow: Follow, pending: list[str]) -> None:
        settle = self.memory.settle(*scopes, within=self.settle_max)
        if self.shared is not None:
            self.shared.begin(scopes, self.settle_max)
        now = time.monotonic()
        with self._lock:
            tenant = self._tenants.get(follow.tenant)
            if tenant is None:
                tenant = self._tenants[follow.tenant] = _Tenant(
                    follow.generation, follow.base_url.rstrip("/"), dict(follow.headers)
                )
            for ident in pending:
                tenant.docs.pop(ident, None)  # re-written: it starts again, and goes last
                tenant.docs[ident] = _Doc(ident, follow.namespace, now, "queued", now)
            tenant.waits.append(_Wait(settle, scopes, set(pending)))
            first = now + self.interval
            if tenant.learned is not None:
                first = min(first, max(now + self.interval / 4, now + tenant.learned))
            tenant.due = min(tenant.due, first)
            self._start_locked()
            self._wake.notify()

    def _start_locked(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="wm-middleware-freshness", daemon=True
            )
            self._thread.start()

    def _prune_locked(self) -> None:
        """Forget waits whose settle ended (deadline, or by hand) and documents nobody waits for."""
        for key, tenant in list(self._tenants.items()):
            tenant.waits = [w for w in tenant.waits if w.settle.active]
            wanted = set().union(*(w.remaining for w in tenant.waits))
            for ident in [i for i in tenant.docs if i not in wanted]:
                del tenant.docs[ident]
            if not tenant.docs:
                del self._tenants[key]

    # -- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        import httpx

        with httpx.Client(timeout=max(1.0, min(5.0, 2 * self.interval))) as client:
            while True:
                with self._lock:
                    self._prune_locked()
                    if not self._tenants:
                        self._thread = None
                        return
                    now = time.monotonic()
                    tenant = min(self._tenants.values(), key=lambda t: t.due)
                    if tenant.due > now:
                        self._wake.wait(min(tenant.due - now, _SLEEP))
                        continue
                    docs = list(tenant.docs.values())
                    tenant.due = math.inf  # claimed: rescheduled after the round
                self._round(client, tenant, docs)

    def _round(self, client: httpx.Client, tenant: _Tenant, docs: list[_Doc]) -> None:
        statuses: dict[str, str] = {}
        try:
            ok = self._check(client, tenant, docs, statuses)
        except Exception:  # never let the thread die of a surprise
            logger.debug("wm_middleware: a status round failed", exc_info=True)
            ok = False
        now = time.monotonic()
        ended: list[_Wait] = []
        with self._lock:
            for ident, status in statuses.items():
                doc = tenant.docs.get(ident)
                if doc is None:
                    continue
                if status in FINISHED:
                    tenant.learned = now - doc.written
                    del tenant.docs[ident]
                else:
                    doc.status, doc.seen = status, now
            for wait in tenant.waits:
                wait.remaining.difference_update(i for i, s in statuses.items() if s in FINISHED)
                if not wait.remaining:
                    ended.append(wait)
            tenant.waits = [w for w in tenant.waits if w.remaining]
            tenant.failures = 0 if ok else tenant.failures + 1
            gap = self.interval * min(2**tenant.failures, _MAX_BACKOFF)
            due = now + gap
            if ok:
                due = min(due, max(now + self.interval / 4, _predicted(tenant, now, self.interval)))
            tenant.due = min(tenant.due, due)
        for wait in ended:
            wait.settle.end()  # drops the scopes here and in the shared tier
            if self.shared is not None:
                self.shared.end(wait.scopes)

    def _check(
        self, client: httpx.Client, tenant: _Tenant, docs: list[_Doc], statuses: dict[str, str]
    ) -> bool:
        """One round: fill ``statuses`` (``"done"`` for a document the processing list no
        longer names)."""
        if tenant.generation == 3 and not tenant.per_document:
            got = self._get(client, tenant, "/v3/documents/processing", "documents.list_processing")
            if got is _NOT_FOUND:
                tenant.per_document = True  # an API without it: GET each document instead
            elif got is None:
                return False
            else:
                listed = {
                    str(_field(d, "id")): str(_field(d, "status"))
                    for d in _field(got, "documents") or ()
                }
                for doc in docs:
                    statuses[doc.id] = listed.get(doc.id, "done")
                return True
        for doc in docs[:_MAX_CASCADE]:
            ident = quote(doc.id, safe="")
            if tenant.generation == 3:
                path = f"/v3/documents/{ident}"
            else:
                path = f"/ns/{quote(doc.namespace or '', safe='')}/document/{ident}"
            got = self._get(client, tenant, path, "documents.get")
            if got is None:
                return False
            # Not found: deleted, or not known yet where the API looked (it is eventually
            # consistent too). Asked about again; ``settle_max`` bounds a deleted one.
            status = "unknown" if got is _NOT_FOUND else _status_of(got)
            statuses[doc.id] = status
            if status not in FINISHED:
                break  # the younger ones are not done either, most likely
        return True

    def _get(self, client: httpx.Client, tenant: _Tenant, path: str, operation: str) -> Any:
        """GET ``path``: its JSON, :data:`_NOT_FOUND` on a 404, ``None`` on any failure.

        Each process asks for itself: an answer shared between processes would be up to a
        round old, and one taken just before a document finished delays its end by a round.
        """
        with self._observed(operation, tenant) as observe:
            try:
                response = client.get(tenant.base_url + path, headers=tenant.headers)
            except Exception as error:
                observe("error", error=type(error).__qualname__)
                return None
            if response.status_code == 404:
                observe("not_found", status=404)
                return _NOT_FOUND
            if not response.is_success:
                observe("error", status=response.status_code, error=str(response.status_code))
                return None
            try:
                data = response.json()
            except ValueError as error:
                observe("error", status=response.status_code, error=type(error).__qualname__)
                return None
            observe("ok", status=response.status_code)
            return data

    @contextmanager
    def _observed(self, operation: str, tenant: _Tenant) -> Iterator[Callable[..., None]]:
        """A span and a count for one status request; telemetry never breaks the check."""
        span: Any = None
        try:
            address, port = _server_of(tenant.base_url)
            attributes: dict[str, Any] = {"supermemory.operation": operation}
            if address:
                attributes["server.address"] = address
            if port is not None:
                attributes["server.port"] = port
            span = self.telemetry.tracer.start_span(
                STATUS_CHECK_SPAN, kind=SpanKind.CLIENT, attributes=attributes
            )
        except Exception:
            span = None

        def observe(outcome: str, status: int | None = None, error: str | None = None) -> None:
            try:
                self._counter.add(1, {"supermemory.operation": operation, CHECK_OUTCOME: outcome})
                if span is not None and span.is_recording():
                    span.set_attribute(CHECK_OUTCOME, outcome)
                    if status is not None:
                        span.set_attribute("http.response.status_code", status)
                    if error is not None:
                        span.set_attribute("error.type", error)
                        span.set_status(StatusCode.ERROR)
            except Exception:
                pass

        try:
            yield observe
        finally:
            try:
                if span is not None:
                    span.end()
            except Exception:
                pass


_NOT_FOUND: Final = object()


def _server_of(base_url: str) -> tuple[str, int | None]:
    import httpx

    url = httpx.URL(base_url)
    return url.host, url.port or {"https": 443, "http": 80}.get(url.scheme)


def _status_of(document: Any) -> str:
    """A document's status from its GET (3.x top level, 5.x under ``system``); memories still
    being generated (``dreamingStatus: dreaming``) count as not done."""
    system = _field(document, "system")
    holder = system if isinstance(system, Mapping) else document
    status = _field(holder, "status")
    if not isinstance(status, str):
        return "unknown"
    if status == "done" and _field(holder, "dreamingStatus") == "dreaming":
        return "indexing"
    return status


# -- telemetry -----------------------------------------------------------------------------------
@dataclass(eq=False)
class _Instruments:
    checks: Any
    sources: weakref.WeakSet[Freshness] = field(default_factory=weakref.WeakSet)

    def observe_pending(self, options: CallbackOptions) -> list[Observation]:
        return [Observation(sum(source.pending for source in list(self.sources)))]


_BY_TELEMETRY: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()
_INSTRUMENTS_LOCK = threading.Lock()


def _instruments(telemetry: Telemetry, source: Freshness) -> Any:
    """The status-check counter of ``telemetry`` (made once per telemetry, like its other
    instruments), with ``source`` added to its pending-documents gauge."""
    with _INSTRUMENTS_LOCK:
        found = _BY_TELEMETRY.get(telemetry)
        if found is None:
            meter = telemetry.instruments.meter
            found = _Instruments(
                meter.create_counter(
                    STATUS_CHECKS_METRIC,
                    unit="{request}",
                    description="Status requests for documents written and not yet indexed.",
                )
            )
            meter.create_observable_up_down_counter(
                PENDING_METRIC,
                callbacks=[found.observe_pending],
                unit="{document}",
                description="Documents written by this process and not yet indexed.",
            )
            _BY_TELEMETRY[telemetry] = found
        found.sources.add(source)
        return found.checks


def _guarded_instruments(telemetry: Telemetry, source: Freshness) -> Any:
    """:func:`_instruments`, or a counter that counts nothing if the meter fails."""
    try:
        return _instruments(telemetry, source)
    except Exception:
        logger.warning("wm_middleware: freshness instruments unavailable", exc_info=True)
        return NoOpMeter("wm_middleware").create_counter(STATUS_CHECKS_METRIC)


def _shared_settling(memory: WorkingMemory[Any]) -> Any:
    """The fleet-wide settle state of ``memory``'s shared tier, or None (no Redis tier)."""
    tier = memory.shared
    if tier is None or type(tier).__name__ != "RedisTier":
        return None
    try:
        from ._redis.settling import shared_settling

        return shared_settling(tier)
    except Exception:
        logger.debug("wm_middleware: no shared settle state", exc_info=True)
        return None
