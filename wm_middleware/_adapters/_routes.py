"""The Supermemory HTTP API as one table: what every route is to the working memory.

A fact about Supermemory, stated once. The 3.x and 5.x SDK adapters and the httpx transport all
classify a call by looking up its (method, path) here; a test checks the table against the
emulator's routes.

Each :class:`Route` names its API generation, HTTP method, path template (``{name}`` stands for one
path segment), the operation (low-cardinality, for spans and metrics), its kind and its scope rule:

* ``read``: cacheable; its scopes are the container tags in its body (3.x) or its namespace (5.x);
* ``write``: runs, then drops the scopes it names (see :data:`Scope`);
* ``pass``: neither cached nor invalidating (GETs, status polls, reads of state that changes
  outside this process such as connections, previews).

A batch or bulk write also names the body list of the records it attempts (``records``), which
:func:`attempted` counts for ``gen_ai.memory.record.count``.

A non-GET call under the API that the table does not know is a write of the whole tenant: dropping
too much costs a refetch, keeping a stale answer would be a bug.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Literal
from urllib.parse import unquote

from ._requests import tags_in, write_scopes

__all__ = ["ROUTES", "Match", "Route", "Scope", "attempted", "find", "find_in", "written"]

Kind = Literal["read", "write", "pass"]
Scope = Literal["tags", "items", "tenant", "namespace", "namespaces", "none"]
"""How a route names what it reads or changes.

* ``tags``: the container tags in the body (``containerTag``/``containerTags``); a write naming
  none changes the whole tenant;
* ``items``: ``tags`` plus the tags of every item of ``documents`` (batch add);
* ``tenant``: always the whole tenant (org-wide settings, or a document addressed by id whose
  current tags are unknown here);
* ``namespace``: the ``{ns}`` path segment (5.x);
* ``namespaces``: the namespace plus the ``moveTo`` query parameter (namespace delete);
* ``none``: nothing (pass-through routes).
"""


@dataclass(frozen=True, slots=True)
class Route:
    """One route of the Supermemory API."""

    generation: Literal[3, 5]
    method: str  # upper case
    template: str  # "/v4/search", "/ns/{ns}/document/{id}"
    operation: str
    kind: Kind
    scope: Scope
    preview: str | None = None  # a body flag that makes this write a read-only preview
    records: str | None = None  # the body list whose items a batch or bulk write attempts

    @property
    def specificity(self) -> int:
        """Literal segments: a literal beats a ``{name}`` when both match a path."""
        return sum(not part.startswith("{") for part in self.template.split("/"))


def _r(gen: Literal[3, 5], method: str, template: str, op: str, kind: Kind, scope: Scope) -> Route:
    return Route(gen, method, template, op, kind, scope)


def _batch(
    gen: Literal[3, 5], method: str, template: str, op: str, scope: Scope, records: str
) -> Route:
    """A write of many records at once, listed in the body under ``records``."""
    return Route(gen, method, template, op, "write", scope, records=records)


ROUTES: Final[tuple[Route, ...]] = (
    # -- 3.x (Stainless SDK) --------------------------------------------------------------------
    _r(3, "POST", "/v4/search", "search.memories", "read", "tags"),
    _r(3, "POST", "/v3/search", "search.execute", "read", "tags"),  # or search.documents
    _r(3, "POST", "/v4/profile", "profile", "read", "tags"),
    _r(3, "POST", "/v3/documents/list", "documents.list", "read", "tags"),
    _r(3, "GET", "/v3/documents/processing", "documents.list_processing", "pass", "none"),
    _r(3, "GET", "/v3/documents/{id}", "documents.get", "pass", "none"),
    _r(3, "GET", "/v3/settings", "settings.get", "pass", "none"),
    _r(3, "POST", "/v3/connections/list", "connections.list", "pass", "none"),
    _r(3, "POST", "/v3/connections/{id}/connection", "connections.get_by_tag", "pass", "none"),
    _r(3, "POST", "/v3/connections/{id}/documents", "connections.list_documents", "pass", "none"),
    _r(3, "POST", "/v3/documents", "documents.add", "write", "tags"),
    _batch(3, "POST", "/v3/documents/batch", "documents.batch_add", "items", "documents"),
    _r(3, "POST", "/v3/documents/file", "documents.upload_file", "write", "tags"),
    _batch(3, "DELETE", "/v3/documents/bulk", "documents.delete_bulk", "tags", "ids"),
    # ``update`` may carry the document's NEW tags; the old ones are unknown here.
    _r(3, "PATCH", "/v3/documents/{id}", "documents.update", "write", "tenant"),
    _r(3, "DELETE", "/v3/documents/{id}", "documents.delete", "write", "tenant"),
    _r(3, "DELETE", "/v4/memories", "memories.forget", "write", "tags"),
    _r(3, "PATCH", "/v4/memories", "memories.update_memory", "write", "tags"),
    _r(3, "PATCH", "/v3/settings", "settings.update", "write", "tenant"),
    _r(3, "POST", "/v3/connections/{provider}", "connections.create", "write", "tags"),
    _r(3, "POST", "/v3/connections/{id}/configure", "connections.configure", "write", "tenant"),
    _r(3, "POST", "/v3/connections/{provider}/import", "connections.import", "write", "tags"),
    _r(3, "DELETE", "/v3/connections/{id}", "connections.delete", "write", "tags"),
    # Older 3.x (3.16) aliases of the document routes.
    _r(3, "POST", "/v3/memories", "memories.add", "write", "tags"),
    _r(3, "POST", "/v3/memories/file", "memories.upload_file", "write", "tags"),
    _r(3, "PATCH", "/v3/memories/{id}", "memories.update", "write", "tenant"),
    _r(3, "DELETE", "/v3/memories/{id}", "memories.delete", "write", "tenant"),
    _r(3, "POST", "/v3/memories/list", "memories.list", "pass", "none"),
    # -- 5.x (Fern SDK) -------------------------------------------------------------------------
    _r(5, "POST", "/ns/{ns}/search", "search", "read", "namespace"),
    _r(5, "POST", "/ns/{ns}/profile", "profile", "read", "namespace"),
    _r(5, "POST", "/ns/{ns}/list/{type}", "list", "read", "namespace"),
    _r(5, "POST", "/ns/{ns}/list/documents/memory-counts", "list.memory_counts", "pass", "none"),
    _r(5, "POST", "/feedback", "feedback", "pass", "none"),
    _r(5, "GET", "/ns", "namespaces.list", "pass", "none"),
    _r(5, "GET", "/ns/{ns}", "namespaces.get", "pass", "none"),
    _r(5, "GET", "/ns/{ns}/document/{id}", "documents.get", "pass", "none"),
    _r(5, "GET", "/ns/{ns}/profile/buckets", "profiles.get_buckets", "pass", "none"),
    _r(5, "GET", "/ns/{ns}/memories/{id}", "memories.get", "pass", "none"),
    _r(5, "GET", "/ns/{ns}/connectors", "connectors.list", "pass", "none"),
    _r(5, "GET", "/connectors", "connectors.list_all", "pass", "none"),
    _r(5, "GET", "/organization", "organization.get", "pass", "none"),
    _r(5, "POST", "/ns/{ns}/document", "add", "write", "namespace"),
    _batch(5, "DELETE", "/ns/{ns}/document", "documents.delete", "namespace", "ids"),
    _batch(5, "POST", "/ns/{ns}/document/batch", "documents.batch_add", "namespace", "documents"),
    _r(5, "POST", "/ns/{ns}/document/file", "documents.upload_file", "write", "namespace"),
    _r(
        5,
        "POST",
        "/ns/{ns}/document/file/{id}",
        "documents.replace_with_file",
        "write",
        "namespace",
    ),
    _r(5, "PATCH", "/ns/{ns}/document/file/{id}", "documents.update_file", "write", "namespace"),
    _r(5, "PATCH", "/ns/{ns}/document/{id}", "documents.update", "write", "namespace"),
    _r(5, "PUT", "/ns/{ns}/profile/buckets", "profiles.set_buckets", "write", "namespace"),
    _r(5, "DELETE", "/ns/{ns}/profile/buckets", "profiles.delete_buckets", "write", "namespace"),
    _batch(5, "DELETE", "/ns/{ns}/memories", "memories.forget", "namespace", "ids"),
    Route(
        5,
        "DELETE",
        "/ns/{ns}/memories/semantic",
        "memories.forget_matching",
        "write",
        "namespace",
        preview="dryRun",
    ),
    _r(5, "PATCH", "/ns/{ns}", "namespaces.update", "write", "namespace"),
    _r(5, "DELETE", "/ns/{ns}", "namespaces.delete", "write", "namespaces"),
    _r(5, "PATCH", "/organization", "organization.update", "write", "tenant"),
    _r(5, "POST", "/ns/{ns}/connectors", "connectors.create", "write", "namespace"),
    _r(5, "PATCH", "/ns/{ns}/connectors/{id}", "connectors.update", "write", "namespace"),
    _r(5, "DELETE", "/ns/{ns}/connectors/{id}", "connectors.delete", "write", "namespace"),
    _r(5, "POST", "/ns/{ns}/connectors/{id}/sync", "connectors.sync", "write", "namespace"),
)

# The first segment of every API path: a call under one of these that the table does not know is
# still a call to the API (a write of the whole tenant unless it is a GET).
_API_ROOTS: Final = frozenset({"v3", "v4", "ns", "organization", "connectors", "feedback"})
_QUIET: Final = frozenset({"GET", "HEAD", "OPTIONS"})
UNKNOWN_WRITE: Final = Route(3, "POST", "", "write", "write", "tenant")


def _compile(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template))


_BY_METHOD: Final[dict[str, list[tuple[re.Pattern[str], Route]]]] = {}
for _route in sorted(ROUTES, key=lambda route: -route.specificity):
    _BY_METHOD.setdefault(_route.method, []).append((_compile(_route.template), _route))


@dataclass(frozen=True, slots=True)
class Match:
    """A route and the namespace its path names (5.x), if any."""

    route: Route
    namespace: str | None = None


@lru_cache(maxsize=4096)
def find(method: str, path: str) -> Match | None:
    """The route of ``method path`` (``path`` relative to the API root, e.g. ``/v4/search``).

    ``None`` for a GET/HEAD/OPTIONS the table does not know and for paths outside the API;
    :data:`UNKNOWN_WRITE` for any other method on an unknown path under the API.
    """
    method = method.upper()
    path = "/" + path.strip("/")
    for pattern, route in _BY_METHOD.get(method, ()):
        found = pattern.fullmatch(path)
        if found is not None:
            namespace = found.groupdict().get("ns")
            return Match(route, None if namespace is None else unquote(namespace))
    if method in _QUIET or path.split("/", 2)[1] not in _API_ROOTS:
        return None
    return Match(UNKNOWN_WRITE)


@lru_cache(maxsize=4096)
def find_in(method: str, path: str) -> Match | None:
    """The known route of a full URL path with any base path in front (``/api/v4/search``).

    The leftmost position that is a known route wins, so a namespace called ``v3`` stays a
    namespace. Unknown paths are ``None``: a plain httpx client may be calling anything.
    """
    parts = path.strip("/").split("/")
    for start in range(len(parts)):
        found = find(method, "/".join(parts[start:]))
        if found is not None and found.route is not UNKNOWN_WRITE:
            return found
    return None


# -- scopes ---------------------------------------------------------------------------------------
def _json_list(value: str) -> list[str]:
    # Form fields (file uploads) carry ``containerTags`` as a JSON array in a string.
    if value.startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        if isinstance(parsed, list):
            return [item for item in parsed if isinstance(item, str)]
    return [value]


def tags_of(body: object) -> list[str]:
    """The 3.x container tags ``body`` names (``containerTag``, ``containerTags``)."""
    if not isinstance(body, Mapping):
        return []
    return [
        tag for value in tags_in(body, "containerTag", "containerTags") for tag in _json_list(value)
    ]


def read_tags(match: Match, body: object) -> list[str]:
    """What a read is scoped by: its namespace (5.x) or the tags in its body (3.x)."""
    if match.namespace is not None:
        return [match.namespace]
    return tags_of(body)


def written(
    match: Match, tenant: tuple[str, str], body: object, params: Mapping[str, Any] | None = None
) -> tuple[Hashable, ...] | None:
    """The scopes a write drops, or ``None`` when this call is not a write (a dry-run preview)."""
    route = match.route
    if route.preview is not None and isinstance(body, Mapping) and body.get(route.preview) is True:
        return None
    scope = route.scope
    tags: list[str] = []
    if scope in ("namespace", "namespaces") and match.namespace is not None:
        tags.append(match.namespace)
        target = (params or {}).get("moveTo") if scope == "namespaces" else None
        if target is not None:
            tags.append(str(target).lower() if isinstance(target, bool) else str(target))
    elif scope in ("tags", "items"):
        tags = tags_of(body)
        items = body.get("documents") if isinstance(body, Mapping) else None
        if scope == "items" and isinstance(items, list):
            for item in items:
                own = tags_of(item)
                if not own and not tags:
                    return write_scopes(tenant, ())  # an item lands in the default container
                tags.extend(own)
    return write_scopes(tenant, tags)


def attempted(match: Match, body: object) -> int | None:
    """Records a batch or bulk write attempts: the length of its body's list of them.

    ``None`` for any other route, and for a bulk write that names its records another way (a
    3.x ``delete_bulk`` by container tags or file path deletes an unknown number).
    """
    field = match.route.records
    if field is None or not isinstance(body, Mapping):
        return None
    items = body.get(field)
    return len(items) if isinstance(items, (list, tuple)) else None
