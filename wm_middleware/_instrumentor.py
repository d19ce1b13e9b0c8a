"""``instrument()``, ``uninstrument()``, ``wrap()`` and the OpenTelemetry instrumentor.

One table drives patching: every adapter in :data:`~wm_middleware._adapters.ADAPTERS` contributes
its :class:`~wm_middleware._adapters.Patch` list; ``_instrument`` applies them and records each
(owner, attribute, original, proxy); ``_uninstrument`` walks that record backwards and puts every
original back by identity.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ._adapters import ADAPTERS, Patch
from ._cache import WorkingMemory
from ._runtime import Runtime
from ._telemetry import Telemetry
from .package import _instruments

__all__ = ["WorkingMemoryInstrumentor", "instrument", "uninstrument", "wrap"]

logger = logging.getLogger("wm_middleware")

# Configuration the instrumentor reads when called without it (the ``opentelemetry-instrument``
# loader passes no arguments). Each variable is read only for a setting not passed explicitly.
ENV_MAX_ENTRIES = "WM_MIDDLEWARE_MAX_ENTRIES"
ENV_TTL = "WM_MIDDLEWARE_TTL"
ENV_CACHE = "WM_MIDDLEWARE_CACHE"
ENV_TRACE_HITS = "WM_MIDDLEWARE_TRACE_HITS"
ENV_HTTPX = "WM_MIDDLEWARE_HTTPX"

# Serialises instrument()/uninstrument() across threads: BaseInstrumentor checks and sets its
# "instrumented" flag without a lock, so two threads could both patch and one record be lost.
# Re-entrant because ``instrument()`` holds it around ``WorkingMemoryInstrumentor.instrument``.
_LOCK = threading.RLock()


@dataclass(frozen=True, slots=True)
class _Applied:
    owner: Any  # the class or module holding the attribute
    attribute: str
    original: Any  # what ``owner.__dict__[attribute]`` was before
    proxy: Any  # what we put there


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{name} must be true or false, got {raw!r}")


def _env_number(name: str, default: float, kind: type[int] | type[float], rule: str) -> Any:
    """``name`` as a positive, finite ``kind``; ``rule`` words that for the error message."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = kind(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be {rule}, got {raw!r}")
    return value


def _settings(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` completed from the environment, reading only what was not passed.

    Raises:
        ValueError: a variable that had to be read holds a bad value (the message names it).
    """
    settings = dict(kwargs)
    if settings.get("working_memory") is None:
        if "max_entries" not in settings:
            settings["max_entries"] = _env_number(ENV_MAX_ENTRIES, 100, int, "an integer >= 1")
        if "ttl" not in settings:
            settings["ttl"] = _env_number(ENV_TTL, 60.0, float, "a number of seconds > 0")
    for name, variable, default in (
        ("cache", ENV_CACHE, True),
        ("trace_hits", ENV_TRACE_HITS, True),
        ("httpx", ENV_HTTPX, False),
    ):
        if name not in settings:
            settings[name] = _env_bool(variable, default)
    return settings


def _memory_from(working_memory: object, max_entries: int, ttl: float) -> WorkingMemory[Any]:
    if working_memory is None:
        return WorkingMemory(max_entries=max_entries, ttl=ttl)
    if not isinstance(working_memory, WorkingMemory):
        raise TypeError(
            f"working_memory must be a WorkingMemory, not {type(working_memory).__name__}"
        )
    return working_memory


def _adapter_modules(**flags: bool) -> list[Any]:
    """The adapter modules to use: every one without a flag, and those whose flag is set."""
    modules = []
    for path, flag in ADAPTERS:
        if flag is not None and not flags.get(flag):
            continue
        try:
            modules.append(importlib.import_module(path))
        except Exception:  # an adapter that cannot load must not stop the others
            logger.warning("wm_middleware: adapter %s could not be loaded", path, exc_info=True)
    return modules


def _resolve(patch: Patch) -> tuple[Any, str]:
    owner: Any = importlib.import_module(patch.module)
    *parents, attribute = patch.name.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, attribute


class WorkingMemoryInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Routes Supermemory reads through a :class:`WorkingMemory`, with spans and metrics.

    A singleton, like every ``BaseInstrumentor``; ``instrument()`` and ``uninstrument()`` may be
    called from any thread. Settings not passed to ``instrument()`` (the
    ``opentelemetry-instrument`` loader passes none) come from ``WM_MIDDLEWARE_MAX_ENTRIES``
    (int >= 1), ``WM_MIDDLEWARE_TTL`` (seconds > 0), ``WM_MIDDLEWARE_CACHE``,
    ``WM_MIDDLEWARE_TRACE_HITS`` and ``WM_MIDDLEWARE_HTTPX`` (true|false); a variable is read only
    when its setting is missing (``working_memory=`` covers size and ttl). Prefer
    :func:`wm_middleware.instrument`, which validates its arguments, raises on bad ones, and
    returns the working memory.
    """

    _applied: list[_Applied]
    runtime: Runtime | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    @property
    def working_memory(self) -> WorkingMemory[Any] | None:
        """The working memory in use while instrumented."""
        return None if self.runtime is None else self.runtime.memory

    def instrument(self, **kwargs: Any) -> Any:
        """Apply the patches once; thread-safe. A bad environment value logs one line.

        Settings not passed are read from ``WM_MIDDLEWARE_*``. A bad value is logged as one
        error line naming the variable and the process runs uninstrumented (every call goes
        upstream, uncached): raising here would make the ``opentelemetry-instrument`` loader log
        two tracebacks and skip the instrumentors after this one, without stopping the app.
        """
        with _LOCK:
            if self.is_instrumented_by_opentelemetry:
                return None
            try:
                settings = _settings(kwargs)
            except ValueError as error:
                logger.error("wm_middleware: not instrumented: %s", error)
                return None
            return super().instrument(**settings)

    def uninstrument(self, **kwargs: Any) -> Any:
        """Put every original back by identity; thread-safe; a no-op when not instrumented."""
        with _LOCK:
            return super().uninstrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> WorkingMemory[Any]:
        memory = _memory_from(
            kwargs.get("working_memory"), kwargs.get("max_entries", 100), kwargs.get("ttl", 60.0)
        )
        telemetry = Telemetry(
            kwargs.get("tracer_provider"),
            kwargs.get("meter_provider"),
            trace_hits=kwargs.get("trace_hits", True),
        )
        runtime = Runtime(memory, telemetry, cache=kwargs.get("cache", True))
        with_httpx = kwargs.get("httpx", False)
        self.runtime = runtime
        self._applied = []
        for module in _adapter_modules(httpx=with_httpx):
            try:
                patches: list[Patch] = list(module.patches(runtime))
            except Exception:
                logger.warning("wm_middleware: %s not instrumented", module.__name__, exc_info=True)
                continue
            for patch in patches:
                self._apply(patch)
        if not self._applied:
            logger.info("wm_middleware: no supported client library found to instrument")
        return memory

    def _apply(self, patch: Patch) -> None:
        try:
            owner, attribute = _resolve(patch)
            original = vars(owner).get(attribute, getattr(owner, attribute))
            wrapt.wrap_function_wrapper(owner, attribute, patch.wrapper)
            proxy = vars(owner)[attribute]
        except Exception:
            logger.warning(
                "wm_middleware: could not patch %s.%s", patch.module, patch.name, exc_info=True
            )
            return
        self._applied.append(_Applied(owner, attribute, original, proxy))
        logger.debug("wm_middleware: patched %s.%s", patch.module, patch.name)

    def _uninstrument(self, **kwargs: Any) -> None:
        for applied in reversed(getattr(self, "_applied", [])):
            current = vars(applied.owner).get(applied.attribute)
            if current is applied.proxy:
                setattr(applied.owner, applied.attribute, applied.original)
            else:
                logger.warning(
                    "wm_middleware: %s.%s was re-patched by someone else; left as it is",
                    getattr(applied.owner, "__qualname__", applied.owner),
                    applied.attribute,
                )
        self._applied = []
        self.runtime = None


def instrument(
    max_entries: int = 100,
    ttl: float = 60.0,
    working_memory: WorkingMemory[Any] | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    *,
    cache: bool = True,
    trace_hits: bool = True,
    httpx: bool = False,
    otlp_endpoint: str | None = None,
) -> WorkingMemory[Any]:
    """Cache and trace every Supermemory read in this process; return the working memory.

    Patches (with wrapt) the supermemory SDK 3.x and 5.x, the supermemory-openai-sdk middleware,
    and with ``httpx=True`` plain httpx clients calling the API. Clients created before and after
    the call are covered. Calling it again while instrumented changes nothing and returns the same
    working memory. A missing or unknown client library is logged and skipped, never raised.

    Args:
        max_entries, ttl: the :class:`WorkingMemory` to create (ignored with ``working_memory``).
        working_memory: use this one instead (e.g. shared with ``wrap()``).
        tracer_provider, meter_provider: defaults are the global providers.
        cache: ``False`` observes without caching (every read recorded as ``bypass``).
        trace_hits: ``False`` makes no span per hit (metrics still count every hit).
        httpx: also cache plain ``httpx`` clients that call the API paths.
        otlp_endpoint: install SDK providers exporting over OTLP/HTTP to this endpoint, unless the
            application configured its own (see :func:`wm_middleware.configure_otlp`).

    Raises:
        TypeError, ValueError: a bad argument.
    """
    with _LOCK:
        return _instrument_once(
            max_entries,
            ttl,
            working_memory,
            tracer_provider,
            meter_provider,
            cache=cache,
            trace_hits=trace_hits,
            httpx=httpx,
            otlp_endpoint=otlp_endpoint,
        )


def _instrument_once(
    max_entries: int,
    ttl: float,
    working_memory: WorkingMemory[Any] | None,
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
    *,
    cache: bool,
    trace_hits: bool,
    httpx: bool,
    otlp_endpoint: str | None,
) -> WorkingMemory[Any]:
    instrumentor = WorkingMemoryInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry and instrumentor.runtime is not None:
        return instrumentor.runtime.memory
    memory = _memory_from(working_memory, max_entries, ttl)
    for name, flag in (("cache", cache), ("trace_hits", trace_hits), ("httpx", httpx)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
    if otlp_endpoint is not None:
        from ._otlp import configure_otlp

        configure_otlp(otlp_endpoint)
    elif os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from ._otlp import configure_otlp

        try:
            configure_otlp()
        except ImportError:  # the variable may be meant for another SDK: never fail for it
            logger.warning(
                "wm_middleware: OTEL_EXPORTER_OTLP_ENDPOINT is set but the 'otlp' extra is "
                "not installed; not exporting"
            )
    instrumentor.instrument(
        skip_dep_check=True,  # patch what is there; never refuse because one library is missing
        working_memory=memory,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        cache=cache,
        trace_hits=trace_hits,
        httpx=httpx,
    )
    return memory


def uninstrument() -> None:
    """Undo :func:`instrument`: every patched attribute gets its original back (by identity)."""
    WorkingMemoryInstrumentor().uninstrument()


def wrap(
    client: Any,
    working_memory: WorkingMemory[Any] | None = None,
    max_entries: int = 100,
    ttl: float = 60.0,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    trace_hits: bool = True,
) -> Any:
    """A cached copy of ``client``, without monkeypatching anything.

    Works for supermemory 3.x and 5.x clients, sync and async. The copy's reads go through the
    working memory (``copy.working_memory``) and its writes invalidate; ``client`` itself stays
    uncached and unmodified. Under an active :func:`instrument` a call through the copy is cached
    and traced once, by the copy.

    Raises:
        TypeError: ``client`` is not a client this library knows, or a bad argument.
    """
    memory = _memory_from(working_memory, max_entries, ttl)
    runtime = Runtime(memory, Telemetry(tracer_provider, meter_provider, trace_hits=trace_hits))
    for module in _adapter_modules():
        wrapper = getattr(module, "wrap", None)
        if wrapper is None:
            continue
        wrapped = wrapper(client, runtime)
        if wrapped is not None:
            return wrapped
    hint = ""
    if type(client).__module__.startswith("httpx"):
        # httpx has no public way to copy a client with another transport.
        hint = "; give an httpx client a wm_middleware.CachingTransport instead"
    raise TypeError(f"wrap() does not know how to cache a {type(client).__qualname__}{hint}")
