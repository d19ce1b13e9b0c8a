"""OTLP export with no collector listening: fail fast, say so once, never stall the exit.

The SDK's OTLP exporters retry a refused export with backoff until their timeout (10 s), and
log every retry: with nothing listening, an application's exit paused about 13 s and printed
eight lines. :func:`guarded` subclasses an exporter class so that, while no collector is known
to be up, each export first tries a TCP connection to the collector (refused at once when
nothing listens) and drops the batch if it fails. Exporters that share one :class:`Outage`
report it in one WARNING line per outage, and one INFO line when a collector accepts again.
A collector that is there but refuses a signal is reported once for that signal.
The exporter's own retry lines are muted while it exports; its timeout still bounds an export
to a collector that accepts connections and then hangs.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import urlsplit

from .._core.forks import reset_in_child

__all__ = ["Outage", "guarded"]

logger = logging.getLogger("wm_middleware")

_EXPORTER_LOGS: Final = "opentelemetry.exporter"
_CONNECT_TIMEOUT: Final = 1.0


class Outage:
    """Whether the collector at ``target`` is up, shared by the exporters that send to it.

    Two kinds of trouble, each said once: nothing accepts a connection (one line for every
    signal), or a collector is there and refuses one signal (a traces-only backend answering
    metrics exports with 404 or 405: one line for that signal).
    """

    def __init__(self, target: str, protocol: str) -> None:
        self.target = target
        self.protocol = protocol
        self.up = False  # an export was accepted since the last failure; else check first
        self.down_reported = False
        self.refused: set[str] = set()  # signals refused (and reported) since last accepted
        self._lock = threading.Lock()
        self._muting = 0
        self._level = logging.NOTSET
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``_core/forks.py``): a new lock."""
        self._lock = threading.Lock()

    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.target if "//" in self.target else f"//{self.target}")
        secure = parts.scheme == "https"
        default = 4317 if self.protocol == "grpc" else (443 if secure else 4318)
        return parts.hostname or "localhost", parts.port or default

    def reachable(self) -> bool:
        """True if a collector is known to be up, or accepts a TCP connection now; else the
        outage is reported (once)."""
        if self.up:
            return True
        try:
            with socket.create_connection(self.address(), timeout=_CONNECT_TIMEOUT):
                return True
        except OSError:
            pass
        with self._lock:
            if self.down_reported:
                return False
            self.down_reported = True
        logger.warning(
            "wm_middleware: no OTLP collector at %s over %s (nothing accepted a connection); "
            "spans and metrics are dropped until one accepts them (said once)",
            self.target,
            self.protocol,
        )
        return False

    def report(self, signal: str, accepted: bool) -> None:
        """An export of ``signal`` was accepted or not: one WARNING per refused signal, one
        INFO when exports are accepted again after an outage."""
        with self._lock:
            self.up = accepted
            if accepted:
                back = self.down_reported or signal in self.refused
                self.down_reported = False
                self.refused.discard(signal)
            else:
                back = False
                if signal in self.refused:
                    return
                self.refused.add(signal)
        if back:
            logger.info(
                "wm_middleware: the OTLP collector at %s accepts %s again", self.target, signal
            )
        elif not accepted:
            logger.warning(
                "wm_middleware: the OTLP collector at %s did not accept %s over %s; they are "
                "dropped until it does (said once)",
                self.target,
                signal,
                self.protocol,
            )

    @contextmanager
    def muted(self) -> Iterator[None]:
        """The exporters' own log lines are silenced in the block (counted across threads)."""
        exporters = logging.getLogger(_EXPORTER_LOGS)
        with self._lock:
            if self._muting == 0:
                self._level = exporters.level
                exporters.setLevel(logging.CRITICAL + 1)
            self._muting += 1
        try:
            yield
        finally:
            with self._lock:
                self._muting -= 1
                if self._muting == 0:
                    exporters.setLevel(self._level)


def guarded(exporter_class: type[Any], outage: Outage, signal: str, failure: Any) -> type[Any]:
    """A subclass of ``exporter_class`` whose ``export`` goes through ``outage``."""

    class Guarded(exporter_class):  # type: ignore[misc]
        def export(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
            if not outage.reachable():
                return failure
            with outage.muted():
                try:
                    result = super().export(batch, *args, **kwargs)
                except Exception:
                    logger.debug("wm_middleware: an OTLP export raised", exc_info=True)
                    result = failure
            outage.report(signal, result != failure)
            return result

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{exporter_class.__name__}"
    return Guarded
