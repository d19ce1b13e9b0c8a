"""The Supermemory HTTP API as one table: every per-route fact, stated once.

The 3.x and 5.x SDK adapters and the httpx transport classify a call by looking up its
(method, path) here; a test checks the table against the emulator's routes. Each :class:`Route`
names:

* ``generation`` (3: Stainless SDK, 5: Fern SDK), ``method``, ``template`` (``{name}`` stands for
  one path segment) and ``operation`` (low-cardinality, for spans and metrics);
* ``kind``: ``read`` (cacheable), ``write`` (runs, then drops the scopes it names) or ``pass``
  (neither cached nor invalidating: GETs, status polls, state that changes outside this process);
* ``scope``: how it names what it reads or changes (see :data:`Scope`);
* ``semconv``: the ``gen_ai.operation.name`` of its span (``search_memory``, ``upsert_memory``,
  ``update_memory``, ``delete_memory``); ``None`` for pass-through routes;
* ``query``: the body field holding a read's query text (``q`` in 3.x, ``query`` in 5.x);
* ``record_id``: where a call naming one record names it: ``"{id}"`` a path segment, ``"id"`` a
  body field;
* ``records``: the body list whose items a batch or bulk write attempts; ``single``: a write of
  one record (its count is 1). Neither: the count is unknown;
* ``preview``: a body flag that makes a write a read-only preview (``dryRun``);
* ``results``: where a read's answer lists its records (``gen_ai.memory.record.count``): a
  tuple of alternatives, each a tuple of dotted paths in the API's JSON names whose lists are
  summed; the first alternative that finds a list counts (:meth:`Route.records_in`);
* ``indexed``: a read whose answer holds indexed documents only (search, profile): a document
  still being indexed is in no answer yet. A list of documents shows them at once (``False``);
* ``creates``: a write that adds new documents, and the body field (of the body, or of each
  item of a batch) by which it would name an existing one instead (and change it at once).

A non-GET call under the API that the table does not know is a write of the whole tenant
(:data:`UNKNOWN_WRITE`): dropping too much costs a refetch, keeping a stale answer would be a bug.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from typing import Any, Final, Literal
from urllib.parse import unquote

from .tenancy import Tenant, namespace_tag, tags_in, write_scopes

__all__ = [
    "QUIET_METHODS",
    "RESPONSE_OPERATIONS",
    "ROUTES",
    "UNKNOWN_WRITE",
    "Match",
    "Route",
    "Scope",
    "attempted",
    "compile_template",
    "creates_only",
    "find",
    "find_in",
    "query_of",
    "read_tags",
    "record_id_of",
    "route_named",
    "written",
]

Generation = Literal[3, 5]
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

SEARCH: Final = "search_memory"
UPSERT: Final = "upsert_memory"  # add: may create or merge
UPDATE: Final = "update_memory"  # a known, existing record
DELETE: Final = "delete_memory"


@dataclass(frozen=True, slots=True)
class Route:
    """One route of the Supermemory API (see the module documentation for each field)."""

    generation: Generation
    method: str  # upper case
    template: str  # "/v4/search", "/ns/{ns}/document/{id}"
    operation: str
    kind: Kind
    scope: Scope
    semconv: str | None = None
    query: str | None = None
    record_id: str | None = None
    records: str | None = None
    single: bool = False
    preview: str | None = None
    results: tuple[tuple[str, ...], ...] = ()
    indexed: bool = False
    creates: str | None = None

    def records_in(self, answer: object) -> int | None:
        """The records a read's ``answer`` holds, by :attr:`results`; ``None`` when it lists none.

        ``answer`` is the API's JSON (dicts and lists) or a model of it (the SDKs' and the
        middleware's: attributes by the snake_case of the JSON names).
        """
        for alternative in self.results:
            lists = [
                found for found in map(partial(_at, answer), alternative) if type(found) is list
            ]
            if lists:
                return sum(map(len, lists))
        return None

    @property
    def specificity(self) -> int:
        """Literal segments: a literal beats a ``{name}`` when both match a path."""
        return sum(not part.startswith("{") for part in self.template.split("/"))

    @property
    def deletes(self) -> bool:
        """True for a write that removes what it names."""
        return self.semconv == DELETE


# -- the table's constructors: one per kind, so each row reads as the facts it states ----------
def _scope(gen: Generation) -> Scope:
    """The scope of a ``gen`` route whose row states none: the body's tags (3.x), the ``{ns}``
    segment (5.x)."""
    return "tags" if gen == 3 else "namespace"


def _read(
    gen: Generation,
    template: str,
    op: str,
    query: str | None,
    *results: tuple[str, ...],
    indexed: bool = True,
) -> Route:
    return Route(
        gen,
        "POST",
        template,
        op,
        "read",
        _scope(gen),
        SEARCH,
        query=query,
        results=results,
        indexed=indexed,
    )


def _pass(gen: Generation, method: str, template: str, op: str) -> Route:
    return Route(gen, method, template, op, "pass", "none")


def _write(
    gen: Generation,
    method: str,
    template: str,
    op: str,
    semconv: str,
    *,
    scope: Scope | None = None,
    record_id: str | None = None,
    records: str | None = None,
    single: bool = True,
    preview: str | None = None,
    creates: str | None = None,
) -> Route:
    return Route(
        gen,
        method,
        template,
        op,
        "write",
        _scope(gen) if scope is None else scope,
        semconv,
        record_id=record_id,
        records=records,
        single=single and records is None,
        preview=preview,
        creates=creates,
    )


@lru_cache(maxsize=64)
def _parts(path: str) -> tuple[tuple[str, str], ...]:
    """Each part of a dotted JSON path: its JSON name and the model attribute of that name."""
    return tuple((part, re.sub(r"(?<!^)(?=[A-Z])", "_", part).lower()) for part in path.split("."))


def _at(value: object, path: str) -> object:
    for name, attribute in _parts(path):
        value = value.get(name) if isinstance(value, Mapping) else getattr(value, attribute, None)
        if value is None:
            return None
    return value


def _by_id(gen: Generation, method: str, template: str, op: str, semconv: str) -> Route:
    """A write of the one record the ``{id}`` segment names. In 3.x that record's current tags
    are unknown here (an ``update`` may carry its NEW ones): it changes the whole tenant."""
    scope: Scope = "tenant" if gen == 3 else "namespace"
    return _write(gen, method, template, op, semconv, scope=scope, record_id="{id}")


_PROFILE: Final = ("profile.static", "profile.dynamic")  # a profile's two lists of facts

ROUTES: Final[tuple[Route, ...]] = (
    # -- 3.x (Stainless SDK) --------------------------------------------------------------------
    _read(3, "/v4/search", "search.memories", "q", ("results",)),
    # or search.documents: RESPONSE_OPERATIONS
    _read(3, "/v3/search", "search.execute", "q", ("results",)),
    _read(3, "/v4/profile", "profile", "q", ("searchResults.results",), _PROFILE),
    _read(3, "/v3/documents/list", "documents.list", None, ("memories",), indexed=False),
    _pass(3, "GET", "/v3/documents/processing", "documents.list_processing"),
    _pass(3, "GET", "/v3/documents/{id}", "documents.get"),
    _pass(3, "GET", "/v3/settings", "settings.get"),
    _pass(3, "POST", "/v3/connections/list", "connections.list"),
    _pass(3, "POST", "/v3/connections/{id}/connection", "connections.get_by_tag"),
    _pass(3, "POST", "/v3/connections/{id}/documents", "connections.list_documents"),
    _write(3, "POST", "/v3/documents", "documents.add", UPSERT, creates="customId"),
    _write(
        3,
        "POST",
        "/v3/documents/batch",
        "documents.batch_add",
        UPSERT,
        scope="items",
        records="documents",
        creates="customId",
    ),
    _write(3, "POST", "/v3/documents/file", "documents.upload_file", UPSERT),
    _write(3, "DELETE", "/v3/documents/bulk", "documents.delete_bulk", DELETE, records="ids"),
    _by_id(3, "PATCH", "/v3/documents/{id}", "documents.update", UPDATE),
    _by_id(3, "DELETE", "/v3/documents/{id}", "documents.delete", DELETE),
    _write(3, "DELETE", "/v4/memories", "memories.forget", DELETE, record_id="id"),
    _write(3, "PATCH", "/v4/memories", "memories.update_memory", UPDATE, record_id="id"),
    _write(3, "PATCH", "/v3/settings", "settings.update", UPDATE, scope="tenant", single=False),
    _write(3, "POST", "/v3/connections/{provider}", "connections.create", UPSERT, single=False),
    _write(
        3,
        "POST",
        "/v3/connections/{id}/configure",
        "connections.configure",
        UPSERT,
        scope="tenant",
        single=False,
    ),
    _write(
        3, "POST", "/v3/connections/{provider}/import", "connections.import", UPSERT, single=False
    ),
    _write(3, "DELETE", "/v3/connections/{id}", "connections.delete", DELETE, single=False),
    # Older 3.x (3.16) aliases of the document routes.
    _write(3, "POST", "/v3/memories", "memories.add", UPSERT, creates="customId"),
    _write(3, "POST", "/v3/memories/file", "memories.upload_file", UPSERT),
    _by_id(3, "PATCH", "/v3/memories/{id}", "memories.update", UPDATE),
    _by_id(3, "DELETE", "/v3/memories/{id}", "memories.delete", DELETE),
    _pass(3, "POST", "/v3/memories/list", "memories.list"),
    # -- 5.x (Fern SDK) -------------------------------------------------------------------------
    _read(5, "/ns/{ns}/search", "search", "query", ("results",)),
    _read(5, "/ns/{ns}/profile", "profile", None, ("results",), _PROFILE),
    _read(
        5, "/ns/{ns}/list/{type}", "list", None, ("documents", "chunks", "memories"), indexed=False
    ),
    _pass(5, "POST", "/ns/{ns}/list/documents/memory-counts", "list.memory_counts"),
    _pass(5, "POST", "/feedback", "feedback"),
    _pass(5, "GET", "/ns", "namespaces.list"),
    _pass(5, "GET", "/ns/{ns}", "namespaces.get"),
    _pass(5, "GET", "/ns/{ns}/document/{id}", "documents.get"),
    _pass(5, "GET", "/ns/{ns}/profile/buckets", "profiles.get_buckets"),
    _pass(5, "GET", "/ns/{ns}/memories/{id}", "memories.get"),
    _pass(5, "GET", "/ns/{ns}/connectors", "connectors.list"),
    _pass(5, "GET", "/connectors", "connectors.list_all"),
    _pass(5, "GET", "/organization", "organization.get"),
    _write(5, "POST", "/ns/{ns}/document", "add", UPSERT, creates="id"),
    _write(5, "DELETE", "/ns/{ns}/document", "documents.delete", DELETE, records="ids"),
    _write(
        5,
        "POST",
        "/ns/{ns}/document/batch",
        "documents.batch_add",
        UPSERT,
        records="documents",
        creates="id",
    ),
    _write(5, "POST", "/ns/{ns}/document/file", "documents.upload_file", UPSERT),
    _by_id(5, "POST", "/ns/{ns}/document/file/{id}", "documents.replace_with_file", UPSERT),
    _by_id(5, "PATCH", "/ns/{ns}/document/file/{id}", "documents.update_file", UPDATE),
    _by_id(5, "PATCH", "/ns/{ns}/document/{id}", "documents.update", UPDATE),
    _write(5, "PUT", "/ns/{ns}/profile/buckets", "profiles.set_buckets", UPSERT),
    _write(5, "DELETE", "/ns/{ns}/profile/buckets", "profiles.delete_buckets", DELETE),
    _write(5, "DELETE", "/ns/{ns}/memories", "memories.forget", DELETE, records="ids"),
    _write(
        5,
        "DELETE",
        "/ns/{ns}/memories/semantic",
        "memories.forget_matching",
        DELETE,
        preview="dryRun",
        single=False,
    ),
    _write(5, "PATCH", "/ns/{ns}", "namespaces.update", UPDATE, single=False),
    _write(5, "DELETE", "/ns/{ns}", "namespaces.delete", DELETE, scope="namespaces", single=False),
    _write(
        5, "PATCH", "/organization", "organization.update", UPDATE, scope="tenant", single=False
    ),
    _write(5, "POST", "/ns/{ns}/connectors", "connectors.create", UPSERT),
    _by_id(5, "PATCH", "/ns/{ns}/connectors/{id}", "connectors.update", UPDATE),
    _by_id(5, "DELETE", "/ns/{ns}/connectors/{id}", "connectors.delete", DELETE),
    _by_id(5, "POST", "/ns/{ns}/connectors/{id}/sync", "connectors.sync", UPSERT),
)

UNKNOWN_WRITE: Final = Route(3, "POST", "", "write", "write", "tenant", UPSERT)

# 3.x: the same path and body serve two SDK methods with two response types; the response type
# (``cast_to``) names the operation.
RESPONSE_OPERATIONS: Final[dict[tuple[str, str], str]] = {
    ("search.execute", "SearchDocumentsResponse"): "search.documents",
    ("documents.add", "AddResponse"): "add",
    ("connections.delete", "ConnectionDeleteByIDResponse"): "connections.delete_by_id",
    ("connections.delete", "ConnectionDeleteByProviderResponse"): "connections.delete_by_provider",
}

# The first segment of every API path: a call under one of these that the table does not know is
# still a call to the API (a write of the whole tenant unless it is a GET).
_API_ROOTS: Final = frozenset({"v3", "v4", "ns", "organization", "connectors", "feedback"})
QUIET_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that never change anything: unknown ones pass through."""


@dataclass(frozen=True, slots=True)
class PathTemplate:
    """A path template matched segment by segment: ``{name}`` takes one whole, non-empty
    segment as ``name``, every other segment is literal. No regular expression: compiling one
    per route cost the first patched call ~10 ms."""

    parts: tuple[str, ...]

    def fullmatch(self, path: str) -> TemplateMatch | None:
        """The segments ``path`` gives the template's names, or ``None`` if it is not one."""
        segments = path.split("/")
        if len(segments) != len(self.parts):
            return None
        named: dict[str, str] = {}
        for part, segment in zip(self.parts, segments, strict=True):
            if part.startswith("{"):
                if not segment:
                    return None
                named[part[1:-1]] = segment
            elif part != segment:
                return None
        return TemplateMatch(named)


@dataclass(frozen=True, slots=True)
class TemplateMatch:
    """What :meth:`PathTemplate.fullmatch` found: each name's segment, as in the path."""

    named: dict[str, str]

    def groupdict(self) -> dict[str, str]:
        return dict(self.named)


def compile_template(template: str) -> PathTemplate:
    """The matcher of a path template: ``{name}`` matches one segment as ``name``."""
    return PathTemplate(tuple(template.split("/")))


@cache
def _by_method() -> dict[str, list[tuple[PathTemplate, Route]]]:
    """The routes of each method, most specific first, their templates split.

    Made by the first :func:`find`, not on import: the sorting is most of this module's
    import, which ``instrument()`` pays when the application imported the SDK first.
    """
    by_method: dict[str, list[tuple[PathTemplate, Route]]] = {}
    for row in sorted(ROUTES, key=lambda row: -row.specificity):
        by_method.setdefault(row.method, []).append((compile_template(row.template), row))
    return by_method


_NAMED: Final = {(row.generation, row.operation): row for row in ROUTES}


def route_named(generation: Generation, operation: str) -> Route:
    """The route of an SDK method by its operation name (``route_named(5, "search")``)."""
    return _NAMED[(generation, operation)]


@dataclass(frozen=True, slots=True)
class Match:
    """A route and the path segments its template names (``ns``, ``id``, ...), as in the path."""

    route: Route
    segments: tuple[tuple[str, str], ...] = ()

    @property
    def namespace(self) -> str | None:
        """The namespace (5.x) of the ``{ns}`` segment, if the route has one, as
        :func:`~wm_middleware._api.tenancy.namespace_tag` reads it."""
        segment = dict(self.segments).get("ns")
        return None if segment is None else namespace_tag(segment)


@lru_cache(maxsize=4096)
def find(method: str, path: str) -> Match | None:
    """The route of ``method path`` (``path`` relative to the API root, e.g. ``/v4/search``).

    ``None`` for a GET/HEAD/OPTIONS the table does not know and for paths outside the API;
    :data:`UNKNOWN_WRITE` for any other method on an unknown path under the API.
    """
    method = method.upper()
    path = "/" + path.strip("/")
    for pattern, route in _by_method().get(method, ()):
        found = pattern.fullmatch(path)
        if found is not None:
            return Match(route, tuple(found.groupdict().items()))
    if method in QUIET_METHODS or path.split("/", 2)[1] not in _API_ROOTS:
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


# -- what a matched call names ----------------------------------------------------------------
def query_of(match: Match, body: object) -> str | None:
    """A read's query text: the route's query field of ``body``, when it is a string."""
    name = match.route.query
    if name is None or not isinstance(body, Mapping):
        return None
    value = body.get(name)
    return value if isinstance(value, str) else None


def record_id_of(match: Match, body: object) -> str | None:
    """The one record a call targets (``gen_ai.memory.record.id``), or ``None``.

    A batch or bulk call whose record list names exactly one id targets that record too.
    """
    where = match.route.record_id
    if where is None:
        listed = _listed(match, body) or []
        return listed[0] if len(listed) == 1 and isinstance(listed[0], str) else None
    if where.startswith("{"):
        segment = dict(match.segments).get(where.strip("{}"))
        return None if segment is None else unquote(segment)
    value = body.get(where) if isinstance(body, Mapping) else None
    return value if isinstance(value, str) else None


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
    namespace = match.namespace
    if namespace is not None:
        return [namespace]
    return tags_of(body)


def written(
    match: Match, tenant: Tenant, body: object, params: Mapping[str, Any] | None = None
) -> tuple[Hashable, ...] | None:
    """The scopes a write drops, or ``None`` when this call is not a write (a dry-run preview)."""
    route = match.route
    if route.preview is not None and isinstance(body, Mapping) and body.get(route.preview) is True:
        return None
    scope = route.scope
    namespace = match.namespace
    tags: list[str] = []
    if scope in ("namespace", "namespaces") and namespace is not None:
        tags.append(namespace)
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


def creates_only(match: Match, body: object) -> bool:
    """True for a write that can only add new documents: its route :attr:`~Route.creates`
    documents and neither its body nor any item of its batch names an existing one."""
    field = match.route.creates
    if field is None or not isinstance(body, Mapping) or body.get(field) is not None:
        return False
    items = _listed(match, body) or []
    return all(
        isinstance(item, str) or (isinstance(item, Mapping) and item.get(field) is None)
        for item in items
    )


def attempted(match: Match, body: object) -> int | None:
    """Records a write attempts: 1 for a single-record route, the length of a batch's list.

    ``None`` for any other route, and for a bulk write that names its records another way (a
    3.x ``delete_bulk`` by container tags or file path deletes an unknown number).
    """
    if match.route.single:
        return 1
    items = _listed(match, body)
    return None if items is None else len(items)


def _listed(match: Match, body: object) -> list[Any] | None:
    """The body list of the records a batch or bulk write names, if it has one."""
    records = match.route.records
    if records is None or not isinstance(body, Mapping):
        return None
    items = body.get(records)
    return list(items) if isinstance(items, (list, tuple)) else None
