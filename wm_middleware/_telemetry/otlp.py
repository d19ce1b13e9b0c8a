"""OTLP export over gRPC or HTTP/protobuf: exporters, a delivery count, and one-call set-up.

The protocol follows the OpenTelemetry environment: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
``http/protobuf`` (the specification's default; port 4318). ``grpc`` uses port 4317. The
``otlp`` extra installs both exporters.

Whether a collector is there is judged by a real export (:func:`probe`), not by a TCP connect:
a gRPC port answers a TCP connect and still rejects every HTTP export, and the other way round.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Final

from opentelemetry import metrics, trace

from .._core.forks import reset_in_child
from .outage import Outage, guarded

__all__ = [
    "PROTOCOLS",
    "DeliveryCount",
    "configure_otlp",
    "otlp_exporter",
    "otlp_protocol",
    "probe",
]

logger = logging.getLogger("wm_middleware")

GRPC: Final = "grpc"
HTTP_PROTOBUF: Final = "http/protobuf"
PROTOCOLS: Final = (GRPC, HTTP_PROTOBUF)
PROTOCOL_ENV: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
DEFAULT_PORTS: Final = {GRPC: 4317, HTTP_PROTOBUF: 4318}
_MISSING_EXTRA: Final = "OTLP export needs the 'otlp' extra: pip install 'wm-middleware[otlp]'"


def otlp_protocol(signal: str | None = None, protocol: str | None = None) -> str:
    """The OTLP protocol to use: ``protocol`` if given, else the environment, else http/protobuf.

    Args:
        signal: ``"traces"`` or ``"metrics"``, whose own variable wins over the general one.

    Raises:
        ValueError: the protocol is not ``grpc`` or ``http/protobuf`` (``http/json`` has no
            Python exporter).
    """
    if protocol is None:
        names = [f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"] if signal else []
        for name in [*names, PROTOCOL_ENV]:
            value = os.environ.get(name, "").strip().lower()
            if value:
                protocol = value
                break
    protocol = (protocol or HTTP_PROTOBUF).strip().lower()
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"OTLP protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r} "
            f"(from {PROTOCOL_ENV} or the protocol argument)"
        )
    return protocol


def _url(endpoint: str | None, protocol: str, signal: str) -> str | None:
    """The exporter's endpoint argument: HTTP wants the signal path, gRPC the bare origin."""
    if endpoint is None:
        return None  # the exporter reads OTEL_EXPORTER_OTLP_* itself
    base = endpoint.rstrip("/")
    return base if protocol == GRPC else f"{base}/v1/{signal}"


# signal -> (exporter module suffix, class name); the grpc and http packages mirror each other.
_EXPORTERS: Final = {
    "traces": ("trace_exporter", "OTLPSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter"),
}


def _exporter(
    signal: str,
    endpoint: str | None,
    protocol: str | None,
    timeout: float | None,
    outage: Outage | None = None,
) -> Any:
    protocol = otlp_protocol(signal, protocol)
    module, name = _EXPORTERS[signal]
    package = "grpc" if protocol == GRPC else "http"
    try:
        found = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{package}.{module}")
    except ImportError as error:
        raise ImportError(_MISSING_EXTRA) from error
    exporter_class = getattr(found, name)
    if outage is not None:
        exporter_class = guarded(exporter_class, outage, _SIGNAL_NAMES[signal], _failure(signal))
    return exporter_class(endpoint=_url(endpoint, protocol, signal), timeout=timeout)


_SIGNAL_NAMES: Final = {"traces": "spans", "metrics": "metrics"}


def _failure(signal: str) -> Any:
    if signal == "traces":
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.FAILURE
    from opentelemetry.sdk.metrics.export import MetricExportResult

    return MetricExportResult.FAILURE


def _target(endpoint: str | None, protocol: str, signal: str) -> str:
    """Where ``signal`` goes: ``endpoint``, else the OTEL_EXPORTER_OTLP_* variables' default."""
    if endpoint is not None:
        return endpoint
    for name in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return f"http://localhost:{DEFAULT_PORTS[protocol]}"


def _outages(endpoint: str | None, protocols: dict[str, str]) -> dict[str, Outage]:
    """One :class:`Outage` per collector: both signals share it when they go to one place."""
    found: dict[tuple[str, str], Outage] = {}
    by_signal: dict[str, Outage] = {}
    for signal, protocol in protocols.items():
        target = _target(endpoint, protocol, signal)
        origin = target.split("/v1/", 1)[0].rstrip("/")
        outage = found.setdefault((origin, protocol), Outage(origin, protocol))
        by_signal[signal] = outage
    return by_signal


def otlp_exporter(
    signal: str,
    endpoint: str | None = None,
    protocol: str | None = None,
    *,
    timeout: float | None = None,
) -> Any:
    """An OTLP exporter of ``signal`` (``"traces"`` or ``"metrics"``) for ``protocol`` (see
    :func:`otlp_protocol`).

    Raises:
        ImportError: the ``otlp`` extra is not installed.
    """
    return _exporter(signal, endpoint, protocol, timeout)


def probe(endpoint: str | None, protocol: str | None = None, *, timeout: float = 2.0) -> str | None:
    """Export an empty batch of spans; ``None`` if the collector accepted it, else why not.

    An empty ``ExportTraceServiceRequest`` is a valid request: a collector answers it like any
    other, and nothing shows up in a backend.
    """
    from opentelemetry.sdk.trace.export import SpanExportResult

    protocol = otlp_protocol("traces", protocol)
    try:
        exporter = otlp_exporter("traces", endpoint, protocol, timeout=timeout)
    except ImportError as error:
        return str(error)
    # The exporters log a failed export as an error; a probe reports it in one sentence.
    quiet = logging.getLogger("opentelemetry.exporter.otlp")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        result = exporter.export([])
    except Exception as error:
        result, reason = None, f"{type(error).__name__}: {error}"
    else:
        reason = ""
    finally:
        quiet.setLevel(level)
        try:
            exporter.shutdown()
        except Exception:
            pass
    if result == SpanExportResult.SUCCESS:
        return None
    target = endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
    return f"no OTLP collector accepted an export at {target} over {protocol}" + (
        f" ({reason})" if reason else ""
    )


class DeliveryCount:
    """A span exporter that forwards to ``exporter`` and counts spans delivered and dropped.

    ``delivered`` counts spans in exports the collector acknowledged; ``dropped`` those in
    exports that failed (nothing listening, a wrong protocol, a rejected batch).
    """

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter
        self.delivered = 0
        self.dropped = 0
        self._lock = threading.Lock()
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``_core/forks.py``): a new lock (the parent's export thread
        may have held it; the OTel SDK starts the child's own)."""
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.exporter.export(spans)
        except Exception:
            logger.debug("wm_middleware: OTLP span export raised", exc_info=True)
            result = SpanExportResult.FAILURE
        with self._lock:
            if result == SpanExportResult.SUCCESS:
                self.delivered += len(spans)
            else:
                self.dropped += len(spans)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        flush = getattr(self.exporter, "force_flush", None)
        return bool(flush(timeout_millis)) if flush is not None else True


def _sdk_configured() -> tuple[bool, bool]:
    """Whether the application already installed its own tracer / meter provider."""
    tracer = trace.get_tracer_provider()
    meter = metrics.get_meter_provider()
    tracer_set = not isinstance(tracer, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    meter_set = type(meter).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")
    return tracer_set, meter_set


def configure_otlp(
    endpoint: str | None = None,
    *,
    export_interval: float = 5.0,
    protocol: str | None = None,
) -> tuple[Any, Any]:
    """Install SDK providers exporting over OTLP, unless the application has its own.

    ``endpoint`` is the collector's base URL (``http://localhost:4318`` for http/protobuf,
    ``http://localhost:4317`` for grpc); when ``None``, the standard ``OTEL_EXPORTER_OTLP_*``
    variables apply. ``protocol`` is ``"grpc"`` or ``"http/protobuf"``; when ``None``,
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` (per signal: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, ...)
    decides, and http/protobuf is the default. ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` name the resource. Spans are batched; metrics are exported every
    ``export_interval`` seconds; both are flushed at interpreter exit. A provider the application
    configured is kept and returned as it is.

    Returns:
        The tracer provider and meter provider now in use.

    Raises:
        ImportError: the ``otlp`` extra (``pip install 'wm-middleware[otlp]'``) is not installed.
        ValueError: ``endpoint`` is not an http(s) URL, or the protocol is not supported.
    """
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"otlp_endpoint must be an http(s) URL, got {endpoint!r}")
    if export_interval <= 0:
        raise ValueError(f"export_interval must be > 0, got {export_interval}")
    traces_protocol = otlp_protocol("traces", protocol)
    metrics_protocol = otlp_protocol("metrics", protocol)
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as error:
        raise ImportError(_MISSING_EXTRA) from error

    outages = _outages(endpoint, {"traces": traces_protocol, "metrics": metrics_protocol})
    tracer_set, meter_set = _sdk_configured()
    resource = Resource.create({})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "wm-middleware-app"}))
    if tracer_set:
        tracer_provider: Any = trace.get_tracer_provider()
        logger.info("wm_middleware: keeping the application's tracer provider")
    else:
        exporter = _exporter("traces", endpoint, traces_protocol, None, outages["traces"])
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(tracer_provider)  # shut down (flushed) at exit by the SDK
    if meter_set:
        meter_provider: Any = metrics.get_meter_provider()
        logger.info("wm_middleware: keeping the application's meter provider")
    else:
        exporter = _exporter("metrics", endpoint, metrics_protocol, None, outages["metrics"])
        meter_provider = _meter_provider(exporter, resource, export_interval)
        metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider


def _meter_provider(exporter: Any, resource: Any, export_interval: float) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=export_interval * 1000)
    return MeterProvider(resource=resource, metric_readers=[reader])
