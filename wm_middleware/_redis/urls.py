"""Redis URLs: the schemes the shared tier accepts, and how a URL is shown without its secrets.

The one place these facts live: ``RedisTier``, ``instrument(shared=...)`` (the settings) and the
CLI take their schemes from :data:`SCHEMES` and name them with :data:`SCHEMES_NAMED`, and every
error, repr and log line shows a URL through :func:`masked`. Import-light on purpose: the
settings import this module without redis-py, and it imports nothing itself until a URL is
masked.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from typing import Final

__all__ = ["SCHEMES", "SCHEMES_NAMED", "masked"]

SCHEMES: Final = ("redis://", "rediss://", "unix://")
"""URL schemes of a Redis / Valkey server: TCP, TLS and a Unix socket."""

SCHEMES_NAMED: Final = f"{', '.join(SCHEMES[:-1])} or {SCHEMES[-1]}"
""":data:`SCHEMES` as an error message names them: ``redis://, rediss:// or unix://``."""

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
