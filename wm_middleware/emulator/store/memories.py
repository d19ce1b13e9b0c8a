"""Memories: recall (list, search, chunk search), versions, forgetting and seeding."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..text import rank
from .documents import DocumentStore
from .model import (
    DEFAULT_CONTAINER_TAG,
    Chunk,
    Document,
    MemoryEntry,
    Predicate,
    SeedMemory,
    TenantData,
    filepath_match,
    tags_match,
    utc_now,
)

__all__ = ["RecallStore"]


class RecallStore(DocumentStore):
    """Documents plus what recall reads: memories and chunks of indexed documents."""

    def list_memories(
        self,
        tenant: str,
        *,
        container_tags: Sequence[str] | None = None,
        predicate: Predicate | None = None,
        include_forgotten: bool = False,
        latest_only: bool = True,
    ) -> list[MemoryEntry]:
        """Return recallable memories in scope (indexed, latest, not forgotten)."""
        with self._lock:
            t = self._tenant(tenant)
            out = []
            for m in t.memories.values():
                if not tags_match(m.container_tags, container_tags):
                    continue
                if m.is_forgotten and not include_forgotten:
                    continue
                if latest_only and not m.is_latest and not m.is_forgotten:
                    continue
                doc = t.documents.get(m.document_id) if m.document_id else None
                if doc is not None and not doc.ready:
                    continue
                if predicate is not None and not predicate(m.metadata):
                    continue
                out.append(m)
            return out

    def get_memory(self, tenant: str, memory_id: str) -> MemoryEntry | None:
        """Return a memory by id (any version, forgotten or not)."""
        with self._lock:
            return self._tenant(tenant).memories.get(memory_id)

    def memory_versions(self, tenant: str, memory: MemoryEntry) -> list[MemoryEntry]:
        """Return every version in ``memory``'s chain, oldest first."""
        root = memory.root_id or memory.id
        with self._lock:
            chain = [
                m
                for m in self._tenant(tenant).memories.values()
                if m.id == root or m.root_id == root
            ]
        return sorted(chain, key=lambda m: m.version)

    def search_memories(
        self,
        tenant: str,
        query: str,
        *,
        container_tags: Sequence[str] | None = None,
        limit: int = 10,
        threshold: float = 0.0,
        predicate: Predicate | None = None,
        include_forgotten: bool = False,
        filepath: str | None = None,
    ) -> list[tuple[MemoryEntry, float]]:
        """Rank memories in scope against ``query``.

        Returns at most ``limit`` ``(memory, similarity)`` pairs, best first, keeping
        only similarities ``>= threshold`` and always dropping zero-overlap ones.
        """
        candidates = self.list_memories(
            tenant,
            container_tags=container_tags,
            predicate=predicate,
            include_forgotten=include_forgotten,
        )
        if filepath:
            with self._lock:
                docs = self._tenant(tenant).documents
                candidates = [
                    m
                    for m in candidates
                    if m.document_id in docs
                    and filepath_match(docs[m.document_id].filepath, filepath)
                ]
        scores = rank(query, [m.memory for m in candidates])
        hits = [
            (m, s) for m, s in zip(candidates, scores, strict=True) if s > 0.0 and s >= threshold
        ]
        hits.sort(key=lambda h: (-h[1], -h[0].updated_at.timestamp(), h[0].id))
        return hits[: max(limit, 0)]

    def search_chunks(
        self,
        tenant: str,
        query: str,
        *,
        container_tags: Sequence[str] | None = None,
        threshold: float = 0.0,
        predicate: Predicate | None = None,
        doc_id: str | None = None,
        filepath: str | None = None,
    ) -> list[tuple[Chunk, Document, float]]:
        """Rank chunks of indexed documents in scope; best first, ``>= threshold``."""
        docs = self.list_documents(
            tenant,
            container_tags=container_tags,
            filepath=filepath,
            predicate=predicate,
            include_pending=False,
        )
        if doc_id is not None:
            docs = [d for d in docs if doc_id in (d.id, d.custom_id)]
        with self._lock:
            t = self._tenant(tenant)
            pairs = [(c, d) for d in docs for c in t.chunks.get(d.id, [])]
        scores = rank(query, [c.content for c, _ in pairs])
        hits = [
            (c, d, s) for (c, d), s in zip(pairs, scores, strict=True) if s > 0.0 and s >= threshold
        ]
        hits.sort(key=lambda h: (-h[2], h[1].id, h[0].position))
        return hits

    def forget_memory(
        self,
        tenant: str,
        *,
        container_tag: str | None,
        memory_id: str | None = None,
        content: str | None = None,
        reason: str | None = None,
    ) -> MemoryEntry | None:
        """Mark one memory (by id, or by exact content) forgotten; ``None`` if absent."""
        with self._lock:
            t = self._tenant(tenant)
            target = self._locate(t, container_tag, memory_id, content)
            if target is None:
                return None
            target.is_forgotten = True
            target.forget_reason = reason
            target.updated_at = utc_now()
            return target

    def _locate(
        self, t: TenantData, container_tag: str | None, memory_id: str | None, content: str | None
    ) -> MemoryEntry | None:
        tags = [container_tag] if container_tag else None
        for m in t.memories.values():
            if m.is_forgotten or not tags_match(m.container_tags, tags):
                continue
            if memory_id is not None and m.id == memory_id:
                return m
            if memory_id is None and content is not None and m.memory == content and m.is_latest:
                return m
        return None

    def update_memory(
        self,
        tenant: str,
        *,
        container_tag: str,
        new_content: str,
        memory_id: str | None = None,
        content: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        forget_after: str | None = None,
        forget_reason: str | None = None,
    ) -> MemoryEntry | None:
        """Create a new version of a memory (the old one stops being latest)."""
        with self._lock:
            t = self._tenant(tenant)
            old = self._locate(t, container_tag, memory_id, content)
            if old is None:
                return None
            old.is_latest = False
            now = utc_now()
            new = MemoryEntry(
                id=self.new_id(),
                tenant=tenant,
                memory=new_content,
                container_tags=list(old.container_tags),
                metadata=dict(metadata) if metadata is not None else dict(old.metadata),
                created_at=now,
                updated_at=now,
                document_id=old.document_id,
                is_static=old.is_static,
                version=old.version + 1,
                parent_id=old.id,
                root_id=old.root_id or old.id,
                forget_after=forget_after,
                forget_reason=forget_reason,
                bucket=old.bucket,
            )
            t.memories[new.id] = new
            return new

    def add_memory(
        self,
        tenant: str,
        content: str,
        *,
        container_tag: str = DEFAULT_CONTAINER_TAG,
        metadata: Mapping[str, Any] | None = None,
        static: bool = False,
        bucket: str | None = None,
        title: str | None = None,
        filepath: str | None = None,
    ) -> MemoryEntry:
        """Seed one memory (plus a backing document holding the same text)."""
        doc = self.add_document(
            tenant,
            content,
            container_tags=[container_tag],
            metadata=metadata,
            title=title,
            filepath=filepath,
            static=static,
            bucket=bucket,
            memories=[content],
        )
        with self._lock:
            doc.ready_at = 0.0
            return next(
                m for m in self._tenant(tenant).memories.values() if m.document_id == doc.id
            )

    def seed(
        self,
        tenant: str,
        memories: Iterable[SeedMemory | str | Mapping[str, Any]],
        *,
        container_tag: str = DEFAULT_CONTAINER_TAG,
    ) -> list[MemoryEntry]:
        """Seed several memories; plain strings go to ``container_tag``.

        Mappings accept the :class:`SeedMemory` field names (``containerTag`` and
        ``namespace`` are accepted as aliases of ``container_tag``).
        """
        out: list[MemoryEntry] = []
        for item in memories:
            if isinstance(item, str):
                spec = SeedMemory(content=item, container_tag=container_tag)
            elif isinstance(item, SeedMemory):
                spec = item
            else:
                data = dict(item)
                tag = data.pop("containerTag", None) or data.pop("namespace", None)
                data.setdefault("container_tag", tag or container_tag)
                spec = SeedMemory(**data)
            out.append(
                self.add_memory(
                    tenant,
                    spec.content,
                    container_tag=spec.container_tag,
                    metadata=spec.metadata,
                    static=spec.static,
                    bucket=spec.bucket,
                    title=spec.title,
                    filepath=spec.filepath,
                )
            )
        return out
