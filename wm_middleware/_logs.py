"""The package's logger, with ``logging`` imported when a line is logged, not before.

``instrument()`` runs at an application's start-up, and importing :mod:`logging` there would
cost more than the rest of it. A line below WARNING is dropped while :mod:`logging` was never
imported: nothing can have configured a handler or a level that would show it, so logging it
would have shown nothing either. A WARNING or worse always imports it (with no handler
configured, :mod:`logging` prints it to stderr).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    import logging
    from typing import Any

__all__ = ["NAME", "debug", "info", "logger"]

NAME = "wm_middleware"


def logger(name: str = NAME) -> logging.Logger:
    """The logger ``name`` (the package's by default), importing :mod:`logging` if need be."""
    import logging

    return logging.getLogger(name)


def debug(message: str, *args: Any) -> None:
    """``logger().debug(message, *args)`` once :mod:`logging` is in use, else nothing."""
    if "logging" in sys.modules:
        logger().debug(message, *args)


def info(message: str, *args: Any) -> None:
    """``logger().info(message, *args)`` once :mod:`logging` is in use, else nothing."""
    if "logging" in sys.modules:
        logger().info(message, *args)
