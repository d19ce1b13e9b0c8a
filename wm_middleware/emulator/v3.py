"""The supermemory 3.x (Stainless SDK) API: ``/v3/...`` and ``/v4/...``.

Contract: each handler is declared with ``@route`` next to its code; three families share the
store: search and profile (:class:`V3Search`), documents (:class:`V3Documents`), memories and
settings (:class:`V3Memories`). A 3.x read names its query in :data:`QUERY_FIELD` and its scope
in ``containerTag`` / ``containerTags``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from starlette.responses import Response

from . import _messages as msg
from .filters import compile_v3_filters
from .routes import Handlers, route
from .store import Chunk, Document, MemoryEntry, MemoryStore, iso
from .store.model import utc_now
from .values import str_list, to_bool, to_dict, to_float, to_int, to_str
from .wire import (
    DEFAULT_LIMIT,
    JSON,
    ApiError,
    Ctx,
    add_batch,
    elapsed_ms,
    json_object,
    json_or_str_tags,
    paginate,
    required,
    write_result,
)

__all__ = ["QUERY_FIELD", "V3Documents", "V3Memories", "V3Search", "handlers"]

QUERY_FIELD = "q"
"""The body field of a 3.x search or profile request that holds the query."""


def tags_of(body: Mapping[str, Any]) -> list[str] | None:
    """The container tags a 3.x body scopes to (``containerTag`` first), ``None`` for all."""
    tags = str_list(body.get("containerTags"))
    tag = to_str(body.get("containerTag"))
    if tag and tag not in tags:
        tags.insert(0, tag)
    return tags or None


def not_found(doc_id: str) -> ApiError:
    return ApiError(404, msg.DOCUMENT_NOT_FOUND, msg.NO_DOCUMENT_WITH_ID.format(id=doc_id))


# ------------------------------------------------------------------------------ renderers


def _version(v: MemoryEntry, m: MemoryEntry) -> JSON:
    return {
        "memory": v.memory,
        "relation": "updates",
        "updatedAt": iso(v.updated_at),
        "metadata": v.metadata or None,
        "version": v.version - m.version,
    }


def _included_document(doc: Document, include: Mapping[str, Any]) -> JSON:
    d: JSON = {"id": doc.id, "createdAt": iso(doc.created_at), "updatedAt": iso(doc.updated_at)}
    if to_bool(include.get("documents")):
        d.update(metadata=doc.metadata or None, title=doc.title, type=doc.type)
    if to_bool(include.get("summaries")):
        d["summary"] = doc.summary
    return d


def _chunk_hit(c: Chunk, d: Document, score: float) -> JSON:
    return {
        "id": c.id,
        "chunk": c.content,
        "metadata": d.metadata or None,
        "similarity": score,
        "updatedAt": iso(d.updated_at),
        "filepath": d.filepath,
    }


def document_item(doc: Document, *, content: bool = False) -> JSON:
    """A document as 3.x lists it (``status`` is its indexing stage)."""
    item: JSON = {
        "id": doc.id,
        "connectionId": None,
        "createdAt": iso(doc.created_at),
        "customId": doc.custom_id,
        "filepath": doc.filepath,
        "metadata": doc.metadata or None,
        "status": doc.status,
        "summary": doc.summary,
        "title": doc.title,
        "type": doc.type,
        "updatedAt": iso(doc.updated_at),
        "containerTags": list(doc.container_tags),
        "url": doc.url,
    }
    if content:
        item["content"] = doc.content
    return item


def _document_memory(m: MemoryEntry) -> JSON:
    return {
        "id": m.id,
        "createdAt": iso(m.created_at),
        "isForgotten": m.is_forgotten,
        "isInference": m.is_inference,
        "isLatest": m.is_latest,
        "isStatic": m.is_static,
        "memory": m.memory,
        "metadata": m.metadata or None,
        "parentMemoryId": m.parent_id,
        "rootMemoryId": m.root_id,
        "sourceCount": 1,
        "updatedAt": iso(m.updated_at),
        "version": m.version,
    }


ACTIVE_WINDOW: Final = timedelta(hours=4)
"""``GET /v3/documents/processing`` in its default ``active`` view lists the documents in flight
updated within it; ``pending`` lists every document not done, with no cutoff."""


def _processing_item(d: Document, now: datetime) -> JSON:
    item = document_item(d)
    del item["filepath"], item["url"]
    return {**item, "summary": None, "stuck": now - d.updated_at > ACTIVE_WINDOW}


# ---------------------------------------------------------------------------------- search


class V3Search(Handlers):
    """``/v4/search`` (memories), ``/v3/search`` (documents) and ``/v4/profile``."""

    def _memory_result(
        self, tenant: str, m: MemoryEntry, score: float, include: Mapping[str, Any]
    ) -> JSON:
        doc = self.store.get_document(tenant, m.document_id) if m.document_id else None
        item: JSON = {
            "id": m.id,
            "memory": m.memory,
            "metadata": m.metadata or None,
            "similarity": score,
            "updatedAt": iso(m.updated_at),
            "version": m.version,
            "rootMemoryId": m.root_id,
            "isAggregated": False,
            "filepath": doc.filepath if doc else None,
        }
        if to_bool(include.get("documents")) or to_bool(include.get("summaries")):
            item["documents"] = [_included_document(doc, include)] if doc is not None else []
        if to_bool(include.get("relatedMemories")):
            versions = self.store.memory_versions(tenant, m)
            item["context"] = {
                "parents": [_version(v, m) for v in versions if v.version < m.version],
                "children": [_version(v, m) for v in versions if v.version > m.version],
                "related": [],
            }
        if to_bool(include.get("chunks")) and doc is not None:
            item["chunks"] = [
                {"content": c.content, "documentId": doc.id, "position": c.position}
                for c in self.store.document_chunks(tenant, doc.id)
            ]
        return item

    def memory_search(self, ctx: Ctx, body: Mapping[str, Any], query: str) -> JSON:
        """The answer of ``/v4/search`` for ``query`` with the options in ``body``."""
        start = time.perf_counter()
        include = to_dict(body.get("include"))
        mode = to_str(body.get("searchMode")) or "memories"
        if to_bool(include.get("chunks")):
            mode = "memories"  # deprecated format: chunks embedded in memory results
        limit = to_int(body.get("limit"), DEFAULT_LIMIT)
        scope: JSON = {
            "container_tags": tags_of(body),
            "threshold": to_float(body.get("threshold"), 0.0),
            "predicate": compile_v3_filters(body.get("filters")),
            "filepath": to_str(body.get("filepath")),
        }
        results: list[JSON] = []
        if mode in ("memories", "hybrid"):
            forgotten = to_bool(include.get("forgottenMemories"))
            for m, s in self.store.search_memories(
                ctx.tenant, query, limit=limit, include_forgotten=forgotten, **scope
            ):
                results.append(self._memory_result(ctx.tenant, m, s, include))
        if mode in ("hybrid", "documents"):
            seen = {r.get("memory") for r in results}
            for c, d, s in self.store.search_chunks(ctx.tenant, query, **scope):
                if c.content not in seen:
                    results.append(_chunk_hit(c, d, s))
        results.sort(key=lambda r: -float(r["similarity"]))
        results = results[: max(limit, 0)]
        return {"results": results, "timing": elapsed_ms(start), "total": len(results)}

    @route("POST", "/v4/search")
    def v4_search(self, ctx: Ctx) -> JSON:
        body = ctx.data
        return self.memory_search(ctx, body, required(body, QUERY_FIELD))

    def _chunks_around(
        self, tenant: str, doc: Document, matched: dict[int, tuple[Chunk, float]], only: bool
    ) -> list[JSON]:
        chunks: dict[int, JSON] = {
            pos: {"content": c.content, "isRelevant": True, "position": pos, "score": s}
            for pos, (c, s) in matched.items()
        }
        if not only:
            every = self.store.document_chunks(tenant, doc.id)
            for pos in list(matched):
                for near in (pos - 1, pos + 1):
                    if 0 <= near < len(every) and near not in chunks:
                        chunks[near] = {
                            "content": every[near].content,
                            "isRelevant": False,
                            "position": near,
                            "score": 0.0,
                        }
        return [chunks[p] for p in sorted(chunks)]

    @route("POST", "/v3/search")
    def v3_search(self, ctx: Ctx) -> JSON:
        start = time.perf_counter()
        body = ctx.data
        query = required(body, QUERY_FIELD)
        hits = self.store.search_chunks(
            ctx.tenant,
            query,
            container_tags=tags_of(body),
            threshold=to_float(body.get("chunkThreshold"), 0.0),
            predicate=compile_v3_filters(body.get("filters")),
            doc_id=to_str(body.get("docId")),
            filepath=to_str(body.get("filepath")),
        )
        grouped: dict[str, tuple[Document, dict[int, tuple[Chunk, float]]]] = {}
        for c, d, s in hits:
            grouped.setdefault(d.id, (d, {}))[1][c.position] = (c, s)
        only = to_bool(body.get("onlyMatchingChunks"))
        results: list[JSON] = []
        for doc, matched in grouped.values():
            item: JSON = {
                "documentId": doc.id,
                "chunks": self._chunks_around(ctx.tenant, doc, matched, only),
                "createdAt": iso(doc.created_at),
                "updatedAt": iso(doc.updated_at),
                "metadata": doc.metadata or None,
                "score": max(s for _, s in matched.values()),
                "title": doc.title,
                "type": doc.type,
            }
            if to_bool(body.get("includeFullDocs")):
                item["content"] = doc.content
            if to_bool(body.get("includeSummary")):
                item["summary"] = doc.summary
            results.append(item)
        results.sort(key=lambda r: -float(r["score"]))
        results = results[: max(to_int(body.get("limit"), DEFAULT_LIMIT), 0)]
        return {"results": results, "timing": elapsed_ms(start), "total": len(results)}

    @route("POST", "/v4/profile")
    def v4_profile(self, ctx: Ctx) -> JSON:
        body = ctx.data
        tag = required(body, "containerTag")
        predicate = compile_v3_filters(body.get("filters"))
        sections = str_list(body.get("include")) or ["static", "dynamic", "buckets"]
        static, dynamic, buckets = self.store.profile(ctx.tenant, [tag], predicate=predicate)
        profile: JSON = {}
        if "static" in sections:
            profile["static"] = [m.memory for m in static]
        if "dynamic" in sections:
            profile["dynamic"] = [m.memory for m in dynamic]
        if "buckets" in sections:
            wanted = str_list(body.get("buckets"))
            names = set(self.store.buckets(ctx.tenant, tag)) | set(buckets)
            profile["buckets"] = {
                name: [m.memory for m in buckets.get(name, [])]
                for name in sorted(names)
                if not wanted or name in wanted
            }
        out: JSON = {"profile": profile}
        query = to_str(body.get(QUERY_FIELD))
        if query is not None:
            options = {"containerTag": tag, "threshold": body.get("threshold")}
            out["searchResults"] = self.memory_search(
                ctx, {**options, "filters": body.get("filters")}, query
            )
        return out


# ------------------------------------------------------------------------------- documents


class V3Documents(Handlers):
    """``/v3/documents...``: add, batch, file, get, list, processing, update, delete."""

    def _add(self, tenant: str, item: Mapping[str, Any], defaults: Mapping[str, Any]) -> Document:
        content = required(item, "content")
        merged = {**defaults, **{k: v for k, v in item.items() if v is not None}}
        metadata = {**to_dict(defaults.get("metadata")), **to_dict(item.get("metadata"))}
        return self.store.add_document(
            tenant,
            content,
            container_tags=tags_of(merged),
            metadata=metadata,
            custom_id=to_str(merged.get("customId")),
            filepath=to_str(merged.get("filepath")),
            task_type=to_str(merged.get("taskType")) or "memory",
            supporting_context=to_str(merged.get("entityContext")),
        )

    @route("POST", "/v3/documents")
    def add(self, ctx: Ctx) -> JSON:
        return write_result(self._add(ctx.tenant, ctx.data, {}))

    @route("POST", "/v3/documents/batch")
    def batch(self, ctx: Ctx) -> JSON:
        defaults = {k: v for k, v in ctx.data.items() if k != "documents"}
        results, failed = add_batch(
            ctx.data,
            lambda raw: {"content": raw} if isinstance(raw, str) else to_dict(raw),
            lambda item: self._add(ctx.tenant, item, defaults),
            "customId",
        )
        return {"results": results, "success": len(results) - failed, "failed": failed}

    @route("POST", "/v3/documents/file")
    def upload_file(self, ctx: Ctx) -> JSON:
        upload = ctx.upload()
        if upload.data is None:
            raise ApiError.invalid(msg.REQUIRED.format(field="file"))
        f = upload.fields
        content, kind = upload.content()
        tags = json_or_str_tags(f.get("containerTags"))
        if f.get("containerTag"):
            tags.insert(0, f["containerTag"])
        doc = self.store.add_document(
            ctx.tenant,
            content,
            container_tags=tags or None,
            metadata=json_object(f.get("metadata")) or {},
            custom_id=to_str(f.get("customId")),
            title=upload.filename,
            doc_type=to_str(f.get("fileType")) or kind,
            filepath=to_str(f.get("filepath")),
            task_type=to_str(f.get("taskType")) or "memory",
        )
        return write_result(doc)

    @route("POST", "/v3/documents/list")
    def list_documents(self, ctx: Ctx) -> JSON:
        body = ctx.data
        docs = self.store.list_documents(
            ctx.tenant,
            container_tags=str_list(body.get("containerTags")) or None,
            filepath=to_str(body.get("filepath")),
            predicate=compile_v3_filters(body.get("filters")),
            sort=to_str(body.get("sort")) or "createdAt",
            descending=(to_str(body.get("order")) or "desc") == "desc",
        )
        page, pagination = paginate(
            docs, to_int(body.get("page"), 1), to_int(body.get("limit"), DEFAULT_LIMIT)
        )
        content = to_bool(body.get("includeContent"))
        return {
            "memories": [document_item(d, content=content) for d in page],
            "pagination": pagination,
        }

    @route("GET", "/v3/documents/processing")
    def processing(self, ctx: Ctx) -> JSON:
        """The documents not indexed yet: ``view=active`` (the default) those updated in the
        last :data:`ACTIVE_WINDOW`, ``pending`` and ``all`` every one (``all`` paginated; the
        emulator fails no document)."""
        tags = ctx.query_list("containerTags") or None
        view = ctx.query("view") or "active"
        docs = self.store.list_documents(ctx.tenant, container_tags=tags)
        now = utc_now()
        items = [
            _processing_item(d, now)
            for d in docs
            if not d.ready and (view != "active" or now - d.updated_at <= ACTIVE_WINDOW)
        ]
        out: JSON = {"documents": items, "totalCount": len(items)}
        if view == "all":
            page, pagination = paginate(
                items, to_int(ctx.query("page"), 1), to_int(ctx.query("limit"), 50)
            )
            out.update(documents=page, pagination=pagination)
        return out

    def _doc(self, ctx: Ctx) -> Document:
        doc = self.store.get_document(ctx.tenant, ctx.params["id"])
        if doc is None:
            raise not_found(ctx.params["id"])
        return doc

    @route("GET", "/v3/documents/{id}")
    def get(self, ctx: Ctx) -> JSON:
        doc = self._doc(ctx)
        memories = self.store.document_memories(ctx.tenant, doc.id)
        out = document_item(doc, content=True)
        out.update(
            activeContentUpdateId=None,
            dreamingStatus=doc.dreaming_status,
            latestRevision=doc.revision,
            ogImage=None,
            raw=None,
            source="api",
            taskType=doc.task_type,
            tombstonedAt=None,
        )
        if memories:
            out["memories"] = [_document_memory(m) for m in memories]
        return out

    @route("PATCH", "/v3/documents/{id}")
    def update(self, ctx: Ctx) -> JSON:
        body = ctx.data
        metadata = body.get("metadata")
        doc = self.store.update_document(
            ctx.tenant,
            ctx.params["id"],
            content=to_str(body.get("content")),
            container_tags=tags_of(body),
            metadata=to_dict(metadata) if isinstance(metadata, Mapping) else None,
            custom_id=to_str(body.get("customId")),
            filepath=to_str(body.get("filepath")),
        )
        if doc is None:
            raise not_found(ctx.params["id"])
        return write_result(doc)

    @route("DELETE", "/v3/documents/{id}")
    def delete(self, ctx: Ctx) -> Response:
        if not self.store.delete_document(ctx.tenant, ctx.params["id"]):
            raise not_found(ctx.params["id"])
        return Response(status_code=204)

    @route("DELETE", "/v3/documents/bulk")
    def delete_bulk(self, ctx: Ctx) -> JSON:
        body = ctx.data
        ids = str_list(body.get("ids"))
        tags = str_list(body.get("containerTags"))
        filepath = to_str(body.get("filepath"))
        if not (ids or tags or filepath):
            raise ApiError.invalid("Provide ids, containerTags or filepath")
        deleted = 0
        errors: list[JSON] = []
        for doc_id in ids:
            if self.store.delete_document(ctx.tenant, doc_id):
                deleted += 1
            else:
                errors.append({"id": doc_id, "error": msg.DOCUMENT_NOT_FOUND})
        if tags or filepath:
            for doc in self.store.list_documents(
                ctx.tenant, container_tags=tags or None, filepath=filepath
            ):
                deleted += self.store.delete_document(ctx.tenant, doc.id)
        out: JSON = {"success": True, "deletedCount": deleted}
        if ids:
            out["errors"] = errors
        if tags:
            out["containerTags"] = tags
        return out


# -------------------------------------------------------------------- memories and settings


class V3Memories(Handlers):
    """``/v4/memories`` (forget, update), ``/v3/settings`` and the connections list."""

    @route("DELETE", "/v4/memories")
    def forget(self, ctx: Ctx) -> JSON:
        body = ctx.data
        tag = required(body, "containerTag")
        if to_str(body.get("id")) is None and to_str(body.get("content")) is None:
            raise ApiError.invalid("Provide id or content")
        m = self.store.forget_memory(
            ctx.tenant,
            container_tag=tag,
            memory_id=to_str(body.get("id")),
            content=to_str(body.get("content")),
            reason=to_str(body.get("reason")),
        )
        if m is None:
            raise ApiError(404, msg.MEMORY_NOT_FOUND)
        return {"id": m.id, "forgotten": True}

    @route("PATCH", "/v4/memories")
    def update(self, ctx: Ctx) -> JSON:
        body = ctx.data
        tag, new_content = to_str(body.get("containerTag")), to_str(body.get("newContent"))
        if tag is None or new_content is None:
            raise ApiError.invalid("containerTag and newContent are required")
        raw = body.get("metadata")
        metadata = to_dict(raw) if isinstance(raw, Mapping) else None
        temporal = body.get("temporalContext")
        if isinstance(temporal, Mapping):
            metadata = {**(metadata or {}), "temporalContext": dict(temporal)}
        m = self.store.update_memory(
            ctx.tenant,
            container_tag=tag,
            new_content=new_content,
            memory_id=to_str(body.get("id")),
            content=to_str(body.get("content")),
            metadata=metadata,
            forget_after=to_str(body.get("forgetAfter")),
            forget_reason=to_str(body.get("forgetReason")),
        )
        if m is None:
            raise ApiError(404, msg.MEMORY_NOT_FOUND)
        return {
            "id": m.id,
            "createdAt": iso(m.created_at),
            "forgetAfter": m.forget_after,
            "forgetReason": m.forget_reason,
            "memory": m.memory,
            "metadata": m.metadata or None,
            "parentMemoryId": m.parent_id,
            "rootMemoryId": m.root_id,
            "version": m.version,
        }

    @route("GET", "/v3/settings")
    def settings(self, ctx: Ctx) -> JSON:
        return self.store.settings(ctx.tenant)

    @route("PATCH", "/v3/settings")
    def update_settings(self, ctx: Ctx) -> JSON:
        updated = {k: v for k, v in ctx.data.items() if v is not None}
        self.store.update_settings(ctx.tenant, updated)
        return {"orgId": f"org_{ctx.tenant[:8]}", "orgSlug": "emulator", "updated": updated}

    @route("POST", "/v3/connections/list")
    def connections(self, ctx: Ctx) -> list[Any]:
        return []


def handlers(store: MemoryStore) -> list[Handlers]:
    """Every 3.x handler family over ``store``."""
    return [V3Search(store), V3Documents(store), V3Memories(store)]
