"""OTLP helpers for applications: which protocol and port the standard variables name, whether a
collector is there, and one-call SDK providers exporting to it.

``configure_otlp`` is also ``wm_middleware.configure_otlp``. Importing this module imports no
exporter: ``probe`` and ``configure_otlp`` need the ``otlp`` extra when called.
"""

from __future__ import annotations

from ._telemetry.otlp import DEFAULT_PORTS, PROTOCOLS, configure_otlp, otlp_protocol, probe

__all__ = ["DEFAULT_PORTS", "PROTOCOLS", "configure_otlp", "otlp_protocol", "probe"]
