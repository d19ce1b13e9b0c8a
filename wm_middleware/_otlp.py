"""One-call OTLP export: SDK tracer and meter providers, installed only when none is configured."""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import metrics, trace

__all__ = ["configure_otlp"]

logger = logging.getLogger("wm_middleware")


def _sdk_configured() -> tuple[bool, bool]:
    """Whether the application already installed its own tracer / meter provider."""
    tracer = trace.get_tracer_provider()
    meter = metrics.get_meter_provider()
    tracer_set = not isinstance(tracer, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    meter_set = type(meter).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")
    return tracer_set, meter_set


def _signal_endpoint(endpoint: str, signal: str) -> str:
    return endpoint.rstrip("/") + f"/v1/{signal}"


def configure_otlp(endpoint: str | None = None, *, export_interval: float = 5.0) -> tuple[Any, Any]:
    """Install SDK providers exporting over OTLP/HTTP, unless the application has its own.

    ``endpoint`` is the collector's base URL (``http://localhost:4318``); when ``None``, the
    standard ``OTEL_EXPORTER_OTLP_*`` variables apply. ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` name the resource. Spans are batched; metrics are exported every
    ``export_interval`` seconds; both are flushed at interpreter exit. A provider the application
    configured is kept and returned as it is.

    Returns:
        The tracer provider and meter provider now in use.

    Raises:
        ImportError: the ``otlp`` extra (``pip install 'wm-middleware[otlp]'``) is not installed.
        ValueError: ``endpoint`` is not an http(s) URL.
    """
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"otlp_endpoint must be an http(s) URL, got {endpoint!r}")
    if export_interval <= 0:
        raise ValueError(f"export_interval must be > 0, got {export_interval}")
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as error:
        raise ImportError(
            "OTLP export needs the 'otlp' extra: pip install 'wm-middleware[otlp]'"
        ) from error

    tracer_set, meter_set = _sdk_configured()
    resource = Resource.create({})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "wm-middleware-app"}))
    if tracer_set:
        tracer_provider: Any = trace.get_tracer_provider()
        logger.info("wm_middleware: keeping the application's tracer provider")
    else:
        span_exporter = OTLPSpanExporter(
            endpoint=_signal_endpoint(endpoint, "traces") if endpoint else None
        )
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(tracer_provider)  # shut down (flushed) at exit by the SDK
    if meter_set:
        meter_provider: Any = metrics.get_meter_provider()
        logger.info("wm_middleware: keeping the application's meter provider")
    else:
        metric_exporter = OTLPMetricExporter(
            endpoint=_signal_endpoint(endpoint, "metrics") if endpoint else None
        )
        reader = PeriodicExportingMetricReader(
            metric_exporter, export_interval_millis=export_interval * 1000
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider
