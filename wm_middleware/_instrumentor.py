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
import re
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
from ._core import SharedTier, WorkingMemory
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
ENV_SHARED_URL = "WM_MIDDLEWARE_SHARED_URL"

_SHARED_SCHEMES = ("redis://", "rediss://", "unix://")

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


def _shown(url: str) -> str:
    """``url`` for an error message, without the password it may carry."""
    return repr(re.sub(r"(?<=//)[^@/]*@", "***@", url))


def _shared_tier(shared: object, name: str = "shared") -> SharedTier | None:
    """``shared=`` as a tier: ``None``, a tier as it is, or ``RedisTier(url)`` for a URL.

    Nothing connects here: the tier connects lazily, in the process that first uses it.

    Raises:
        TypeError: neither a URL nor a tier.
        ValueError: a URL of another scheme.
        ImportError: a URL without redis-py installed (the ``redis`` extra).
    """
    if shared is None or isinstance(shared, SharedTier):
        return shared
    if not isinstance(shared, str):
        raise TypeError(
            f"{name} must be a redis:// URL or a RedisTier, not {type(shared).__name__}"
        )
    if not shared.startswith(_SHARED_SCHEMES):
        raise ValueError(
            f"{name} must be a redis://, rediss:// or unix:// URL, got {_shown(shared)}"
        )
    try:
        from ._redis import RedisTier
    except ImportError:
        raise ImportError(f"{name} needs redis-py: pip install 'wm-middleware[redis]'") from None
    return RedisTier(shared)


def _env_shared() -> SharedTier | None:
    """The tier ``WM_MIDDLEWARE_SHARED_URL`` names, or ``None`` when it is unset or empty.

    Raises:
        ValueError: any problem with it, in one line naming the variable.
    """
    raw = os.environ.get(ENV_SHARED_URL)
    if raw is None or not raw.strip():
        return None
    try:
        return _shared_tier(raw.strip(), ENV_SHARED_URL)
    except (TypeError, ValueError, ImportError) as error:
        raise ValueError(str(error)) from None


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
        if "shared" not in settings:
            settings["shared"] = _env_shared()
    for name, variable, default in (
        ("cache", ENV_CACHE, True),
        ("trace_hits", ENV_TRACE_HITS, True),
        ("httpx", ENV_HTTPX, False),
    ):
        if name not in settings:
            settings[name] = _env_bool(variable, default)
    return settings


def _store_id(store_id: object) -> str | None:
    """``store_id`` checked: ``None`` (the environment's, else ``supermemory``) or a name."""
    if store_id is None:
        return None
    if not isinstance(store_id, str):
        raise TypeError(f"store_id must be a str, not {type(store_id).__name__}")
    if not store_id.strip():
        raise ValueError("store_id must name the memory store, got an empty string")
    return store_id


def _memory_from(
    working_memory: object, max_entries: int, ttl: float, shared: object = None
) -> WorkingMemory[Any]:
    """The working memory to use: ``working_memory``, or a new one (with ``shared``'s tier)."""
    if working_memory is None:
        return WorkingMemory(max_entries=max_entries, ttl=ttl, shared=_shared_tier(shared))
    if not isinstance(working_memory, WorkingMemory):
        raise TypeError(
            f"working_memory must be a WorkingMemory, not {type(working_memory).__name__}"
        )
    if shared is not None and shared is not working_memory.shared:
        raise ValueError(
            "pass shared= to the WorkingMemory you give (WorkingMemory(shared=...)), not beside it"
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
    (int >= 1), ``WM_MIDDLEWARE_TTL`` (seconds > 0), ``WM_MIDDLEWARE_SHARED_URL`` (a redis:// URL
    for a shared ``RedisTier``), ``WM_MIDDLEWARE_CACHE``, ``WM_MIDDLEWARE_TRACE_HITS`` and
    ``WM_MIDDLEWARE_HTTPX`` (true|false) and ``WM_MIDDLEWARE_STORE_ID``
    (``gen_ai.memory.store.id``); a variable is read only when its setting is missing
    (``working_memory=`` covers size, ttl and the shared tier). Prefer
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
            kwargs.get("working_memory"),
            kwargs.get("max_entries", 100),
            kwargs.get("ttl", 60.0),
            kwargs.get("shared"),
        )
        telemetry = Telemetry(
            kwargs.get("tracer_provider"),
            kwargs.get("meter_provider"),
            trace_hits=kwargs.get("trace_hits", True),
            store_id=kwargs.get("store_id"),
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
    store_id: str | None = None,
    shared: str | SharedTier | None = None,
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
        otlp_endpoint: install SDK providers exporting over OTLP to this endpoint, unless the
            application configured its own (see :func:`wm_middleware.configure_otlp`). The
            protocol follows ``OTEL_EXPORTER_OTLP_PROTOCOL`` (and its per-signal variants):
            ``http/protobuf`` by default (port 4318) or ``grpc`` (port 4317). Without it,
            ``OTEL_EXPORTER_OTLP_ENDPOINT`` alone does the same.
        store_id: ``gen_ai.memory.store.id`` on every span: the name of the memory store, never
            a user (default ``WM_MIDDLEWARE_STORE_ID``, else ``"supermemory"``).

        shared: a second tier shared by every process using it: a ``redis://`` / ``rediss://``
            URL (a ``RedisTier(url)`` is made; needs the ``redis`` extra) or a ``RedisTier``.
            With ``working_memory``, give the tier to that memory instead.

    Raises:
        TypeError, ValueError: a bad argument (also an unsupported OTLP protocol).
        ImportError: ``otlp_endpoint`` without the ``otlp`` extra installed, or ``shared`` a URL
            without redis-py (the ``redis`` extra).
    """
    with _LOCK:  # one instrument() or uninstrument() at a time
        instrumentor = WorkingMemoryInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry and instrumentor.runtime is not None:
            return instrumentor.runtime.memory
        for name, flag in (("cache", cache), ("trace_hits", trace_hits), ("httpx", httpx)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
        store_id = _store_id(store_id)
        memory = _memory_from(working_memory, max_entries, ttl, shared)
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
            store_id=store_id,
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
    store_id: str | None = None,
    shared: str | SharedTier | None = None,
) -> Any:
    """A cached copy of ``client``, without monkeypatching anything.

    Works for supermemory 3.x and 5.x clients, sync and async. The copy's reads go through the
    working memory (``copy.working_memory``) and its writes invalidate; ``client`` itself stays
    uncached and unmodified. Under an active :func:`instrument` a call through the copy is cached
    and traced once, by the copy. ``shared`` is a second tier shared with other processes, as for
    :func:`instrument`.

    ``store_id`` is the copy's ``gen_ai.memory.store.id`` (default ``WM_MIDDLEWARE_STORE_ID``,
    else ``supermemory``); ``tracer_provider``, ``meter_provider`` and ``trace_hits`` are as for
    :func:`instrument`.

    Raises:
        TypeError: ``client`` is not a client this library knows, or a bad argument.
        ValueError: a bad argument value.
        ImportError: ``shared`` is a URL and redis-py is not installed.
    """
    memory = _memory_from(working_memory, max_entries, ttl, shared)
    telemetry = Telemetry(
        tracer_provider, meter_provider, trace_hits=trace_hits, store_id=_store_id(store_id)
    )
    runtime = Runtime(memory, telemetry)
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
