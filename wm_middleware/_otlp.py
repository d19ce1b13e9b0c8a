"""Moved to :mod:`wm_middleware._telemetry.otlp`; this name stays for existing imports."""

from __future__ import annotations

from ._telemetry.otlp import (
    DEFAULT_PORTS,
    GRPC,
    HTTP_PROTOBUF,
    PROTOCOL_ENV,
    PROTOCOLS,
    DeliveryCount,
    configure_otlp,
    metric_exporter,
    otlp_protocol,
    probe,
    span_exporter,
)

__all__ = [
    "DEFAULT_PORTS",
    "GRPC",
    "HTTP_PROTOBUF",
    "PROTOCOLS",
    "PROTOCOL_ENV",
    "DeliveryCount",
    "configure_otlp",
    "metric_exporter",
    "otlp_protocol",
    "probe",
    "span_exporter",
]
