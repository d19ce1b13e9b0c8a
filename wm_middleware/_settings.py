"""Every setting of ``instrument()``, ``wrap()`` and the ``opentelemetry-instrument`` loader.

One frozen :class:`Settings`, one table of ``WM_MIDDLEWARE_*`` variables (:data:`OPTIONS`), one
resolution for all three entry points: for each setting, the argument when one is passed (not
``None``), else its environment variable when set and not blank, else its default.

A bad value is refused at the boundary: a bad argument raises ``TypeError`` or ``ValueError``
naming the argument, a bad variable raises ``ValueError`` naming the variable and quoting its
value (without the password a URL may carry). The loader turns that ``ValueError`` into one log
line and leaves the process uninstrumented. A repr or a log line of the settings shows a URL
without its password and a secret as ``'***'``.

``docs/configuration.md`` holds :func:`table` as it is printed by
``python -c "from wm_middleware._settings import table; print(table(), end='')"``; a test keeps
the two equal.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping

from ._core import check_seconds
from ._redis.urls import SCHEMES_NAMED, checked, masked  # import-light: no redis-py, no re

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from typing import Any, Final

    from ._core import SharedTier
    from .semantic import SemanticReuse

__all__ = [
    "CACHE",
    "FRESHNESS",
    "HTTPX",
    "MAX_ENTRIES",
    "MEMORY_FIELDS",
    "OPENINFERENCE",
    "OPTIONS",
    "REFRESH_AFTER",
    "SEMANTIC",
    "SETTLE_INTERVAL",
    "SETTLE_MAX",
    "SHARED_SECRET",
    "SHARED_URL",
    "STORE_ID",
    "TRACE_HITS",
    "TTL",
    "Option",
    "Settings",
    "ValueKind",
    "shown",
    "table",
]

# -- the variables --------------------------------------------------------------------------------
CACHE: Final = "WM_MIDDLEWARE_CACHE"
"""``true|false``: ``false`` observes without caching (every read goes upstream, recorded as
``bypass``). Default ``true``."""

MAX_ENTRIES: Final = "WM_MIDDLEWARE_MAX_ENTRIES"
"""An integer >= 1: how many answers the working memory keeps (least recently used goes first).
Default ``100``."""

TTL: Final = "WM_MIDDLEWARE_TTL"
"""Seconds > 0: how long an answer is served from the working memory. Default ``60``."""

REFRESH_AFTER: Final = "WM_MIDDLEWARE_REFRESH_AFTER"
"""Seconds > 0, below the TTL: a hit older than this is served and refreshed in the background.
Default unset (no refresh ahead)."""

SHARED_URL: Final = "WM_MIDDLEWARE_SHARED_URL"
"""A ``redis://``, ``rediss://`` or ``unix://`` URL: a shared tier (``RedisTier``) used by every
process configured with it. Needs the ``redis`` extra. Default unset (no shared tier)."""

SHARED_SECRET: Final = "WM_MIDDLEWARE_SHARED_SECRET"
"""The secret of the ``RedisTier`` made from a shared URL: every entry carries a MAC under it, and
one that does not verify is refused (give every process of the fleet the same one; surrounding
whitespace is not part of it). Not used beside a ready-made tier, which has its own. Never
shown. Default unset (entries are not authenticated)."""

STORE_ID: Final = "WM_MIDDLEWARE_STORE_ID"
"""``gen_ai.memory.store.id`` on every span: the name of the memory store, never a user. Default
unset (spans say ``supermemory``)."""

FRESHNESS: Final = "WM_MIDDLEWARE_FRESHNESS"
"""``true|false``: after a write, reads of what it changed wait for the write to be indexed
instead of caching an answer from before it. Default ``true``."""

SETTLE_INTERVAL: Final = "WM_MIDDLEWARE_SETTLE_INTERVAL"
"""Seconds > 0 between two status checks of a pending write. Default ``1``."""

SETTLE_MAX: Final = "WM_MIDDLEWARE_SETTLE_MAX"
"""Seconds > 0: the longest a pending write is waited for before reads cache again. Default
``60``."""

OPENINFERENCE: Final = "WM_MIDDLEWARE_OPENINFERENCE"
"""``true|false``: also set OpenInference attributes on spans (for Phoenix, Arize). Default
``false``."""

TRACE_HITS: Final = "WM_MIDDLEWARE_TRACE_HITS"
"""``true|false``: a span per cache hit (``false``: hits are counted in metrics only). Default
``true``."""

HTTPX: Final = "WM_MIDDLEWARE_HTTPX"
"""``true|false``: ``instrument()`` also caches plain ``httpx`` clients calling the API paths.
Default ``false``. ``wrap()`` has no use for it."""

SEMANTIC: Final = "WM_MIDDLEWARE_SEMANTIC"
"""``off|shadow|serve``: ``shadow`` compares each miss with the nearest cached query of its
partition and counts whether reusing it would have given the same answer (never changes an
answer); ``serve`` also answers a miss with that query's entry once the verdicts bound
disagreement at or below 1% (see docs/semantic.md). Default ``off``."""

_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})


# -- checks: one per kind of value; ``name`` is the argument or variable the value came from ------
def _boolean(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _seconds(value: object, name: str) -> float:
    return check_seconds(name, value)  # the memory's own check: one rule, one message


def _name(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must name the memory store, got an empty string")
    return value


def _secret(value: object, name: str) -> str | bytes:
    if not isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a str or bytes, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return value


def shown(url: str) -> str:
    """``url`` quoted for an error message or a log line, without the password it may carry."""
    return repr(masked(url))


def _tier(value: object, name: str) -> str | SharedTier:
    from ._core import SharedTier  # here: only a shared tier needs the protocol

    if isinstance(value, SharedTier):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a redis:// URL or a RedisTier, not {type(value).__name__}")
    checked(value, name)
    import importlib.util  # here: only a shared URL needs it, and it costs start-up time

    if importlib.util.find_spec("redis") is None:
        raise ImportError(f"{name} needs redis-py: pip install 'wm-middleware[redis]'")
    return value


def _semantic(value: object, name: str) -> SemanticReuse | None:
    """``off`` / ``False`` (``None``), ``shadow`` / ``True`` (the default configuration),
    ``serve`` (the default configuration, serving) or a ``SemanticReuse``."""
    mode = value.strip().lower() if isinstance(value, str) else None
    if mode is not None and mode not in ("off", "shadow", "serve"):
        raise ValueError(f"{name} must be off, shadow or serve, got {value!r}")
    if value is False or mode == "off":
        return None  # and wm_middleware.semantic stays unimported
    from .semantic import SemanticReuse  # here: only the shadow and serve modes need it

    if value is True or mode is not None:
        return SemanticReuse(serve=mode == "serve")
    if not isinstance(value, SemanticReuse):
        raise TypeError(
            f"{name} must be 'off', 'shadow', 'serve', a bool or a SemanticReuse, "
            f"not {type(value).__name__}"
        )
    return value


# -- parsers of a variable's text (stripped, not blank) into a value the check then sees ----------
def _parse_boolean(raw: str, name: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {raw!r}")


def _parse_number(kind: type[int] | type[float], rule: str) -> Callable[[str, str], Any]:
    def parse(raw: str, name: str) -> Any:
        try:
            value = kind(raw)
        except ValueError:
            raise ValueError(f"{name} must be {rule}, got {raw!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be {rule}, got {raw!r}")
        return value

    return parse


def _parse_text(raw: str, name: str) -> str:
    return raw


def _shown_tier(value: object) -> str:
    return shown(value) if isinstance(value, str) else repr(value)


def _hidden(value: object) -> str:
    return "'***'"


class ValueKind:
    """A kind of value: the values it takes, its check, its parser of a variable's text, and how
    a value is shown in a repr or a log line (never a secret)."""

    __slots__ = ("check", "parse", "rule", "show")

    def __init__(
        self,
        rule: str,  # for the table
        check: Callable[[object, str], Any],  # of an argument, or of a variable once parsed
        parse: Callable[[str, str], Any],
        show: Callable[[Any], str] = repr,  # of a value that is not None
    ) -> None:
        self.rule = rule
        self.check = check
        self.parse = parse
        self.show = show


_BOOLEAN: Final = ValueKind("true or false", _boolean, _parse_boolean)
_COUNT: Final = ValueKind("an integer >= 1", _count, _parse_number(int, "an integer >= 1"))
_SECONDS: Final = ValueKind(
    "seconds > 0", _seconds, _parse_number(float, "a number of seconds > 0")
)
_TIER: Final = ValueKind(f"a {SCHEMES_NAMED} URL", _tier, _parse_text, _shown_tier)
_SECRET: Final = ValueKind("a non-empty secret", _secret, _parse_text, _hidden)
_NAME: Final = ValueKind("a name", _name, _parse_text)
_SEMANTIC: Final = ValueKind("off, shadow, serve or a SemanticReuse", _semantic, _parse_text)


class Option:
    """One setting: its field (and argument), its variable, default, kind of value and meaning.

    ``bound``: what the setting's rule adds to its kind's (checked with the other settings).
    """

    __slots__ = ("bound", "default", "field", "kind", "meaning", "variable")

    def __init__(
        self,
        field: str,
        variable: str,
        default: Any,
        kind: ValueKind,
        meaning: str,
        bound: str | None = None,
    ) -> None:
        self.field = field
        self.variable = variable
        self.default = default
        self.kind = kind
        self.meaning = meaning
        self.bound = bound

    def __repr__(self) -> str:
        return f"Option({self.field!r}, {self.variable!r}, default={self.default!r})"

    @property
    def rule(self) -> str:
        """The values it takes, for the table."""
        return self.kind.rule if self.bound is None else f"{self.kind.rule}, {self.bound}"

    @property
    def check(self) -> Callable[[object, str], Any]:
        return self.kind.check

    @property
    def parse(self) -> Callable[[str, str], Any]:
        return self.kind.parse

    def shown(self, value: Any) -> str:
        """``value`` of this setting in a repr or a log line: a secret as ``'***'``."""
        return repr(value) if value is None else self.kind.show(value)

    def value(self, argument: object, environ: Mapping[str, str]) -> Any:
        """The argument if not ``None``, else the variable if set and not blank, else default."""
        if argument is not None:
            return self.check(argument, self.field)
        raw = environ.get(self.variable, "").strip()
        if not raw:
            return self.default
        try:
            return self.check(self.parse(raw, self.variable), self.variable)
        except (TypeError, ImportError) as error:  # from a variable, still a bad value
            raise ValueError(str(error)) from None


# fmt: off
OPTIONS: Final[tuple[Option, ...]] = (
    Option("cache", CACHE, True, _BOOLEAN,
           "false observes without caching: every read goes upstream, recorded as bypass"),
    Option("max_entries", MAX_ENTRIES, 100, _COUNT,
           "answers the working memory keeps (least recently used goes first)"),
    Option("ttl", TTL, 60.0, _SECONDS, "how long an answer is served from the working memory"),
    Option("refresh_after", REFRESH_AFTER, None, _SECONDS,
           "a hit older than this is served and refreshed in the background", "below ttl"),
    Option("shared", SHARED_URL, None, _TIER,
           "a shared tier (RedisTier) for every process configured with it; the redis extra"),
    Option("shared_secret", SHARED_SECRET, None, _SECRET,
           "the RedisTier made from shared authenticates its entries under it (the same in "
           "every process; never shown)", "with a shared URL"),
    Option("store_id", STORE_ID, None, _NAME,
           "gen_ai.memory.store.id on every span (unset: supermemory); names the store, "
           "never a user"),
    Option("freshness", FRESHNESS, True, _BOOLEAN,
           "after a write, what it changed is cached briefly and followed until indexed"),
    Option("settle_interval", SETTLE_INTERVAL, 1.0, _SECONDS,
           "entries fetched while a write is pending live 3/4 of it, then are checked or fetched"),
    Option("settle_max", SETTLE_MAX, 60.0, _SECONDS,
           "the longest a pending write is waited for (the settle window)",
           "at least settle_interval"),
    Option("openinference", OPENINFERENCE, False, _BOOLEAN,
           "also set OpenInference attributes on spans"),
    Option("trace_hits", TRACE_HITS, True, _BOOLEAN,
           "a span per cache hit (false: hits are counted in metrics only)"),
    Option("httpx", HTTPX, False, _BOOLEAN,
           "instrument() also caches plain httpx clients calling the API paths"),
    Option("semantic", SEMANTIC, None, _SEMANTIC,
           "shadow: each miss is compared with the nearest cached query of its partition; "
           "serve: also answered with it once the verdicts bound disagreement at 1% "
           "(unset: off)"),
)
# fmt: on

MEMORY_FIELDS: Final = frozenset({"max_entries", "ttl", "refresh_after", "shared"})
"""The settings of the working memory itself: with ``working_memory=`` they are that memory's."""


_FIELDS: Final = tuple(option.field for option in OPTIONS)


class Settings:
    """The configuration one ``instrument()``, ``wrap()`` or loader run uses, read-only.

    One attribute per row of :data:`OPTIONS`, which holds the defaults. Build it with
    :meth:`resolve`; two settings are equal when every value is.
    """

    __slots__ = _FIELDS
    cache: bool
    max_entries: int
    ttl: float
    refresh_after: float | None
    shared: str | SharedTier | None
    shared_secret: str | bytes | None
    store_id: str | None
    freshness: bool
    settle_interval: float
    settle_max: float
    openinference: bool
    trace_hits: bool
    httpx: bool
    semantic: SemanticReuse | None

    def __init__(self, **values: Any) -> None:
        """Every field by keyword (:meth:`resolve` checks the values)."""
        if set(values) != set(_FIELDS):
            raise TypeError(f"Settings takes exactly {', '.join(_FIELDS)}")
        for name in _FIELDS:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Settings are read-only: cannot set {name}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{o.field}={o.shown(getattr(self, o.field))}" for o in OPTIONS)
        return f"Settings({shown})"

    @classmethod
    def resolve(
        cls,
        arguments: Mapping[str, object],
        environ: Mapping[str, str] | None = None,
        *,
        memory: Any = None,
    ) -> Settings:
        """Each setting from ``arguments`` (``None``: not passed), else ``environ``, else default.

        With ``memory`` (a ``WorkingMemory`` the caller gives), the memory's own settings are
        taken from it and their variables are not read; passing one of them beside it is an
        error, as it would be silently ignored.

        Raises:
            TypeError: an argument of the wrong type, or an unknown argument.
            ValueError: a bad argument value (naming the argument) or a bad variable (naming
                the variable), ``refresh_after`` not below ``ttl``, ``settle_interval`` above
                ``settle_max``, or ``shared_secret`` without a shared URL to make a tier of.
        """
        environ = os.environ if environ is None else environ
        unknown = set(arguments) - {option.field for option in OPTIONS}
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for option in OPTIONS:
            argument = arguments.get(option.field)
            if memory is not None and option.field in MEMORY_FIELDS:
                if argument is not None and not (
                    option.field == "shared" and argument is memory.shared
                ):
                    raise ValueError(
                        f"pass {option.field}= to the WorkingMemory you give "
                        f"(WorkingMemory({option.field}=...)), not beside it"
                    )
                values[option.field] = getattr(memory, option.field)
                continue
            values[option.field] = option.value(argument, environ)
        _secret_for_a_url(values, arguments.get("shared_secret"), environ)
        settings = cls(**values)
        settings._check_together(memory is None)
        return settings

    def _check_together(self, own_memory: bool) -> None:
        refresh, ttl = self.refresh_after, self.ttl
        if own_memory and refresh is not None and refresh >= ttl:
            raise ValueError(
                f"refresh_after ({REFRESH_AFTER}) must be below ttl ({TTL}), "
                f"got {refresh} and {ttl}"
            )
        if self.settle_interval > self.settle_max:
            raise ValueError(
                f"settle_interval ({SETTLE_INTERVAL}) must not exceed settle_max ({SETTLE_MAX}), "
                f"got {self.settle_interval} and {self.settle_max}"
            )

    def changes(self, other: Settings) -> dict[str, tuple[Any, Any]]:
        """``field -> (this value, other's value)`` for every field in which the two differ."""
        return {
            name: (mine, theirs)
            for name, mine, theirs in zip(_FIELDS, self._values(), other._values(), strict=True)
            if mine != theirs
        }

    def changes_shown(self, other: Settings) -> list[str]:
        """:meth:`changes` for a log line, ``field=this (was other's)``, never a secret."""
        changed = self.changes(other)
        return [
            f"{o.field}={o.shown(changed[o.field][0])} (was {o.shown(changed[o.field][1])})"
            for o in OPTIONS
            if o.field in changed
        ]


def _secret_for_a_url(values: dict[str, Any], argument: object, environ: Mapping[str, str]) -> None:
    """``shared_secret`` is for the ``RedisTier`` the settings make from a URL: beside a ready-made
    tier (``shared=`` or the given memory's) or no tier, an argument would be silently ignored,
    and the variable is not used (that tier has its own secret, or none).

    For that URL's tier, the variable set but blank (``WM_MIDDLEWARE_SHARED_SECRET=$UNSET``) is
    refused rather than read as unset, as other blank variables are: that would leave the tier's
    entries unauthenticated while its operator believes them authenticated."""
    tier = values["shared"]
    if isinstance(tier, str):
        blank = SHARED_SECRET in environ and not environ[SHARED_SECRET].strip()
        if argument is None and blank:
            raise ValueError(
                f"{SHARED_SECRET} is set but blank: set it to the shared tier's secret, or "
                "unset it to run the tier without one"
            )
        return
    if argument is not None:
        if tier is None:
            raise ValueError(
                f"shared_secret needs a shared tier to authenticate: pass shared= a "
                f"{SCHEMES_NAMED} URL or set {SHARED_URL}"
            )
        raise ValueError(
            "shared_secret is for a shared URL, not beside a ready-made shared tier: give "
            "that tier its own secret, RedisTier(url, secret=...)"
        )
    values["shared_secret"] = None


def table() -> str:
    """The settings as a Markdown table: argument, variable, default, values, meaning."""
    rows = [
        "| Argument | Variable | Default | Values | Meaning |",
        "|---|---|---|---|---|",
    ]
    for option in OPTIONS:
        default = "unset" if option.default is None else repr(option.default)
        rows.append(
            f"| `{option.field}` | `{option.variable}` | {default} | {option.rule} "
            f"| {option.meaning} |"
        )
    return "\n".join(rows) + "\n"
