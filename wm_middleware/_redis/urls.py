"""Redis URLs: the schemes the shared tier accepts, and how a URL is shown without its secrets.

The one place these facts live: ``RedisTier``, ``instrument(shared=...)`` and the CLI take their
schemes from :data:`SCHEMES`, and every error, repr and log line shows a URL through
:func:`masked`.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["SCHEMES", "masked"]

SCHEMES: Final = ("redis://", "rediss://", "unix://")
"""URL schemes of a Redis / Valkey server: TCP, TLS and a Unix socket."""

_USERINFO: Final = re.compile(r"(?<=//)([^@/?#]*?)(:[^@/?#]*)?@")
_QUERY_SECRET: Final = re.compile(r"(?i)([?&](?:password|username)=)[^&#]*")


def masked(url: str) -> str:
    """``url`` with its password (and a ``?password=`` parameter) replaced by ``***``.

    >>> masked("redis://app:s3cret@cache:6379/0")
    'redis://app:***@cache:6379/0'
    """
    shown = _USERINFO.sub(lambda m: f"{m.group(1)}:***@" if m.group(2) else "***@", url)
    return _QUERY_SECRET.sub(r"\1***", shown)
