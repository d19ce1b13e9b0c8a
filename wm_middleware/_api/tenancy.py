"""Tenants, scopes and canonical request text: what keeps one tenant's answer from another.

A tenant is the pair (base URL, API key); only a fingerprint of the key is kept, never the key.
Within a tenant, a container tag (3.x) or namespace (5.x) is a scope; a write drops the scopes it
names, or the whole tenant when it names none.

Scopes are plain tuples: the memory compares them by value and the shared tier spells them in
Redis as JSON lists. Their three shapes are :class:`TenantScope`'s fields, in order, and
:meth:`TenantScope.parse` is the one reading of a tenant out of a scope (the shared tier names its
keys after it):

* ``("tenant", tenant)``: everything of a tenant;
* ``("tag", tenant, tag)``: reads naming container tag / namespace ``tag`` (a namespace as
  :func:`namespace_tag` spells it, on the read's side and the write's alike);
* ``("untagged", tenant)``: reads naming none (they see the default container).

A read also carries its normalised query text as a scope of its own (a plain ``str``), so
``WorkingMemory.invalidate("that query")`` reaches adapter entries too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Mapping
from functools import lru_cache
from typing import Any, Final, Literal, NamedTuple
from urllib.parse import unquote

from .._core import normalise_query

__all__ = [
    "Tenant",
    "TenantScope",
    "canonical",
    "fingerprint",
    "namespace_tag",
    "read_scopes",
    "server_of",
    "tags_in",
    "tenant_of",
    "write_scopes",
]

Tenant = tuple[str, str]
"""(base URL without trailing slash, fingerprint of the API key)."""

ScopeKind = Literal["tenant", "tag", "untagged"]


class TenantScope(NamedTuple):
    """The typed reading of a scope tuple; :meth:`plain` is the tuple itself, as stored."""

    kind: ScopeKind
    tenant: Tenant
    tag: str | None = None

    def plain(self) -> tuple[Hashable, ...]:
        """The scope as the memory and the shared tier hold it: a plain tuple."""
        if self.tag is None:
            return (self.kind, self.tenant)
        return (self.kind, self.tenant, self.tag)

    @classmethod
    def parse(cls, scope: object) -> TenantScope | None:
        """The :class:`TenantScope` a scope is, or ``None`` for any other scope (a query text, a
        caller's own tuple).

        Read by position, so any tuple of the same shape (a ``NamedTuple`` too) parses the same
        way, as it is spelled the same in Redis.
        """
        if not isinstance(scope, tuple) or len(scope) not in (2, 3):
            return None
        kind, tenant = scope[0], scope[1]
        tag = scope[2] if len(scope) == 3 else None
        if kind not in ("tenant", "tag", "untagged") or (kind == "tag") != (tag is not None):
            return None
        if not isinstance(tenant, tuple) or len(tenant) != 2:
            return None
        if not all(type(part) is str for part in tenant) or not isinstance(tag, (str, type(None))):
            return None
        return cls(kind, (tenant[0], tenant[1]), tag)


NO_KEY: Final = "-"  # the fingerprint of no key at all


def fingerprint(api_key: str | None) -> str:
    """A short, one-way fingerprint of an API key (never the key itself).

    Computed on every call and kept nowhere, so this module holds no API key: a memo would have
    to be keyed by the keys it hides (SHA-256 of a key costs well under a microsecond).
    """
    if not api_key:
        return NO_KEY
    return hashlib.sha256(api_key.encode()).hexdigest()[:20]


def tenant_of(base_url: object, api_key: str | None) -> Tenant:
    """The tenant of a request: its base URL without trailing slash, and its key's fingerprint."""
    return (str(base_url).rstrip("/"), fingerprint(api_key))


@lru_cache(maxsize=256)
def server_of(base_url: str) -> tuple[str, int | None]:
    """``server.address`` and ``server.port`` of a base URL: the one reading of them.

    The scheme's port when the URL names none; ``("", None)`` for what is not a URL. Cached: a
    client's base URL is read once, not per call.
    """
    import httpx

    try:
        url = httpx.URL(base_url)
    except Exception:
        return ("", None)
    port = url.port
    if port is None:
        port = {"https": 443, "http": 80}.get(url.scheme)
    return (url.host, port)


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces; non-JSON values by ``str``. The one spelling."""
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


def namespace_tag(namespace: object) -> str:
    """The tag of a 5.x namespace: the name the API reads out of the request's path.

    The one spelling of a namespace in a scope, for a read's namespace argument and a write's
    ``{ns}`` path segment alike. The SDK puts its argument into the path as it is
    (``encode_path_param``: ``str``, booleans lower case); httpx percent-encodes what a path
    cannot hold and leaves ``%XX`` sequences as they are; the API decodes the segment. So
    ``team%20a`` and ``team a`` name one namespace, ``team a``, and so does a path's ``team%20a``.
    """
    if isinstance(namespace, bool):
        return "true" if namespace else "false"
    return unquote(str(namespace))


def read_scopes(
    tenant: Tenant, tags: Iterable[str], query: str | None = None
) -> tuple[Hashable, ...]:
    """Scopes of a read: its tenant, each tag it names (or 'untagged'), and its query."""
    scopes: list[Hashable] = [TenantScope("tenant", tenant).plain()]
    tag_list = list(tags)
    if tag_list:
        scopes.extend(TenantScope("tag", tenant, tag).plain() for tag in tag_list)
    else:
        scopes.append(TenantScope("untagged", tenant).plain())
    if isinstance(query, str) and query.strip():
        scopes.append(normalise_query(query))
    return tuple(scopes)


def write_scopes(tenant: Tenant, tags: Iterable[str]) -> tuple[Hashable, ...]:
    """Scopes a write invalidates: the tags it names plus untagged reads, or the whole tenant."""
    tag_list = list(tags)
    if not tag_list:
        return (TenantScope("tenant", tenant).plain(),)
    return (
        TenantScope("untagged", tenant).plain(),
        *(TenantScope("tag", tenant, tag).plain() for tag in tag_list),
    )
