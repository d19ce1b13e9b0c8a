"""Spans that never break a call: a guarded wrapper, start, annotate, fail, make current.

Every span the library touches is a :class:`GuardedSpan`, whose methods swallow an SDK failure
(a span processor whose ``on_end`` raises, a span whose ``end`` or ``get_span_context`` raises)
and log it once. Only public OpenTelemetry API is used: a span's kind is decided before it is
started, never changed after.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from .names import ERROR_TYPE

__all__ = ["GuardedSpan", "current", "error_type", "failed", "records_of", "start"]

logger = logging.getLogger("wm_middleware._telemetry")

_failures_logged: set[str] = set()


def failed(what: str) -> None:
    """Log an SDK failure: a warning the first time per kind, debug after that."""
    if what in _failures_logged:
        logger.debug("wm_middleware: %s failed", what, exc_info=True)
        return
    _failures_logged.add(what)
    logger.warning("wm_middleware: %s failed; the call goes on (logged once)", what, exc_info=True)


def error_type(error: BaseException) -> str:
    """``error.type``: the exception's qualified class name (builtins without a module)."""
    kind = type(error)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def records_of(count: Callable[[Any], int | None], value: Any) -> int | None:
    """``count(value)``: the record count of a result, or ``None`` where counting fails."""
    try:
        return count(value)
    except Exception:
        failed("counting the records of a result")
        return None


class GuardedSpan:
    """A span whose every method is safe to call: an SDK failure is logged, never raised."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def is_recording(self) -> bool:
        try:
            return bool(self.span.is_recording())
        except Exception:
            failed("span.is_recording")
            return False

    def get_span_context(self) -> SpanContext:
        try:
            found = self.span.get_span_context()
            if isinstance(found, SpanContext):
                return found
        except Exception:
            failed("span.get_span_context")
        return trace.INVALID_SPAN_CONTEXT

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        try:
            self.span.set_attribute(key, value)
        except Exception:
            failed("span.set_attribute")

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        try:
            self.span.set_attributes(attributes)
        except Exception:
            failed("span.set_attributes")

    def add_link(self, context: SpanContext, attributes: dict[str, AttributeValue]) -> None:
        try:
            self.span.add_link(context, attributes)
        except Exception:
            failed("span.add_link")

    def fail(self, error: BaseException, with_message: bool) -> None:
        """``error.type`` and the ERROR status; the message only when ``with_message`` (content
        capture: upstream errors echo the query)."""
        try:
            kind = error_type(error)
            self.span.set_attribute(ERROR_TYPE, kind)
            if with_message:
                self.span.record_exception(error)
                self.span.set_status(Status(StatusCode.ERROR, str(error)[:256] or kind))
            else:
                # The exception event without its message or stack trace (the trace's last
                # line repeats the message).
                self.span.add_event("exception", {"exception.type": kind})
                self.span.set_status(Status(StatusCode.ERROR))
        except Exception:
            failed("recording an error")

    def end(self, end_time: int | None = None) -> None:
        try:
            self.span.end(end_time)
        except Exception:
            failed("span.end")


_INVALID = GuardedSpan(trace.INVALID_SPAN)


def start(
    tracer: Tracer,
    name: str,
    kind: SpanKind,
    attributes: Mapping[str, AttributeValue],
    start_time: int | None = None,
) -> GuardedSpan:
    """Start a span of ``kind`` with ``attributes`` (given at start, where samplers see them)."""
    try:
        return GuardedSpan(
            tracer.start_span(name, kind=kind, attributes=attributes, start_time=start_time)
        )
    except Exception:
        failed("starting a span")
        return _INVALID


@contextmanager
def current(span: GuardedSpan) -> Iterator[GuardedSpan]:
    """Make ``span`` current in the block (it is not ended here); never raises itself."""
    try:
        token: object | None = otel_context.attach(trace.set_span_in_context(span.span))
    except Exception:
        failed("attaching a span")
        token = None
    try:
        yield span
    finally:
        if token is not None:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception:
                failed("detaching a span")
