"""In-memory document/memory store backing the emulator.

Contract:

* Everything is scoped by *tenant* (the API key the request authenticated with) and,
  inside a tenant, by container tag. A Supermemory 5.x *namespace* is the same thing
  as a 3.x *container tag*, so data written through one SDK generation is visible
  through the other.
* Adding a document immediately derives its memories (one per sentence, capped) and
  its retrieval chunks. It is *indexed* ``indexing_delay`` seconds after the write (``0``:
  at once): until then its status walks through :data:`INDEXING_STAGES` (``queued ->
  extracting -> chunking -> embedding -> indexing``, equal slices of the delay) and it,
  its memories and its chunks stay invisible to search, profile and the memory and chunk
  lists; then it reports ``done``. New content (an update, or 5.x content appended under
  an existing id) indexes the document again, over the delay in force at that write;
  changing the delay never reschedules a document already written.
* Deletes and forgets apply at once.
* All public methods are thread-safe (one re-entrant lock): the HTTP server thread and
  test code may call them concurrently.
"""

from __future__ import annotations

import math
import random
import string
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ._text import rank, split_sentences

__all__ = [
    "DEFAULT_CONTAINER_TAG",
    "INDEXED",
    "INDEXING_STAGES",
    "Chunk",
    "Document",
    "MemoryEntry",
    "MemoryStore",
    "Predicate",
    "SeedMemory",
    "check_indexing_delay",
    "iso",
]

DEFAULT_CONTAINER_TAG = "sm_project_default"
MAX_MEMORIES_PER_DOCUMENT = 32
CHUNK_CHARS = 400

INDEXING_STAGES = ("queued", "extracting", "chunking", "embedding", "indexing")
"""The statuses a document reports while it is indexed, in order, each for an equal slice."""
INDEXED = "done"
"""The status of a document search, profile and the lists can see."""

Predicate = Callable[[Mapping[str, Any]], bool]
"""A metadata filter: receives the merged metadata of a memory/document."""


def iso(ts: datetime) -> str:
    """Format ``ts`` the way the Supermemory API does (UTC, milliseconds, ``Z``)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def check_indexing_delay(value: object) -> float:
    """``value`` as seconds of indexing delay.

    Raises:
        ValueError: ``value`` is not a finite number ``>= 0`` (the message names
            ``indexing_delay``).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"indexing_delay must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"indexing_delay must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Document:
    """A stored source document (3.x "document", 5.x "document")."""

    id: str
    tenant: str
    content: str
    container_tags: list[str]
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    ready_at: float
    custom_id: str | None = None
    title: str | None = None
    type: str = "text"
    filepath: str | None = None
    summary: str | None = None
    task_type: str = "memory"
    url: str | None = None
    supporting_context: str | None = None
    group: dict[str, Any] = field(default_factory=dict)
    revision: int = 1
    is_static: bool = False
    bucket: str | None = None
    queued_at: float = 0.0
    """``time.monotonic()`` of the write that (re)started indexing; ``ready_at`` ends it."""

    @property
    def ready(self) -> bool:
        """Whether indexing has finished (always true without an indexing delay)."""
        return time.monotonic() >= self.ready_at

    @property
    def status(self) -> str:
        """``"done"`` once indexed, else the stage of :data:`INDEXING_STAGES` reached so far."""
        now = time.monotonic()
        if now >= self.ready_at:
            return INDEXED
        span = self.ready_at - self.queued_at
        done = max(now - self.queued_at, 0.0) / span if span > 0 else 0.0
        return INDEXING_STAGES[min(int(done * len(INDEXING_STAGES)), len(INDEXING_STAGES) - 1)]


@dataclass
class MemoryEntry:
    """A learned memory (one fact), optionally derived from a document."""

    id: str
    tenant: str
    memory: str
    container_tags: list[str]
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    document_id: str | None = None
    is_static: bool = False
    is_inference: bool = False
    is_latest: bool = True
    is_forgotten: bool = False
    version: int = 1
    parent_id: str | None = None
    root_id: str | None = None
    forget_after: str | None = None
    forget_reason: str | None = None
    bucket: str | None = None


@dataclass
class Chunk:
    """A retrieval chunk of a document's content."""

    id: str
    document_id: str
    position: int
    content: str
    created_at: datetime


@dataclass
class SeedMemory:
    """One memory to seed: ``content`` in ``container_tag`` with optional metadata.

    ``static`` puts it into the profile's static section; ``bucket`` into a profile
    bucket. A backing document with the same content is created as well.
    """

    content: str
    container_tag: str = DEFAULT_CONTAINER_TAG
    metadata: dict[str, Any] = field(default_factory=dict)
    static: bool = False
    bucket: str | None = None
    title: str | None = None
    filepath: str | None = None


@dataclass
class _Tenant:
    documents: dict[str, Document] = field(default_factory=dict)
    memories: dict[str, MemoryEntry] = field(default_factory=dict)
    chunks: dict[str, list[Chunk]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    namespace_buckets: dict[str, dict[str, str]] = field(default_factory=dict)
    namespace_context: dict[str, str | None] = field(default_factory=dict)
    namespace_created: dict[str, datetime] = field(default_factory=dict)
    organizational_context: str | None = None


def _tags_match(item_tags: Sequence[str], wanted: Sequence[str] | None) -> bool:
    return not wanted or any(t in item_tags for t in wanted)


def _filepath_match(path: str | None, wanted: str | None) -> bool:
    if not wanted:
        return True
    if path is None:
        return False
    return path.startswith(wanted) if wanted.endswith("/") else path == wanted


class MemoryStore:
    """Thread-safe, tenant-scoped in-memory store (see module docstring)."""

    def __init__(self, *, seed: int | None = None, indexing_delay: float = 0.0) -> None:
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._tenants: dict[str, _Tenant] = {}
        self._indexing_delay = check_indexing_delay(indexing_delay)

    @property
    def indexing_delay(self) -> float:
        """Seconds from a write until its document is indexed; applies to later writes.

        Raises:
            ValueError: on assignment, not a finite number ``>= 0``.
        """
        return self._indexing_delay

    @indexing_delay.setter
    def indexing_delay(self, value: float) -> None:
        self._indexing_delay = check_indexing_delay(value)

    def _schedule(self, doc: Document) -> None:
        """Start (again) indexing ``doc`` now, over the current delay."""
        doc.queued_at = time.monotonic()
        doc.ready_at = doc.queued_at + self._indexing_delay

    # ------------------------------------------------------------------ basics

    def new_id(self, length: int = 22) -> str:
        """Return a fresh random id shaped like Supermemory's (alphanumeric)."""
        alphabet = string.ascii_letters + string.digits
        with self._lock:
            return "".join(self._rng.choice(alphabet) for _ in range(length))

    def _tenant(self, tenant: str) -> _Tenant:
        t = self._tenants.get(tenant)
        if t is None:
            t = self._tenants[tenant] = _Tenant()
        return t

    def clear(self, tenant: str | None = None) -> None:
        """Drop all data (of one tenant, or of every tenant)."""
        with self._lock:
            if tenant is None:
                self._tenants.clear()
            else:
                self._tenants.pop(tenant, None)

    def tenants(self) -> list[str]:
        """Return the API keys that have data."""
        with self._lock:
            return list(self._tenants)

    def _touch_namespace(self, t: _Tenant, tags: Iterable[str]) -> None:
        for tag in tags:
            t.namespace_created.setdefault(tag, _now())

    # --------------------------------------------------------------- documents

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
            existing: Document | None = None
            if doc_id is not None:
                existing = t.documents.get(doc_id)
            if existing is None and custom_id is not None:
                existing = next((d for d in t.documents.values() if d.custom_id == custom_id), None)
            now = _now()
            if existing is not None:
                new_content = (existing.content + "\n\n" + content) if append else content
                self._replace_content(
                    t,
                    existing,
                    new_content,
                    new_memories=content if append else None,
                    memories=memories,
                )
                existing.container_tags = tags if container_tags else existing.container_tags
                if metadata is not None:
                    existing.metadata = {**existing.metadata, **dict(metadata)}
                if title is not None:
                    existing.title = title
                if filepath is not None:
                    existing.filepath = filepath
                if group is not None:
                    existing.group = dict(group)
                existing.updated_at = now
                self._touch_namespace(t, existing.container_tags)
                return existing
            doc = Document(
                id=doc_id or self.new_id(),
                tenant=tenant,
                content=content,
                container_tags=tags,
                metadata=dict(metadata or {}),
                created_at=now,
                updated_at=now,
                ready_at=0.0,
                custom_id=custom_id,
                title=title or _title_of(content),
                type=doc_type if not _is_url(content) else "webpage",
                filepath=filepath,
                summary=_summary_of(content),
                task_type=task_type,
                url=content.strip() if _is_url(content) else None,
                supporting_context=supporting_context,
                group=dict(group or {}),
                is_static=static,
                bucket=bucket,
            )
            self._schedule(doc)
            t.documents[doc.id] = doc
            self._derive(t, doc, content, memories)
            self._touch_namespace(t, tags)
            return doc

    def _derive(
        self, t: _Tenant, doc: Document, content: str, memories: Sequence[str] | None
    ) -> None:
        texts = list(memories) if memories is not None else _memory_texts(content)
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
                    bucket=doc.bucket or _str_or_none(doc.metadata.get("bucket")),
                )
                t.memories[mem.id] = mem
        self._rechunk(t, doc)

    def _rechunk(self, t: _Tenant, doc: Document) -> None:
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
        t: _Tenant,
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
        doc.summary = _summary_of(content)
        doc.revision += 1
        doc.updated_at = _now()
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
            if custom_id is not None:
                doc.custom_id = custom_id
            if filepath is not None:
                doc.filepath = filepath
            if title is not None:
                doc.title = title
            if supporting_context is not None:
                doc.supporting_context = supporting_context
            if group is not None:
                doc.group = dict(group)
            if content is not None and content != doc.content:
                self._replace_content(t, doc, content)
            doc.updated_at = _now()
            return doc

    def _find(self, t: _Tenant, doc_id: str) -> Document | None:
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
                if _tags_match(d.container_tags, container_tags)
                and _filepath_match(d.filepath, filepath)
                and (predicate is None or predicate(d.metadata))
                and (include_pending or d.ready)
            ]
        key = "updated_at" if sort == "updatedAt" else "created_at"
        docs.sort(key=lambda d: (getattr(d, key), d.id), reverse=descending)
        return docs

    # ---------------------------------------------------------------- memories

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
                if not _tags_match(m.container_tags, container_tags):
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
                    and _filepath_match(docs[m.document_id].filepath, filepath)
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
            target.updated_at = _now()
            return target

    def _locate(
        self, t: _Tenant, container_tag: str | None, memory_id: str | None, content: str | None
    ) -> MemoryEntry | None:
        tags = [container_tag] if container_tag else None
        for m in t.memories.values():
            if m.is_forgotten or not _tags_match(m.container_tags, tags):
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
            now = _now()
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

    # ------------------------------------------------------- settings/profiles

    def settings(self, tenant: str) -> dict[str, Any]:
        """Return (a copy of) the tenant's organisation settings."""
        with self._lock:
            return dict(self._tenant(tenant).settings)

    def update_settings(self, tenant: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``values`` into the tenant's settings and return the new settings."""
        with self._lock:
            s = self._tenant(tenant).settings
            s.update(values)
            return dict(s)

    def buckets(self, tenant: str, namespace: str) -> dict[str, str]:
        """Effective profile buckets (organisation settings + namespace additions)."""
        with self._lock:
            t = self._tenant(tenant)
            out: dict[str, str] = {}
            for b in t.settings.get("profileBuckets") or []:
                if isinstance(b, Mapping) and isinstance(b.get("key"), str):
                    out[b["key"]] = str(b.get("description") or "")
            out.update(t.namespace_buckets.get(namespace, {}))
            return out

    def set_buckets(
        self, tenant: str, namespace: str, buckets: Mapping[str, str]
    ) -> dict[str, str]:
        """Add or replace namespace-owned bucket definitions."""
        with self._lock:
            t = self._tenant(tenant)
            t.namespace_buckets.setdefault(namespace, {}).update(buckets)
            self._touch_namespace(t, [namespace])
            return self.buckets(tenant, namespace)

    def delete_buckets(self, tenant: str, namespace: str, names: Iterable[str]) -> dict[str, str]:
        """Remove namespace-owned bucket definitions."""
        with self._lock:
            own = self._tenant(tenant).namespace_buckets.get(namespace, {})
            for name in names:
                own.pop(name, None)
            return self.buckets(tenant, namespace)

    def profile(
        self,
        tenant: str,
        container_tags: Sequence[str] | None,
        *,
        predicate: Predicate | None = None,
        dynamic_limit: int = 20,
    ) -> tuple[list[MemoryEntry], list[MemoryEntry], dict[str, list[MemoryEntry]]]:
        """Return ``(static, dynamic, buckets)`` memories, most recently updated first."""
        mems = self.list_memories(tenant, container_tags=container_tags, predicate=predicate)
        mems.sort(key=lambda m: (m.updated_at, m.id), reverse=True)
        static = [m for m in mems if m.is_static]
        dynamic = [m for m in mems if not m.is_static][:dynamic_limit]
        buckets: dict[str, list[MemoryEntry]] = {}
        for m in mems:
            if m.bucket:
                buckets.setdefault(m.bucket, []).append(m)
        return static, dynamic, buckets

    # -------------------------------------------------------------- namespaces

    def namespaces(self, tenant: str) -> list[str]:
        """Return every namespace (container tag) the tenant has touched."""
        with self._lock:
            t = self._tenant(tenant)
            names = set(t.namespace_created)
            for d in t.documents.values():
                names.update(d.container_tags)
            return sorted(names)

    def namespace_info(self, tenant: str, namespace: str) -> tuple[datetime, str | None]:
        """Return ``(created_at, supporting_context)`` for a namespace."""
        with self._lock:
            t = self._tenant(tenant)
            created = t.namespace_created.setdefault(namespace, _now())
            return created, t.namespace_context.get(namespace)

    def set_namespace_context(self, tenant: str, namespace: str, context: str | None) -> None:
        """Set a namespace's supporting context."""
        with self._lock:
            t = self._tenant(tenant)
            self._touch_namespace(t, [namespace])
            t.namespace_context[namespace] = context

    def delete_namespace(
        self, tenant: str, namespace: str, move_to: str | None = None
    ) -> tuple[int, int]:
        """Delete (or move to ``move_to``) a namespace; returns (documents, memories)."""
        with self._lock:
            t = self._tenant(tenant)
            docs = [d for d in t.documents.values() if namespace in d.container_tags]
            mems = [m for m in t.memories.values() if namespace in m.container_tags]
            if move_to is not None:
                for d in docs:
                    d.container_tags = [move_to if x == namespace else x for x in d.container_tags]
                for m in mems:
                    m.container_tags = [move_to if x == namespace else x for x in m.container_tags]
            if move_to is None:
                for d in docs:
                    self.delete_document(tenant, d.id)
                for m in mems:
                    t.memories.pop(m.id, None)
            else:
                self._touch_namespace(t, [move_to])
            t.namespace_created.pop(namespace, None)
            t.namespace_context.pop(namespace, None)
            t.namespace_buckets.pop(namespace, None)
            return len(docs), len(mems)

    def organizational_context(self, tenant: str) -> str | None:
        """Return the organisation-wide supporting context."""
        with self._lock:
            return self._tenant(tenant).organizational_context

    def set_organizational_context(self, tenant: str, context: str | None) -> None:
        """Set the organisation-wide supporting context."""
        with self._lock:
            self._tenant(tenant).organizational_context = context


def _is_url(content: str) -> bool:
    c = content.strip()
    return c.startswith(("http://", "https://")) and " " not in c


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _memory_texts(content: str) -> list[str]:
    if _is_url(content):
        return [content.strip()]
    sentences = [s for s in split_sentences(content) if len(s) > 2]
    return sentences or ([content.strip()] if content.strip() else [])


def _title_of(content: str) -> str:
    first = (split_sentences(content) or [content.strip()])[0] if content.strip() else "Untitled"
    return first if len(first) <= 60 else first[:57].rstrip() + "..."


def _summary_of(content: str) -> str:
    text = " ".join(content.split())
    return text if len(text) <= 200 else text[:197].rstrip() + "..."
