"""The observability stack without Docker: the OpenTelemetry Collector and Jaeger v2 built from
Go modules of the project's own, Prometheus from the system's package, all on loopback.

``python3 -m stack`` (from a checkout) builds both programs once and runs the stack on the
ports the compose file publishes; ``nox -s stack`` runs the end-to-end tests against it.

* :mod:`stack.programs`: the two Go programs and their builds, cached by the hash of each
  module's ``go.sum``;
* :mod:`stack.services`: the three programs started with the project's own config files,
  ready by their health endpoints, stopped and cleaned up after;
* :mod:`stack.queries`: what a user (and the tests) compare there, cached vs uncached.
"""

from __future__ import annotations

from .programs import COLLECTOR, JAEGER, PROGRAMS, Built, GoNotFound, Program, build, build_all
from .queries import MONITOR_KIND, MONITOR_OPERATION, P95_QUERY, p95_graph_url
from .services import Ports, Stack, StackError, running

__all__ = [
    "COLLECTOR",
    "JAEGER",
    "MONITOR_KIND",
    "MONITOR_OPERATION",
    "P95_QUERY",
    "PROGRAMS",
    "Built",
    "GoNotFound",
    "Ports",
    "Program",
    "Stack",
    "StackError",
    "build",
    "build_all",
    "p95_graph_url",
    "running",
]
