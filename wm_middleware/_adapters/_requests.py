"""What the adapters share about a request: tenant fingerprints, canonical bodies, scopes.

A cache entry must never serve one tenant's answer to another. A tenant is the pair (base URL,
API key); only a fingerprint of the key is kept, never the key. Within a tenant, a container tag
(3.x) or namespace (5.x) is a scope; a write drops the scopes it names, or the whole tenant when
it names none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from .._core import normalise_query

__all__ = [
    "canonical",
    "read_scopes",
    "server_of",
    "tenant_of",
    "write_scopes",
]

_FINGERPRINTS: dict[str, str] = {}


def fingerprint(api_key: str | None) -> str:
    """A short, one-way fingerprint of an API key (never the key itself)."""
    if not api_key:
        return "-"
    found = _FINGERPRINTS.get(api_key)
    if found is None:
        found = hashlib.sha256(api_key.encode()).hexdigest()[:20]
        if len(_FINGERPRINTS) > 1024:
            _FINGERPRINTS.clear()
        _FINGERPRINTS[api_key] = found
    return found


def tenant_of(base_url: object, api_key: str | None) -> tuple[str, str]:
    """The tenant of a request: its base URL without trailing slash, and its key's fingerprint."""
    return (str(base_url).rstrip("/"), fingerprint(api_key))


def server_of(base_url: object) -> tuple[str, int | None]:
    """``server.address`` and ``server.port`` of a base URL."""
    import httpx

    try:
        url = httpx.URL(str(base_url))
    except Exception:
        return ("", None)
    port = url.port
    if port is None:
        port = {"https": 443, "http": 80}.get(url.scheme)
    return (url.host, port)


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces; non-JSON values by ``str``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def tags_in(body: Mapping[str, Any] | None, *names: str) -> list[str]:
    """Every container tag named in ``body`` under ``names`` (a str or a list of str each)."""
    found: list[str] = []
    if not body:
        return found
    for name in names:
        value = body.get(name)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, str))
    return found


def read_scopes(
    tenant: tuple[str, str], tags: Iterable[str], query: str | None = None
) -> tuple[Hashable, ...]:
    """Scopes of a read: its tenant, each tag it names (or 'untagged'), and its query."""
    scopes: list[Hashable] = [("tenant", tenant)]
    tag_list = list(tags)
    if tag_list:
        scopes.extend(("tag", tenant, tag) for tag in tag_list)
    else:
        scopes.append(("untagged", tenant))
    if isinstance(query, str) and query.strip():
        # Lets ``WorkingMemory.invalidate("that query")`` reach adapter entries too.
        scopes.append(normalise_query(query))
    return tuple(scopes)


def write_scopes(tenant: tuple[str, str], tags: Iterable[str]) -> tuple[Hashable, ...]:
    """Scopes a write invalidates: the tags it names plus untagged reads, or the whole tenant."""
    tag_list = list(tags)
    if not tag_list:
        return (("tenant", tenant),)
    return (("untagged", tenant), *(("tag", tenant, tag) for tag in tag_list))
