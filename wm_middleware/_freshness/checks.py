"""Status requests: one ``GET`` each, traced, counted, and never raising into a read.

The paths are the route table's (``documents.list_processing``, ``documents.get``); the names
are :mod:`wm_middleware._telemetry.names`'. A check's span is a ``CLIENT`` span, a child of the
current context (checks run beside the reads, in an empty one: a root), linked to the writes
whose documents it asks about and to the span :data:`LAUNCHED_BY` names, and current around the
request, so the HTTP span of an instrumented httpx is its child.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from opentelemetry.metrics import CallbackOptions, NoOpMeter, Observation
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from .._api.routes import route_named
from .._telemetry.names import (
    CHECK_OUTCOME,
    ERROR_TYPE,
    FRESHNESS_CHECKS,
    FRESHNESS_PENDING,
    HTTP_STATUS_CODE,
    LAUNCHER_LINK,
    LINK_KIND,
    SERVER_ADDRESS,
    SERVER_PORT,
    SM_OPERATION,
    STATUS_CHECK,
    WRITE_LINK,
)
from .._telemetry.spans import GuardedSpan, current, failed, start

if TYPE_CHECKING:
    from .._calls import Via
    from .._telemetry import Telemetry

__all__ = ["LAUNCHED_BY", "NOT_FOUND", "StatusChecks"]

logger = logging.getLogger("wm_middleware._freshness")

NOT_FOUND: Final = object()
"""What :meth:`StatusChecks.get` returns for a 404."""

_NO_PARAMS: Final[Mapping[str, str]] = {}
LAUNCHED_BY: ContextVar[SpanContext | None] = ContextVar("wm_middleware_launched_by", default=None)
"""The span current when a read started the check being made (its span links to it)."""

LIST_PROCESSING: Final = route_named(3, "documents.list_processing")
DOCUMENT: Final = {3: route_named(3, "documents.get"), 5: route_named(5, "documents.get")}


def document_path(generation: int, document: str, namespace: str | None) -> str:
    """The ``documents.get`` path of a document (5.x: in its namespace)."""
    template = DOCUMENT[generation].template
    return template.format(id=quote(document, safe=""), ns=quote(namespace or "", safe=""))


class StatusChecks:
    """The status requests of one runtime: made through the writing client, traced, counted.

    A request goes through the client that made the write (a :class:`Via`: its transport,
    proxy, TLS, headers and event hooks), is never retried, and gives up within the write's
    timeout (its own, else its client's) and within ``timeout``: a check that takes longer
    than a settle interval or two answers too late to save a read.

    Args:
        telemetry: where checks are traced and counted.
        pending: how many documents wait now (the ``wm.freshness.pending`` gauge reads it).
        timeout: the longest any request may take, seconds.
    """

    def __init__(self, telemetry: Telemetry, pending: Callable[[], int], timeout: float) -> None:
        self._telemetry = telemetry
        self._timeout = timeout
        self._counter = _guarded_counter(telemetry, pending)

    def get(
        self,
        via: Via,
        base_url: str,
        path: str,
        operation: str,
        links: Iterable[SpanContext] = (),
        params: Mapping[str, str] = _NO_PARAMS,
    ) -> Any:
        """GET ``path`` below ``base_url`` through ``via``: its JSON, :data:`NOT_FOUND` on a
        404, ``None`` on any failure (an error status, a timeout, no connection, not JSON) and
        when the client is closed or gone (then no request is made, nothing is counted).

        For an async client, call it from a worker thread of the client's loop, or :meth:`aget`.
        """
        if not via.alive:
            return None
        with self._observed(operation, base_url, links) as (span, observe):
            try:
                with current(span):
                    response = via.get(path, params, self.timeout_of(via))
            except Exception as error:
                observe("error", error=type(error).__qualname__)
                return None
            return _answer(response, observe)

    async def aget(
        self,
        via: Via,
        base_url: str,
        path: str,
        operation: str,
        links: Iterable[SpanContext] = (),
        params: Mapping[str, str] = _NO_PARAMS,
    ) -> Any:
        """:meth:`get` through an async client, on its loop: no thread waits for it."""
        if not via.alive:
            return None
        with self._observed(operation, base_url, links) as (span, observe):
            try:
                with current(span):
                    response = await via.aget(path, params, self.timeout_of(via))
            except Exception as error:
                observe("error", error=type(error).__qualname__)
                return None
            return _answer(response, observe)

    def timeout_of(self, via: Via) -> float:
        """The seconds a request through ``via`` may take: its write's timeout (the shortest of
        its parts, for an ``httpx.Timeout``), at most this runtime's ``timeout``."""
        seconds = _seconds(via.timeout)
        return self._timeout if seconds is None else min(seconds, self._timeout)

    @contextmanager
    def _observed(
        self, operation: str, base_url: str, links: Iterable[SpanContext]
    ) -> Iterator[tuple[GuardedSpan, Callable[..., None]]]:
        """The span and the count of one status request; telemetry never breaks the check."""
        span = start(
            self._telemetry.tracer, STATUS_CHECK, SpanKind.CLIENT, _attributes(operation, base_url)
        )
        for link in links:
            span.add_link(link, {LINK_KIND: WRITE_LINK})
        launcher = LAUNCHED_BY.get()
        if launcher is not None and launcher.is_valid:
            span.add_link(launcher, {LINK_KIND: LAUNCHER_LINK})

        def observe(outcome: str, status: int | None = None, error: str | None = None) -> None:
            try:
                self._counter.add(1, {SM_OPERATION: operation, CHECK_OUTCOME: outcome})
            except Exception:
                logger.debug("wm_middleware: counting a status check failed", exc_info=True)
            if span.is_recording():
                span.set_attribute(CHECK_OUTCOME, outcome)
                if status is not None:
                    span.set_attribute(HTTP_STATUS_CODE, status)
                if error is not None:
                    span.set_attribute(ERROR_TYPE, error)
                    _set_error(span)

        try:
            yield span, observe
        finally:
            span.end()


def _answer(response: Any, observe: Callable[..., None]) -> Any:
    """What a status response says (see :meth:`StatusChecks.get`), counted as it says it."""
    status = response.status_code
    if status == 404:
        observe("not_found", status=404)
        return NOT_FOUND
    if not 200 <= status < 300:
        observe("error", status=status, error=str(status))
        return None
    try:
        data = response.json()
    except ValueError as error:
        observe("error", status=status, error=type(error).__qualname__)
        return None
    observe("ok", status=status)
    return data


def _seconds(timeout: object) -> float | None:
    """A timeout in seconds, ``None`` for none: a number, or the shortest part of an
    ``httpx.Timeout`` (or of its dict, as a request's extensions carry it)."""
    if isinstance(timeout, Mapping):
        parts = list(timeout.values())
    elif isinstance(timeout, int | float):
        parts = [timeout]
    else:
        parts = [getattr(timeout, name, None) for name in ("connect", "read", "write", "pool")]
    found = [
        float(part)
        for part in parts
        if isinstance(part, int | float) and not isinstance(part, bool) and 0 < part < math.inf
    ]
    return min(found) if found else None


def _set_error(span: GuardedSpan) -> None:
    """The ERROR status, without a message (there is no exception: an error status answered)."""
    try:
        span.span.set_status(StatusCode.ERROR)
    except Exception:
        failed("span.set_status")


def _attributes(operation: str, base_url: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {SM_OPERATION: operation}
    try:
        import httpx

        url = httpx.URL(base_url)
        port = url.port or {"https": 443, "http": 80}.get(url.scheme)
        if url.host:
            attributes[SERVER_ADDRESS] = url.host
        if port is not None:
            attributes[SERVER_PORT] = port
    except Exception:
        logger.debug("wm_middleware: no server address for a status check", exc_info=True)
    return attributes


# -- metrics: one counter and one gauge per telemetry, fed by every runtime on it ------------
@dataclass(eq=False)
class _Instruments:
    checks: Any
    sources: list[weakref.ref[Callable[[], int]]] = field(default_factory=list)

    def observe_pending(self, options: CallbackOptions) -> list[Observation]:
        alive = [source() for source in self.sources]
        return [Observation(sum(count() for count in alive if count is not None))]


_BY_TELEMETRY: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()
_INSTRUMENTS_LOCK = threading.Lock()


def _new_instruments_lock() -> None:
    """In a forked child: a new lock (a thread of the parent may have held it)."""
    global _INSTRUMENTS_LOCK
    _INSTRUMENTS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_instruments_lock)


def _counter(telemetry: Telemetry, pending: Callable[[], int]) -> Any:
    """The status-check counter of ``telemetry`` (made once per telemetry, like its other
    instruments), with ``pending`` added to its pending-documents gauge."""
    with _INSTRUMENTS_LOCK:
        found = _BY_TELEMETRY.get(telemetry)
        if found is None:
            meter = telemetry.instruments.meter
            found = _Instruments(
                meter.create_counter(
                    FRESHNESS_CHECKS,
                    unit="{request}",
                    description="Status requests for documents written and not yet indexed.",
                )
            )
            meter.create_observable_up_down_counter(
                FRESHNESS_PENDING,
                callbacks=[found.observe_pending],
                unit="{document}",
                description="Documents written by this process and not yet indexed.",
            )
            _BY_TELEMETRY[telemetry] = found
        found.sources = [source for source in found.sources if source() is not None]
        found.sources.append(weakref.WeakMethod(pending))
        return found.checks


def _guarded_counter(telemetry: Telemetry, pending: Callable[[], int]) -> Any:
    """:func:`_counter`, or a counter that counts nothing if the meter fails."""
    try:
        return _counter(telemetry, pending)
    except Exception:
        logger.warning("wm_middleware: freshness instruments unavailable", exc_info=True)
        return NoOpMeter("wm_middleware").create_counter(FRESHNESS_CHECKS)
