"""The supermemory 5.x (Fern SDK) API: ``/ns/{ns}/...`` (also under ``/v5``) and friends.

Contract: each handler is declared with ``@route`` next to its code; four families share the
store: documents (:class:`V5Documents`), search, profile and lists (:class:`V5Search`),
memories and profile buckets (:class:`V5Memories`), namespaces, organisation and the rest
(:class:`V5Namespaces`). A 5.x read names its query in :data:`QUERY_FIELD`; the namespace in
the path is its scope (a 3.x container tag).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from . import _messages as msg
from .filters import compile_v5_filter
from .routes import Handlers, route
from .store import Chunk, Document, MemoryEntry, MemoryStore, iso
from .values import str_list, to_bool, to_dict, to_float, to_int, to_str
from .wire import (
    DEFAULT_LIMIT,
    JSON,
    ApiError,
    Ctx,
    add_batch,
    elapsed_ms,
    json_object,
    paginate,
    required,
    write_result,
)

__all__ = ["QUERY_FIELD", "V5Documents", "V5Memories", "V5Namespaces", "V5Search", "handlers"]

QUERY_FIELD = "query"
"""The body field of a 5.x search or semantic forget request that holds the query."""
LIST_LIMIT = 20
FORGET_MATCH_THRESHOLD = 0.5
LIST_TYPES = ("documents", "chunks", "memories")


# ------------------------------------------------------------------------------ renderers


def system(created: datetime, updated: datetime) -> JSON:
    return {"createdAt": iso(created), "updatedAt": iso(updated)}


def document_system(doc: Document) -> JSON:
    """``system`` of a document: its indexing stage and memory generation state."""
    return {
        "status": doc.status,
        "dreamingStatus": doc.dreaming_status,
        **system(doc.created_at, doc.updated_at),
    }


def memory_item(m: MemoryEntry) -> JSON:
    return {
        "id": m.id,
        "memory": m.memory,
        "metadata": dict(m.metadata),
        "isStatic": m.is_static,
        "isInference": m.is_inference,
        "isLatest": m.is_latest,
        "isForgotten": m.is_forgotten,
        "version": m.version,
        "system": system(m.created_at, m.updated_at),
    }


def chunk_item(c: Chunk, doc: Document) -> JSON:
    return {
        "id": c.id,
        "position": c.position,
        "content": c.content,
        "type": "text",
        "metadata": {},
        "system": {"createdAt": iso(c.created_at)},
        "documentId": doc.id,
    }


def included_document(doc: Document) -> JSON:
    return {
        "id": doc.id,
        "title": doc.title,
        "type": doc.type,
        "metadata": dict(doc.metadata),
        "summary": doc.summary,
        "system": system(doc.created_at, doc.updated_at),
    }


def _relation(v: MemoryEntry) -> JSON:
    return {
        "id": v.id,
        "relation": "updates",
        "version": v.version,
        "memory": v.memory,
        "metadata": dict(v.metadata),
        "system": {"updatedAt": iso(v.updated_at)},
    }


def related(store: MemoryStore, tenant: str, m: MemoryEntry, limit: int = 10) -> JSON:
    """The versions before and after ``m`` (``limit`` each side)."""
    versions = store.memory_versions(tenant, m)
    return {
        "parents": [_relation(v) for v in versions if v.version < m.version][-limit:],
        "children": [_relation(v) for v in versions if v.version > m.version][:limit],
        "siblings": [],
    }


def _live_memory_count(memories: list[MemoryEntry]) -> int:
    return sum(1 for m in memories if m.is_latest and not m.is_forgotten)


def namespace_doc(store: MemoryStore, ctx: Ctx) -> Document:
    """The document ``{id}`` of namespace ``{ns}``.

    Raises:
        ApiError: 404 when it does not exist in that namespace.
    """
    doc = store.get_document(ctx.tenant, ctx.params["id"])
    if doc is None or ctx.params["ns"] not in doc.container_tags:
        details = msg.NO_DOCUMENT_IN_NAMESPACE.format(id=ctx.params["id"])
        raise ApiError(404, msg.DOCUMENT_NOT_FOUND, details)
    return doc


# ------------------------------------------------------------------------------- documents


class V5Documents(Handlers):
    """``/ns/{ns}/document...``: add (appending to a reused id), batch, files, get, update."""

    def _add(self, ctx: Ctx, item: Mapping[str, Any], task_type: str | None) -> Document:
        content = required(item, "content")
        metadata = to_dict(item.get("metadata"))
        if to_str(item.get("date")):
            metadata.setdefault("documentDate", item["date"])
        return self.store.add_document(
            ctx.tenant,
            content,
            container_tags=[ctx.params["ns"]],
            metadata=metadata,
            doc_id=to_str(item.get("id")),
            task_type=to_str(item.get("taskType")) or task_type or "memory",
            supporting_context=to_str(item.get("supportingContext")),
            group=to_dict(item.get("group")) or None,
            append=True,
        )

    @route("POST", "/ns/{ns}/document")
    def add(self, ctx: Ctx) -> JSON:
        return write_result(self._add(ctx, ctx.data, None))

    @route("POST", "/ns/{ns}/document/batch")
    def batch(self, ctx: Ctx) -> JSON:
        task_type = to_str(ctx.data.get("taskType"))
        results, failed = add_batch(
            ctx.data, to_dict, lambda item: self._add(ctx, item, task_type), "id"
        )
        return {"results": results, "count": len(results) - failed, "failed": failed}

    @route("DELETE", "/ns/{ns}/document")
    def delete(self, ctx: Ctx) -> JSON:
        count = 0
        errors: list[JSON] = []
        for doc_id in str_list(ctx.data.get("ids")):
            doc = self.store.get_document(ctx.tenant, doc_id)
            if doc is not None and ctx.params["ns"] in doc.container_tags:
                self.store.delete_document(ctx.tenant, doc.id)
                count += 1
            else:
                errors.append({"id": doc_id, "error": msg.DOCUMENT_NOT_FOUND})
        return {"count": count, "errors": errors}

    def _file(self, ctx: Ctx, doc_id: str | None, *, require_file: bool) -> JSON:
        upload = ctx.upload()
        f = upload.fields
        if upload.data is None and require_file:
            raise ApiError.invalid(msg.REQUIRED.format(field="file"))
        metadata = json_object(f.get("metadata"))
        context = to_str(f.get("supportingContext"))
        if upload.data is None:
            assert doc_id is not None
            doc = self.store.update_document(
                ctx.tenant, doc_id, metadata=metadata, supporting_context=context
            )
            if doc is None:
                raise ApiError(404, msg.DOCUMENT_NOT_FOUND)
            return write_result(doc)
        content, kind = upload.content()
        if doc_id is not None and self.store.get_document(ctx.tenant, doc_id) is not None:
            doc = self.store.update_document(
                ctx.tenant, doc_id, content=content, metadata=metadata, title=upload.filename
            )
            assert doc is not None
            return write_result(doc)
        doc = self.store.add_document(
            ctx.tenant,
            content,
            container_tags=[ctx.params["ns"]],
            metadata=metadata or {},
            doc_id=doc_id,
            title=upload.filename,
            doc_type=to_str(f.get("fileType")) or kind,
            task_type=to_str(f.get("taskType")) or "memory",
            supporting_context=context,
            group=json_object(f.get("group")),
        )
        return write_result(doc)

    @route("POST", "/ns/{ns}/document/file")
    def upload_file(self, ctx: Ctx) -> JSON:
        return self._file(ctx, None, require_file=True)

    @route("POST", "/ns/{ns}/document/file/{id}")
    def replace_with_file(self, ctx: Ctx) -> JSON:
        return self._file(ctx, ctx.params["id"], require_file=True)

    @route("PATCH", "/ns/{ns}/document/file/{id}")
    def update_file(self, ctx: Ctx) -> JSON:
        namespace_doc(self.store, ctx)
        return self._file(ctx, ctx.params["id"], require_file=False)

    @route("GET", "/ns/{ns}/document/{id}")
    def get(self, ctx: Ctx) -> JSON:
        doc = namespace_doc(self.store, ctx)
        include = set(ctx.query_list("include"))
        out: JSON = {
            "id": doc.id,
            "title": doc.title,
            "type": doc.type,
            "summary": doc.summary,
            "content": doc.content,
            "metadata": dict(doc.metadata),
            "system": document_system(doc),
        }
        if "chunks" in include:
            chunks = self.store.document_chunks(ctx.tenant, doc.id)
            out["chunks"] = [chunk_item(c, doc) for c in chunks]
        if "memories" in include:
            memories = self.store.document_memories(ctx.tenant, doc.id)
            out["memories"] = [memory_item(m) for m in memories]
        return out

    @route("PATCH", "/ns/{ns}/document/{id}")
    def update(self, ctx: Ctx) -> JSON:
        namespace_doc(self.store, ctx)
        body = ctx.data
        metadata, group = body.get("metadata"), body.get("group")
        doc = self.store.update_document(
            ctx.tenant,
            ctx.params["id"],
            content=to_str(body.get("content")),
            metadata=to_dict(metadata) if isinstance(metadata, Mapping) else None,
            supporting_context=to_str(body.get("supportingContext")),
            group=to_dict(group) if isinstance(group, Mapping) else None,
        )
        assert doc is not None
        return write_result(doc)


# ------------------------------------------------------------------ search, profile, lists


class V5Search(Handlers):
    """``/ns/{ns}/search``, ``/ns/{ns}/profile`` and ``/ns/{ns}/list/...``."""

    def _memory_hits(
        self, ctx: Ctx, query: str, scope: JSON, include: JSON, limit: int
    ) -> list[JSON]:
        hits: list[JSON] = []
        forgotten = to_bool(include.get("forgotten"))
        for m, s in self.store.search_memories(
            ctx.tenant, query, limit=limit, include_forgotten=forgotten, **scope
        ):
            item: JSON = {
                "id": m.id,
                "memory": m.memory,
                "metadata": dict(m.metadata),
                "similarity": s,
                "isLatest": m.is_latest and not m.is_forgotten,
                "isInference": m.is_inference,
                "system": system(m.created_at, m.updated_at),
            }
            included: JSON = {}
            if to_bool(include.get("related")):
                included["related"] = related(self.store, ctx.tenant, m)
            if to_bool(include.get("documents")) and m.document_id:
                doc = self.store.get_document(ctx.tenant, m.document_id)
                if doc is not None:
                    included["document"] = included_document(doc)
            if included:
                item["included"] = included
            hits.append(item)
        return hits

    def _chunk_hits(
        self, ctx: Ctx, query: str, scope: JSON, include: JSON, seen: set[Any]
    ) -> list[JSON]:
        hits: list[JSON] = []
        for c, d, s in self.store.search_chunks(ctx.tenant, query, **scope):
            if c.content in seen:
                continue
            item: JSON = {
                "id": c.id,
                "chunk": c.content,
                "metadata": dict(d.metadata),
                "similarity": s,
                "isLatest": True,
                "isInference": False,
                "system": system(c.created_at, d.updated_at),
            }
            if to_bool(include.get("documents")):
                item["included"] = {"document": included_document(d)}
            hits.append(item)
        return hits

    @route("POST", "/ns/{ns}/search")
    def search(self, ctx: Ctx) -> JSON:
        start = time.perf_counter()
        body = ctx.data
        query = required(body, QUERY_FIELD)
        mode = to_str(body.get("searchMode")) or "hybrid"
        limit = to_int(body.get("limit"), DEFAULT_LIMIT)
        include = to_dict(body.get("include"))
        scope: JSON = {
            "container_tags": [ctx.params["ns"]],
            "threshold": to_float(body.get("threshold"), 0.0),
            "predicate": compile_v5_filter(body.get("filter")),
        }
        hits: list[JSON] = []
        if mode in ("hybrid", "memories"):
            hits += self._memory_hits(ctx, query, scope, include, limit)
        if mode in ("hybrid", "chunks"):
            seen = {i.get("memory") for i in hits}
            hits += self._chunk_hits(ctx, query, scope, include, seen)
        hits.sort(key=lambda i: -float(i["similarity"]))
        return {"results": hits[: max(limit, 0)], "searchTime": elapsed_ms(start)}

    @route("POST", "/ns/{ns}/profile")
    def profile(self, ctx: Ctx) -> JSON:
        ns = ctx.params["ns"]
        body = ctx.data
        static, dynamic, buckets = self.store.profile(
            ctx.tenant, [ns], predicate=compile_v5_filter(body.get("filter"))
        )
        wanted = str_list(body.get("buckets"))
        names = set(self.store.buckets(ctx.tenant, ns)) | set(buckets)

        def fact(m: MemoryEntry) -> JSON:
            return {"id": m.id, "memory": m.memory}

        return {
            "profile": {
                "static": [fact(m) for m in static],
                "dynamic": [fact(m) for m in dynamic],
                "buckets": {
                    n: [fact(m) for m in buckets.get(n, [])]
                    for n in sorted(names)
                    if not wanted or n in wanted
                },
            }
        }

    def _documents(self, ctx: Ctx, scope: JSON, include: JSON) -> tuple[list[JSON], JSON]:
        docs = self.store.list_documents(
            ctx.tenant,
            container_tags=scope["container_tags"],
            predicate=scope["predicate"],
            sort=scope["sort"],
            descending=scope["descending"],
        )
        page, pagination = paginate(docs, scope["page"], scope["limit"])
        items = []
        for d in page:
            doc_system = document_system(d)
            if to_bool(include.get("memoryCount")):
                memories = self.store.document_memories(ctx.tenant, d.id)
                doc_system["memoryCount"] = _live_memory_count(memories)
            items.append(
                {
                    "id": d.id,
                    "title": d.title,
                    "type": d.type,
                    "content": d.content if to_bool(include.get("content")) else None,
                    "summary": d.summary,
                    "metadata": dict(d.metadata),
                    "url": d.url,
                    "system": doc_system,
                }
            )
        return items, pagination

    def _chunks(self, ctx: Ctx, scope: JSON, include: JSON) -> tuple[list[JSON], JSON]:
        docs = self.store.list_documents(
            ctx.tenant,
            container_tags=scope["container_tags"],
            predicate=scope["predicate"],
            include_pending=False,
        )
        pairs = [(c, d) for d in docs for c in self.store.document_chunks(ctx.tenant, d.id)]
        if scope["sort"] == "position":
            pairs.sort(key=lambda p: (p[1].id, p[0].position), reverse=scope["descending"])
        else:
            pairs.sort(key=lambda p: (p[0].created_at, p[0].position), reverse=scope["descending"])
        page, pagination = paginate(pairs, scope["page"], scope["limit"])
        return [chunk_item(c, d) for c, d in page], pagination

    def _memories(self, ctx: Ctx, scope: JSON, include: JSON) -> tuple[list[JSON], JSON]:
        memories = self.store.list_memories(
            ctx.tenant,
            container_tags=scope["container_tags"],
            predicate=scope["predicate"],
            include_forgotten=to_bool(include.get("forgotten")),
        )
        attr = "updated_at" if scope["sort"] == "updatedAt" else "created_at"
        memories.sort(key=lambda m: (getattr(m, attr), m.id), reverse=scope["descending"])
        page, pagination = paginate(memories, scope["page"], scope["limit"])
        return [memory_item(m) for m in page], pagination

    @route("POST", "/ns/{ns}/list/{type}")
    def list_resources(self, ctx: Ctx) -> JSON:
        kind = ctx.params["type"]
        if kind not in LIST_TYPES:
            raise ApiError.invalid(f"Unknown list type {kind!r}")
        body = ctx.data
        scope: JSON = {
            "container_tags": [ctx.params["ns"]],
            "predicate": compile_v5_filter(body.get("filter")),
            "sort": ctx.query("sort") or "createdAt",
            "descending": (ctx.query("order") or "desc") == "desc",
            "page": to_int(ctx.query("page"), 1),
            "limit": to_int(ctx.query("limit"), LIST_LIMIT),
        }
        lister = {"documents": self._documents, "chunks": self._chunks, "memories": self._memories}
        out: JSON = {name: [] for name in LIST_TYPES}
        out[kind], out["pagination"] = lister[kind](ctx, scope, to_dict(body.get("include")))
        return out

    @route("POST", "/ns/{ns}/list/documents/memory-counts")
    def memory_counts(self, ctx: Ctx) -> JSON:
        ids = str_list(ctx.data.get("ids"))
        counts = [
            {
                "id": i,
                "memoryCount": _live_memory_count(self.store.document_memories(ctx.tenant, i)),
            }
            for i in ids
        ]
        return {"counts": counts}


# ------------------------------------------------------------------ memories and buckets


class V5Memories(Handlers):
    """``/ns/{ns}/memories...`` (get, forget, forget by meaning) and profile buckets."""

    @route("DELETE", "/ns/{ns}/memories")
    def forget(self, ctx: Ctx) -> JSON:
        ns = ctx.params["ns"]
        matches: list[JSON] = []
        errors: list[JSON] = []
        for mid in str_list(ctx.data.get("ids")):
            m = self.store.forget_memory(ctx.tenant, container_tag=ns, memory_id=mid)
            if m is None:
                errors.append({"id": mid, "error": msg.MEMORY_NOT_FOUND})
            else:
                matches.append({"id": m.id, "memory": m.memory})
        return {"count": len(matches), "errors": errors, "matches": matches}

    @route("DELETE", "/ns/{ns}/memories/semantic")
    def forget_matching(self, ctx: Ctx) -> JSON:
        body = ctx.data
        query = required(body, QUERY_FIELD)
        ns = ctx.params["ns"]
        hits = self.store.search_memories(
            ctx.tenant, query, container_tags=[ns], limit=100, threshold=FORGET_MATCH_THRESHOLD
        )
        matches = [{"id": m.id, "memory": m.memory} for m, _ in hits]
        if not to_bool(body.get("dryRun")):
            for m, _ in hits:
                self.store.forget_memory(
                    ctx.tenant, container_tag=ns, memory_id=m.id, reason=f"forget: {query}"
                )
        return {"count": len(matches), "errors": [], "matches": matches}

    @route("GET", "/ns/{ns}/memories/{id}")
    def get(self, ctx: Ctx) -> JSON:
        m = self.store.get_memory(ctx.tenant, ctx.params["id"])
        if m is None or ctx.params["ns"] not in m.container_tags:
            raise ApiError(404, msg.MEMORY_NOT_FOUND)
        include = set(ctx.query_list("include"))
        out = memory_item(m)
        included: JSON = {}
        if "related" in include:
            limit = to_int(ctx.query("relatedLimit"), 10)
            included["related"] = related(self.store, ctx.tenant, m, limit)
        doc = self.store.get_document(ctx.tenant, m.document_id) if m.document_id else None
        if "documents" in include and doc is not None:
            included["document"] = included_document(doc)
        if included:
            out["included"] = included
        return out

    @route("GET", "/ns/{ns}/profile/buckets")
    def buckets(self, ctx: Ctx) -> JSON:
        return {"buckets": self.store.buckets(ctx.tenant, ctx.params["ns"])}

    @route("PUT", "/ns/{ns}/profile/buckets")
    def set_buckets(self, ctx: Ctx) -> JSON:
        raw = to_dict(ctx.data.get("buckets"))
        buckets = {str(k): str(v) for k, v in raw.items()}
        return {"buckets": self.store.set_buckets(ctx.tenant, ctx.params["ns"], buckets)}

    @route("DELETE", "/ns/{ns}/profile/buckets")
    def delete_buckets(self, ctx: Ctx) -> JSON:
        names = str_list(ctx.data.get("buckets"))
        return {"buckets": self.store.delete_buckets(ctx.tenant, ctx.params["ns"], names)}


# --------------------------------------------------------- namespaces, organisation, misc


class V5Namespaces(Handlers):
    """``/ns`` and ``/ns/{ns}``, ``/organization``, ``/feedback`` and the connectors lists."""

    def _details(self, tenant: str, ns: str) -> JSON:
        created, context = self.store.namespace_info(tenant, ns)
        docs = self.store.list_documents(tenant, container_tags=[ns])
        updated = max([created, *(d.updated_at for d in docs)])
        return {"namespace": ns, "supportingContext": context, "system": system(created, updated)}

    def _known(self, ctx: Ctx) -> str:
        ns = ctx.params["ns"]
        if ns not in self.store.namespaces(ctx.tenant):
            raise ApiError(404, msg.NAMESPACE_NOT_FOUND)
        return ns

    @route("GET", "/ns")
    def list_namespaces(self, ctx: Ctx) -> JSON:
        q = (ctx.query("q") or "").lower()
        names = [n for n in self.store.namespaces(ctx.tenant) if q in n.lower()]
        page, pagination = paginate(
            names, to_int(ctx.query("page"), 1), to_int(ctx.query("limit"), LIST_LIMIT)
        )
        items = []
        for ns in page:
            details = self._details(ctx.tenant, ns)
            documents = self.store.list_documents(ctx.tenant, container_tags=[ns])
            memories = self.store.list_memories(ctx.tenant, container_tags=[ns])
            items.append(
                {
                    "id": f"ns_{ns}",
                    "namespace": ns,
                    "documentCount": len(documents),
                    "memoryCount": len(memories),
                    "description": details["supportingContext"],
                    "system": details["system"],
                }
            )
        return {"namespaces": items, "pagination": pagination}

    @route("GET", "/ns/{ns}")
    def get(self, ctx: Ctx) -> JSON:
        return self._details(ctx.tenant, self._known(ctx))

    @route("PATCH", "/ns/{ns}")
    def update(self, ctx: Ctx) -> JSON:
        ns = ctx.params["ns"]
        self.store.set_namespace_context(ctx.tenant, ns, to_str(ctx.data.get("supportingContext")))
        return self._details(ctx.tenant, ns)

    @route("DELETE", "/ns/{ns}")
    def delete(self, ctx: Ctx) -> JSON:
        move_to = ctx.query("moveTo")
        ns = self._known(ctx)
        docs, mems = self.store.delete_namespace(ctx.tenant, ns, move_to)
        if move_to:
            operation = self.store.new_id()
            return {
                "status": "queued",
                "operationId": operation,
                "namespace": ns,
                "moveTo": move_to,
            }
        return {
            "status": "deleted",
            "namespace": ns,
            "deletedDocumentsCount": docs,
            "deletedMemoriesCount": mems,
        }

    @route("GET", "/organization")
    def organization(self, ctx: Ctx) -> JSON:
        return {
            "organizationalContext": self.store.organizational_context(ctx.tenant),
            "namespaceCount": len(self.store.namespaces(ctx.tenant)),
        }

    @route("PATCH", "/organization")
    def update_organization(self, ctx: Ctx) -> JSON:
        context = to_str(ctx.data.get("organizationalContext"))
        self.store.set_organizational_context(ctx.tenant, context)
        return self.organization(ctx)

    @route("POST", "/feedback")
    def feedback(self, ctx: Ctx) -> JSON:
        return {"id": self.store.new_id(), "remaining": 100}

    @route("GET", "/ns/{ns}/connectors")
    @route("GET", "/connectors")
    def connectors(self, ctx: Ctx) -> JSON:
        _, pagination = paginate([], 1, LIST_LIMIT)
        return {"connectors": [], "pagination": pagination}


def handlers(store: MemoryStore) -> list[Handlers]:
    """Every 5.x handler family over ``store``."""
    return [V5Documents(store), V5Search(store), V5Memories(store), V5Namespaces(store)]
