"""``instrument()``, ``uninstrument()``, ``wrap()``, and the one instrumentation they drive.

Every entry point resolves one :class:`~wm_middleware._settings.Settings` the same way (argument,
then ``WM_MIDDLEWARE_*`` variable, then default). One table drives patching:
:class:`~wm_middleware._adapters.PatchTable` applies :data:`~wm_middleware._adapters.ADAPTERS`
(at once for a library already imported, by a post-import hook for the others) and reverses it.

A second ``instrument()`` with other settings than the active ones re-instruments under the lock:
the new settings take effect for every client, with a new working memory; an identical call
changes nothing and logs nothing.

Start-up cost. Until the application imports a client library, ``instrument()`` only resolves
the settings, makes the working memory and registers post-import hooks; wrapt is imported when
the first adapter loads. The runtime, with its telemetry and freshness modules (and
OpenTelemetry's API), is made by the first patched call (an ``OnFirstCall``), or at once when
the application handed over providers or imported OpenTelemetry already. The
``opentelemetry-instrument`` loader's :class:`~wm_middleware._loader.WorkingMemoryInstrumentor`
drives the same :data:`INSTRUMENTATION`; only the loader and an application asking for that
name import it, and with it OpenTelemetry's instrumentation package.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping

from . import _logs
from ._adapters import ADAPTERS, PatchTable
from ._core import WorkingMemory
from ._core.forks import reset_in_child
from ._core.lazy import OnFirstCall
from ._settings import OPTIONS, Settings

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from typing import Any, ParamSpec, TypeVar

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ._core import SharedTier
    from ._runtime import Runtime
    from .semantic import SemanticReuse

    P = ParamSpec("P")
    R = TypeVar("R")

__all__ = ["INSTRUMENTATION", "Instrumentation", "Request", "instrument", "uninstrument", "wrap"]


_SETTING_NAMES = frozenset(option.field for option in OPTIONS)


def _keyword_only(example: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Refuse options given by position with a message that says so (``example`` shows how)."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        takes = function.__code__.co_argcount  # the parameters a caller may pass by position

        @functools.wraps(function)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            if len(args) > takes:
                raise TypeError(
                    f"{function.__name__}() takes its options by keyword only, as in "
                    f"{example}; got {len(args)} positional argument(s)"
                )
            return function(*args, **kwargs)

        return checked

    return decorate


# -- building a runtime from settings -------------------------------------------------------------
def _memory(settings: Settings, given: WorkingMemory[Any] | None) -> WorkingMemory[Any]:
    """``given``, or a new memory as ``settings`` say; a URL in ``shared`` makes a ``RedisTier``
    (with ``shared_secret``, its secret).

    Nothing connects here: the tier connects lazily, in the process that first uses it.
    """
    if given is not None:
        return given
    shared = settings.shared
    if isinstance(shared, str):
        from ._redis import RedisTier  # Settings checked that redis-py is installed

        shared = RedisTier(shared, secret=settings.shared_secret)
    return WorkingMemory(
        max_entries=settings.max_entries,
        ttl=settings.ttl,
        refresh_after=settings.refresh_after,
        shared=shared,
    )


def _runtime(
    memory: WorkingMemory[Any],
    settings: Settings,
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
) -> Runtime:
    from ._runtime import Runtime
    from ._telemetry import Telemetry

    try:
        telemetry = Telemetry(tracer_provider, meter_provider, settings)
    except Exception:  # a provider that fails (made at a patched call: it must not fail it)
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.trace import NoOpTracerProvider

        _logs.logger().warning(
            "wm_middleware: telemetry could not be set up; calls are cached, not traced",
            exc_info=True,
        )
        telemetry = Telemetry(NoOpTracerProvider(), NoOpMeterProvider(), settings)
    return Runtime(
        memory,
        telemetry,
        cache=settings.cache,
        freshness=settings.freshness,
        settle_interval=settings.settle_interval,
        settle_max=settings.settle_max,
        semantic=settings.semantic,
    )


def _given_memory(working_memory: object) -> WorkingMemory[Any] | None:
    if working_memory is not None and not isinstance(working_memory, WorkingMemory):
        raise TypeError(
            f"working_memory must be a WorkingMemory, not {type(working_memory).__name__}"
        )
    return working_memory


class Request:
    """Everything one instrumentation is made of: two equal requests make the same one."""

    __slots__ = ("meter_provider", "settings", "tracer_provider", "working_memory")

    def __init__(
        self,
        settings: Settings,
        working_memory: WorkingMemory[Any] | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.settings = settings
        self.working_memory = working_memory
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Request):
            return NotImplemented
        return not self.differences(other)  # the same settings and the same objects

    def __hash__(self) -> int:
        return hash(self.settings)

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> Request:
        """Resolve ``arguments`` (settings and objects; other keys are ignored).

        Raises:
            TypeError, ValueError: a bad argument or variable (the message names it).
        """
        memory = _given_memory(arguments.get("working_memory"))
        settings = Settings.resolve(
            {name: value for name, value in arguments.items() if name in _SETTING_NAMES},
            memory=memory,
        )
        return cls(
            settings, memory, arguments.get("tracer_provider"), arguments.get("meter_provider")
        )

    def differences(self, active: Request) -> list[str]:
        """``name=new (was old)`` for what differs from ``active``."""
        changed = self.settings.changes_shown(active.settings)  # never a secret
        for name in ("working_memory", "tracer_provider", "meter_provider"):
            if getattr(self, name) is not getattr(active, name):
                changed.append(f"{name}= another object")
        return changed


class Instrumentation:
    """The process's one instrumentation: what the active ``instrument()`` asked for and made.

    ``lock`` serialises ``start``, ``stop`` and the post-import hooks across threads. It is
    re-entrant because a hook may fire inside ``start`` (a library imported meanwhile). Every
    field is written under it.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.request: Request | None = None  # None: not instrumented
        self.memory: WorkingMemory[Any] | None = None
        # What the patches call at each call they handle, made by the first (see runtime()).
        self._runtime: OnFirstCall[Runtime] | None = None
        self._table: PatchTable | None = None
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``_core/forks.py``): a new lock, which the patch table shares
        (a thread of the parent instrumenting, or patching a library it imported, held it)."""
        self.lock = threading.RLock()
        if self._table is not None:
            self._table.relock(self.lock)

    @property
    def active(self) -> bool:
        return self.request is not None

    def runtime(self) -> Runtime | None:
        """The active runtime, made now if no patched call needed it yet; ``None`` when inactive."""
        with self.lock:
            return None if self._runtime is None else self._runtime()

    def start(self, request: Request) -> WorkingMemory[Any]:
        """Instrument as ``request`` says, replacing an active instrumentation that differs."""
        with self.lock:
            active = self.request
            if active is not None and self.memory is not None:
                if request == active:
                    return self.memory
                _logs.info(
                    "wm_middleware: instrumenting again with %s; the previous working memory "
                    "is no longer used",
                    ", ".join(request.differences(active)),
                )
                self.stop()
            settings = request.settings
            self.memory = memory = _memory(settings, request.working_memory)
            self.request = request
            self._runtime = runtime = OnFirstCall(
                functools.partial(
                    _runtime, memory, settings, request.tracer_provider, request.meter_provider
                )
            )
            self._table = table = PatchTable(runtime, self.lock)
            table.apply(ADAPTERS, frozenset({"httpx"} if settings.httpx else ()))
            if _telemetry_in_use(request):
                runtime()  # its metrics observe the memory from now on
            _logs.debug(
                "wm_middleware: %d attribute(s) patched, waiting for the import of %s",
                table.applied,
                ", ".join(sorted(table.pending)) or "nothing",
            )
            return memory

    def stop(self) -> None:
        """Put every original back by identity and drop pending hooks; a no-op when inactive."""
        with self.lock:
            if self._table is not None:
                self._table.revert()
            self._table = self._runtime = self.request = self.memory = None


def _telemetry_in_use(request: Request) -> bool:
    """True when the application handed over providers or imported OpenTelemetry already: the
    runtime then costs it no import, and the cache metrics should not wait for a client's."""
    given = request.tracer_provider is not None or request.meter_provider is not None
    return given or "opentelemetry.metrics" in sys.modules


INSTRUMENTATION = Instrumentation()


# The OTLP endpoint an instrument() call configured: the global providers are set once.
_otlp_configured: list[str | None] = []


def console_spans() -> None:
    """``OTEL_TRACES_EXPORTER=console``: spans on stdout when nothing else configured tracing."""
    if os.environ.get("OTEL_TRACES_EXPORTER"):
        from ._telemetry.console import configure_console, console_requested

        if console_requested():
            configure_console()


def _configure_otlp(endpoint: str | None) -> None:
    console_spans()  # first: the OTLP set-up then keeps its tracer provider
    if endpoint is not None:
        if _otlp_configured and _otlp_configured[0] != endpoint:
            _logs.logger().warning(
                "wm_middleware: otlp_endpoint=%r not applied: this process already exports to "
                "%r (OpenTelemetry's global providers are set once); pass tracer_provider= and "
                "meter_provider= instead, or restart with OTEL_EXPORTER_OTLP_ENDPOINT=%s",
                endpoint,
                _otlp_configured[0],
                endpoint,
            )
            return
        from ._telemetry.otlp import configure_otlp

        configure_otlp(endpoint)
        _otlp_configured[:] = [endpoint]
    elif os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from ._telemetry.otlp import configure_otlp

        try:
            configure_otlp()
        except ImportError:  # the variable may be meant for another SDK: never fail for it
            _logs.logger().warning(
                "wm_middleware: OTEL_EXPORTER_OTLP_ENDPOINT is set but the 'otlp' extra is "
                "not installed; not exporting"
            )


@_keyword_only("instrument(ttl=30.0)")
def instrument(
    *,
    cache: bool | None = None,
    max_entries: int | None = None,
    ttl: float | None = None,
    refresh_after: float | None = None,
    working_memory: WorkingMemory[Any] | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    trace_hits: bool | None = None,
    httpx: bool | None = None,
    otlp_endpoint: str | None = None,
    store_id: str | None = None,
    shared: str | SharedTier | None = None,
    shared_secret: str | bytes | None = None,
    freshness: bool | None = None,
    settle_interval: float | None = None,
    settle_max: float | None = None,
    openinference: bool | None = None,
    semantic: str | bool | SemanticReuse | None = None,
) -> WorkingMemory[Any]:
    """Cache and trace every Supermemory read in this process; return the working memory.

    Patches (with wrapt) the supermemory SDK 3.x and 5.x, the supermemory-openai-sdk middleware
    and, with ``httpx=True``, plain httpx clients calling the API: an imported library at once,
    the others when imported (none is imported here); clients made before and after alike; a
    missing library is skipped. Every option is keyword-only; one left ``None`` comes from its
    ``WM_MIDDLEWARE_*`` variable, else its default (``docs/configuration.md``). Called again with
    the same settings it returns the same memory; with others (also after the
    ``opentelemetry-instrument`` loader) it re-instruments and returns the new memory.

    Args:
        cache: ``False`` observes without caching (every read recorded as ``bypass``).
        max_entries, ttl, refresh_after, shared: the :class:`WorkingMemory` to create, or to give
            ``working_memory``; ``shared``: a ``redis://`` / ``rediss://`` URL or a ``RedisTier``.
        shared_secret: the secret of the ``RedisTier`` made from a ``shared`` URL (entries carry
            a MAC under it; a forged one is refused); beside a ready-made tier, an error.
        tracer_provider, meter_provider: defaults are the global providers.
        trace_hits: ``False`` makes no span per hit (metrics still count every hit).
        httpx: also cache plain ``httpx`` clients that call the API paths.
        otlp_endpoint: export over OTLP there, unless the application has providers of its own
            (:func:`wm_middleware.configure_otlp`); ``OTEL_EXPORTER_OTLP_ENDPOINT`` alone too.
        store_id: ``gen_ai.memory.store.id`` on every span, naming the store, never a user.
        freshness, settle_interval, settle_max: reads after a write see it once indexed
            (``docs/freshness.md``).
        openinference: also set OpenInference attributes on spans.
        semantic: ``"shadow"`` / ``True`` (``SemanticReuse()``), ``"serve"`` or a SemanticReuse:
            compare each miss with the nearest cached query (the ``near_*`` stats); ``"serve"``
            also answers it with that query's entry once the evidence allows; ``"off"``: nothing.

    Raises:
        TypeError, ValueError: a bad argument or variable (named), an option given by position.
        ImportError: ``otlp_endpoint`` without the ``otlp`` extra, ``shared`` a URL without the
            ``redis`` extra.
    """
    arguments = dict(locals())
    with INSTRUMENTATION.lock:  # one instrument() or uninstrument() at a time
        request = Request.of(arguments)
        _configure_otlp(otlp_endpoint)
        return INSTRUMENTATION.start(request)


def uninstrument() -> None:
    """Undo :func:`instrument`: every patched attribute gets its original back (by identity), and
    a library not imported yet will not be patched when it is."""
    INSTRUMENTATION.stop()


def _no_adapter_for(client: object) -> TypeError:
    accepted = "a supermemory client instance: Supermemory or AsyncSupermemory, of SDK 3.x or 5.x"
    if isinstance(client, type):
        return TypeError(
            f"wrap() takes a client instance, not the class {client.__qualname__}: "
            f"wrap({client.__qualname__}(...))"
        )
    hint = ""
    if type(client).__module__.startswith("httpx"):
        # httpx has no public way to copy a client with another transport.
        hint = "; give an httpx client a wm_middleware.CachingTransport instead"
    return TypeError(f"wrap() takes {accepted}, not a {type(client).__qualname__}{hint}")


@_keyword_only("wrap(client, ttl=30.0)")
def wrap(
    client: Any,
    *,
    working_memory: WorkingMemory[Any] | None = None,
    cache: bool | None = None,
    max_entries: int | None = None,
    ttl: float | None = None,
    refresh_after: float | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    trace_hits: bool | None = None,
    store_id: str | None = None,
    shared: str | SharedTier | None = None,
    shared_secret: str | bytes | None = None,
    freshness: bool | None = None,
    settle_interval: float | None = None,
    settle_max: float | None = None,
    openinference: bool | None = None,
    semantic: str | bool | SemanticReuse | None = None,
) -> Any:
    """A cached copy of ``client``, without monkeypatching anything.

    Works for supermemory 3.x and 5.x clients, sync and async. The copy's reads go through the
    working memory (``copy.working_memory``) and its writes invalidate; ``client`` itself stays
    uncached and unmodified. Under an active :func:`instrument` a call through the copy is cached
    and traced once, by the copy. Every option is keyword-only and means what it means for
    :func:`instrument`, resolved the same way (argument, ``WM_MIDDLEWARE_*`` variable, default);
    ``cache=False`` gives a copy that observes without caching.

    Raises:
        TypeError: ``client`` is not a client this library knows (or is a class), an option
            given by position, or a bad argument.
        ValueError: a bad argument value or ``WM_MIDDLEWARE_*`` variable.
        ImportError: ``shared`` is a URL and redis-py is not installed.
    """
    if isinstance(client, type):
        raise _no_adapter_for(client)
    arguments = dict(locals(), httpx=False)  # WM_MIDDLEWARE_HTTPX is instrument()'s alone
    request = Request.of(arguments)
    memory = _memory(request.settings, request.working_memory)
    runtime = _runtime(memory, request.settings, tracer_provider, meter_provider)
    for adapter in ADAPTERS:
        if adapter.flag is not None or adapter.library not in sys.modules:
            continue  # a client of a library never imported cannot be here
        wrapped = importlib.import_module(adapter.module).wrap(client, runtime)
        if wrapped is not None:
            return wrapped
    raise _no_adapter_for(client)
