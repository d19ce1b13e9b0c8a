"""OTLP helpers for applications: which protocol and port the standard variables name, whether a
collector is there, exporters for either protocol, and one-call SDK providers exporting to it.

``configure_otlp`` is also ``wm_middleware.configure_otlp``. ``otlp_exporter(signal, endpoint,
protocol)`` is the span or metric exporter those providers use, for a provider of your own;
``DeliveryCount`` wraps a span exporter and counts what the collector acknowledged and what was
dropped. Importing this module imports no exporter: ``probe``, ``otlp_exporter`` and
``configure_otlp`` need the ``otlp`` extra when called.
"""

# Re-exported by name (``x as x``): every name here is the public one.
from ._telemetry.otlp import DEFAULT_PORTS as DEFAULT_PORTS
from ._telemetry.otlp import PROTOCOLS as PROTOCOLS
from ._telemetry.otlp import DeliveryCount as DeliveryCount
from ._telemetry.otlp import configure_otlp as configure_otlp
from ._telemetry.otlp import otlp_exporter as otlp_exporter
from ._telemetry.otlp import otlp_protocol as otlp_protocol
from ._telemetry.otlp import probe as probe
