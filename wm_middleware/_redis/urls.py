"""Redis URLs: the schemes the shared tier accepts, what a usable URL is, and how a URL is shown
without its secrets.

The one place these facts live: ``RedisTier``, ``instrument(shared=...)`` (the settings) and the
CLI check a URL with :func:`checked` (which names the schemes with :data:`SCHEMES_NAMED`), and
every error, repr and log line shows a URL through :func:`masked`. Import-light on purpose: the
settings import this module without redis-py, and it imports nothing itself until a URL is
checked or masked.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from typing import Final

__all__ = ["SCHEMES", "SCHEMES_NAMED", "checked", "masked"]

SCHEMES: Final = ("redis://", "rediss://", "unix://")
"""URL schemes of a Redis / Valkey server: TCP, TLS and a Unix socket."""

SCHEMES_NAMED: Final = f"{', '.join(SCHEMES[:-1])} or {SCHEMES[-1]}"
""":data:`SCHEMES` as an error message names them: ``redis://, rediss:// or unix://``."""


def checked(url: str, name: str) -> str:
    """``url`` if the tier can use it, else a ``ValueError`` naming ``name`` (the setting or
    argument it was given as) and showing the URL :func:`masked`.

    Usable: one of :data:`SCHEMES`, a numeric port, and a database (the path of a TCP URL, or
    ``?db=``) that is a number >= 0. redis-py reads a path it cannot parse as no path at all, so
    ``redis://cache/abc`` would silently be database 0 and share entries with another
    application's tier.
    """
    shown = repr(masked(url))
    if not url.startswith(SCHEMES):
        raise ValueError(f"{name} must be a {SCHEMES_NAMED} URL, got {shown}")
    from urllib.parse import parse_qs, unquote, urlsplit  # here: only a URL given needs it

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises for a port that is not a number from 0 to 65535)
        query = parse_qs(parts.query)
    except ValueError as error:
        raise ValueError(f"{name} is not a valid URL ({error}), got {shown}") from None
    databases = [("?db=", value) for value in query.get("db", ())[:1]]
    if not databases and parts.scheme != "unix" and parts.path not in ("", "/"):
        databases.append(("path", unquote(parts.path)[1:]))
    for where, database in databases:
        if not (database.isascii() and database.isdigit()):
            raise ValueError(
                f"{name} must name its database as a number >= 0 (redis://host:6379/0), "
                f"got {database!r} as its {where} in {shown}"
            )
    return url


_USERINFO: Final = r"(?<=//)([^@/?#]*?)(:[^@/?#]*)?@"
_QUERY_SECRET: Final = r"(?i)([?&](?:password|username)=)[^&#]*"


def masked(url: str) -> str:
    """``url`` with its password (and a ``?password=`` parameter) replaced by ``***``.

    >>> masked("redis://app:s3cret@cache:6379/0")
    'redis://app:***@cache:6379/0'
    """
    import re  # here: only a URL shown in a message or a repr needs it (re caches the patterns)

    shown = re.sub(_USERINFO, lambda m: f"{m.group(1)}:***@" if m.group(2) else "***@", url)
    return re.sub(_QUERY_SECRET, r"\1***", shown)
