"""OTLP helpers for applications: which protocol and port the standard variables name, whether a
collector is there, exporters for either protocol, and one-call SDK providers exporting to it.

``configure_otlp`` is also ``wm_middleware.configure_otlp``. ``otlp_exporter(signal, endpoint,
protocol)`` is the span or metric exporter those providers use, for a provider of your own;
``DeliveryCount`` wraps a span exporter and counts what the collector acknowledged and what was
dropped. Importing this module imports no exporter: ``probe``, ``otlp_exporter`` and
``configure_otlp`` need the ``otlp`` extra when called.
"""

from __future__ import annotations

from ._telemetry.otlp import (
    DEFAULT_PORTS,
    PROTOCOLS,
    DeliveryCount,
    configure_otlp,
    otlp_exporter,
    otlp_protocol,
    probe,
)

__all__ = [
    "DEFAULT_PORTS",
    "PROTOCOLS",
    "DeliveryCount",
    "configure_otlp",
    "otlp_exporter",
    "otlp_protocol",
    "probe",
]
