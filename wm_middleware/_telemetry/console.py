"""Spans on the terminal, with no collector: ``OTEL_TRACES_EXPORTER=console``.

The variable is OpenTelemetry's own; the SDK reads it only through a configurator (the
``opentelemetry-distro`` under ``opentelemetry-instrument``). Without one, setting it prints
nothing, silently. ``instrument()`` honours it instead: when it names ``console`` and the
application has no tracer provider of its own, an SDK provider printing each span to standard
output as it ends is installed (the ``console`` extra brings the SDK). Without the SDK it says,
once, what to install.
"""

from __future__ import annotations

import os
from typing import Final

from opentelemetry import trace

from .. import _logs

__all__ = ["configure_console", "console_requested"]

TRACES_EXPORTER: Final = "OTEL_TRACES_EXPORTER"
MISSING_SDK: Final = (
    "wm_middleware: OTEL_TRACES_EXPORTER=console asks for spans on the console, but the "
    "OpenTelemetry SDK is not installed: pip install 'wm-middleware[console]' (said once)"
)

# Whether the missing SDK was said already: once per process, however many instrument() calls.
_said: list[bool] = []


def console_requested() -> bool:
    """``OTEL_TRACES_EXPORTER`` lists ``console`` (a comma-separated list, as the SDK reads it)."""
    names = os.environ.get(TRACES_EXPORTER, "")
    return "console" in (name.strip().lower() for name in names.split(","))


def configure_console() -> None:
    """Install an SDK tracer provider printing spans to stdout, unless one is installed already
    (the application's, or the distro's under ``opentelemetry-instrument``). Never raises for a
    missing SDK: a one-time warning names the extra."""
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # someone configured tracing already: theirs decides where spans go
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        if not _said:
            _said.append(True)
            _logs.logger().warning(MISSING_SDK)
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
