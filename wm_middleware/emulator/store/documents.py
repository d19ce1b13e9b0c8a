"""Documents: add, update, look up, list, delete; derive their memories and chunks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..text import split_sentences
from .base import StoreBase
from .model import (
    CHUNK_CHARS,
    DEFAULT_CONTAINER_TAG,
    MAX_MEMORIES_PER_DOCUMENT,
    Chunk,
    Document,
    MemoryEntry,
    Predicate,
    TenantData,
    filepath_match,
    memory_texts,
    new_document,
    str_or_none,
    summary_of,
    tags_match,
    utc_now,
)

__all__ = ["DocumentStore"]


class DocumentStore(StoreBase):
    """The document half of the store."""

    def add_document(
        self,
        tenant: str,
        content: str,
        *,
        container_tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        doc_id: str | None = None,
        custom_id: str | None = None,
        title: str | None = None,
        doc_type: str = "text",
        filepath: str | None = None,
        task_type: str = "memory",
        supporting_context: str | None = None,
        group: Mapping[str, Any] | None = None,
        static: bool = False,
        bucket: str | None = None,
        memories: Sequence[str] | None = None,
        append: bool = False,
    ) -> Document:
        """Create a document (or update it when ``doc_id``/``custom_id`` already exists).

        ``memories`` overrides the derived memory texts (default: one per sentence).
        With ``append=True`` and an existing document, the new content is appended and
        the existing memories are kept (5.x "reuse an existing ID" semantics).
        """
        tags = list(container_tags or []) or [DEFAULT_CONTAINER_TAG]
        with self._lock:
            t = self._tenant(tenant)
            existing = self._existing(t, doc_id, custom_id)
            if existing is not None:
                if container_tags:
                    existing.container_tags = tags
                self._merge(t, existing, content, memories=memories, append=append)
                if metadata is not None:
                    existing.metadata = {**existing.metadata, **dict(metadata)}
                self._set_given(existing, title=title, filepath=filepath, group=group)
                self._touch_namespace(t, existing.container_tags)
                return existing
            doc = new_document(
                doc_id or self.new_id(),
                tenant,
                content,
                tags,
                metadata=metadata,
                custom_id=custom_id,
                title=title,
                doc_type=doc_type,
                filepath=filepath,
                task_type=task_type,
                supporting_context=supporting_context,
                group=group,
                static=static,
                bucket=bucket,
            )
            self._schedule(doc)
            t.documents[doc.id] = doc
            self._derive(t, doc, content, memories)
            self._touch_namespace(t, tags)
            return doc

    @staticmethod
    def _existing(t: TenantData, doc_id: str | None, custom_id: str | None) -> Document | None:
        """The document an add names by id, else by custom id, if it exists."""
        existing = t.documents.get(doc_id) if doc_id is not None else None
        if existing is None and custom_id is not None:
            existing = next((d for d in t.documents.values() if d.custom_id == custom_id), None)
        return existing

    def _merge(
        self,
        t: TenantData,
        doc: Document,
        content: str,
        *,
        memories: Sequence[str] | None,
        append: bool,
    ) -> None:
        """New content for an existing document: appended (keeping its memories) or replacing."""
        merged = (doc.content + "\n\n" + content) if append else content
        self._replace_content(
            t, doc, merged, new_memories=content if append else None, memories=memories
        )

    @staticmethod
    def _set_given(
        doc: Document,
        *,
        custom_id: str | None = None,
        title: str | None = None,
        filepath: str | None = None,
        supporting_context: str | None = None,
        group: Mapping[str, Any] | None = None,
    ) -> None:
        """Set the fields given (not ``None``) of a document written again; stamp the update."""
        if custom_id is not None:
            doc.custom_id = custom_id
        if title is not None:
            doc.title = title
        if filepath is not None:
            doc.filepath = filepath
        if supporting_context is not None:
            doc.supporting_context = supporting_context
        if group is not None:
            doc.group = dict(group)
        doc.updated_at = utc_now()

    def _derive(
        self, t: TenantData, doc: Document, content: str, memories: Sequence[str] | None
    ) -> None:
        texts = list(memories) if memories is not None else memory_texts(content)
        if doc.task_type != "superrag":
            for text in texts[:MAX_MEMORIES_PER_DOCUMENT]:
                mem = MemoryEntry(
                    id=self.new_id(),
                    tenant=doc.tenant,
                    memory=text,
                    container_tags=list(doc.container_tags),
                    metadata=dict(doc.metadata),
                    created_at=doc.updated_at,
                    updated_at=doc.updated_at,
                    document_id=doc.id,
                    is_static=doc.is_static or bool(doc.metadata.get("isStatic", False)),
                    bucket=doc.bucket or str_or_none(doc.metadata.get("bucket")),
                )
                t.memories[mem.id] = mem
        self._rechunk(t, doc)

    def _rechunk(self, t: TenantData, doc: Document) -> None:
        chunks: list[Chunk] = []
        current = ""
        for sentence in split_sentences(doc.content) or [doc.content]:
            if current and len(current) + len(sentence) + 1 > CHUNK_CHARS:
                chunks.append(self._chunk(doc, len(chunks), current))
                current = ""
            current = f"{current} {sentence}".strip()
        if current:
            chunks.append(self._chunk(doc, len(chunks), current))
        t.chunks[doc.id] = chunks

    def _chunk(self, doc: Document, position: int, content: str) -> Chunk:
        return Chunk(
            id=self.new_id(),
            document_id=doc.id,
            position=position,
            content=content,
            created_at=doc.updated_at,
        )

    def _replace_content(
        self,
        t: TenantData,
        doc: Document,
        content: str,
        *,
        new_memories: str | None = None,
        memories: Sequence[str] | None = None,
    ) -> None:
        if new_memories is None:
            for mid in [m.id for m in t.memories.values() if m.document_id == doc.id]:
                del t.memories[mid]
        doc.content = content
        doc.summary = summary_of(content)
        doc.revision += 1
        doc.updated_at = utc_now()
        self._schedule(doc)
        self._derive(t, doc, new_memories if new_memories is not None else content, memories)

    def update_document(
        self,
        tenant: str,
        doc_id: str,
        *,
        content: str | None = None,
        container_tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        custom_id: str | None = None,
        filepath: str | None = None,
        title: str | None = None,
        supporting_context: str | None = None,
        group: Mapping[str, Any] | None = None,
    ) -> Document | None:
        """Update a document by id or custom id; ``None`` when it does not exist.

        New content replaces the derived memories and chunks; metadata is replaced.
        """
        with self._lock:
            t = self._tenant(tenant)
            doc = self._find(t, doc_id)
            if doc is None:
                return None
            if container_tags:
                doc.container_tags = list(container_tags)
                for m in t.memories.values():
                    if m.document_id == doc.id:
                        m.container_tags = list(container_tags)
                self._touch_namespace(t, container_tags)
            if metadata is not None:
                doc.metadata = dict(metadata)
                for m in t.memories.values():
                    if m.document_id == doc.id:
                        m.metadata = {**m.metadata, **dict(metadata)}
            self._set_given(
                doc,
                custom_id=custom_id,
                title=title,
                filepath=filepath,
                supporting_context=supporting_context,
                group=group,
            )
            if content is not None and content != doc.content:
                self._replace_content(t, doc, content)
            return doc

    def _find(self, t: TenantData, doc_id: str) -> Document | None:
        doc = t.documents.get(doc_id)
        if doc is None:
            doc = next((d for d in t.documents.values() if d.custom_id == doc_id), None)
        return doc

    def get_document(self, tenant: str, doc_id: str) -> Document | None:
        """Look a document up by id, falling back to its custom id."""
        with self._lock:
            return self._find(self._tenant(tenant), doc_id)

    def document_memories(self, tenant: str, doc_id: str) -> list[MemoryEntry]:
        """Return the memories derived from a document (all versions)."""
        with self._lock:
            t = self._tenant(tenant)
            return [m for m in t.memories.values() if m.document_id == doc_id]

    def document_chunks(self, tenant: str, doc_id: str) -> list[Chunk]:
        """Return a document's chunks in position order."""
        with self._lock:
            return list(self._tenant(tenant).chunks.get(doc_id, []))

    def delete_document(self, tenant: str, doc_id: str) -> bool:
        """Delete a document with its memories and chunks; ``False`` if unknown."""
        with self._lock:
            t = self._tenant(tenant)
            doc = self._find(t, doc_id)
            if doc is None:
                return False
            del t.documents[doc.id]
            t.chunks.pop(doc.id, None)
            for mid in [m.id for m in t.memories.values() if m.document_id == doc.id]:
                del t.memories[mid]
            return True

    def list_documents(
        self,
        tenant: str,
        *,
        container_tags: Sequence[str] | None = None,
        filepath: str | None = None,
        predicate: Predicate | None = None,
        sort: str = "createdAt",
        descending: bool = True,
        include_pending: bool = True,
    ) -> list[Document]:
        """Return a tenant's documents matching the scope, sorted."""
        with self._lock:
            docs = [
                d
                for d in self._tenant(tenant).documents.values()
                if tags_match(d.container_tags, container_tags)
                and filepath_match(d.filepath, filepath)
                and (predicate is None or predicate(d.metadata))
                and (include_pending or d.ready)
            ]
        key = "updated_at" if sort == "updatedAt" else "created_at"
        docs.sort(key=lambda d: (getattr(d, key), d.id), reverse=descending)
        return docs
