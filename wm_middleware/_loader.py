"""The ``opentelemetry-instrument`` loader's entry point: :class:`WorkingMemoryInstrumentor`.

The ``opentelemetry_instrumentor`` entry point names ``wm_middleware:WorkingMemoryInstrumentor``;
the package imports this module when the name is first asked for, since ``BaseInstrumentor``'s
module pulls in packaging and importlib.metadata, which :func:`wm_middleware.instrument` never
needs. The class drives the same one instrumentation as :func:`wm_middleware.instrument`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from ._instrumentor import INSTRUMENTATION, Request, console_spans
from .package import _instruments

if TYPE_CHECKING:
    from ._core import WorkingMemory
    from ._runtime import Runtime

__all__ = ["WorkingMemoryInstrumentor"]

logger = logging.getLogger("wm_middleware")


class WorkingMemoryInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Routes Supermemory reads through a :class:`WorkingMemory`, with spans and metrics.

    A singleton, like every ``BaseInstrumentor``; ``instrument()`` and ``uninstrument()`` may be
    called from any thread. Settings not passed to ``instrument()`` (the
    ``opentelemetry-instrument`` loader passes none) come from the ``WM_MIDDLEWARE_*`` variables
    (see ``docs/configuration.md``), else their defaults. A client library is patched when the
    application imports it, not before. Under the loader, the memory in use is
    ``WorkingMemoryInstrumentor().working_memory``; the application's own
    :func:`wm_middleware.instrument` returns it too, re-instrumenting first if it passes other
    settings.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        """Whether this process is instrumented, by the loader or by ``instrument()``."""
        return INSTRUMENTATION.active

    @property
    def runtime(self) -> Runtime | None:
        """The runtime in use while instrumented (made now if no client library needed it)."""
        return INSTRUMENTATION.runtime()

    @property
    def working_memory(self) -> WorkingMemory[Any] | None:
        """The working memory in use while instrumented."""
        return INSTRUMENTATION.memory

    def instrument(self, **kwargs: Any) -> WorkingMemory[Any] | None:
        """Instrument with ``kwargs`` completed from the environment; thread-safe.

        A bad value is logged as one error line naming the variable and the process runs
        uninstrumented (every call goes upstream, uncached): raising here would make the
        ``opentelemetry-instrument`` loader log two tracebacks and skip the instrumentors after
        this one, without stopping the app. Other settings than the active ones re-instrument.
        """
        with INSTRUMENTATION.lock:
            try:
                request = Request.of(kwargs)
            except (TypeError, ValueError) as error:
                logger.error("wm_middleware: not instrumented: %s", error)
                return None
            console_spans()  # opentelemetry-instrument without the distro configures no SDK
            return INSTRUMENTATION.start(request)

    def uninstrument(self, **kwargs: Any) -> None:
        """Put every original back by identity and drop pending hooks; a no-op when not active."""
        INSTRUMENTATION.stop()

    # BaseInstrumentor's own instrument() and uninstrument(), overridden above, call these.
    def _instrument(self, **kwargs: Any) -> None:
        self.instrument(**kwargs)

    def _uninstrument(self, **kwargs: Any) -> None:
        INSTRUMENTATION.stop()
