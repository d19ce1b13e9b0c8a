"""The emulator's data: documents, memories, chunks, and the indexing schedule.

Contract: plain dataclasses and pure helpers, no locking and no HTTP. A document is
*indexed* between ``queued_at`` and ``ready_at`` (``time.monotonic()`` values): its status
walks through :data:`INDEXING_STAGES`, one equal slice each, then reads :data:`INDEXED`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..text import split_sentences

__all__ = [
    "CHUNK_CHARS",
    "DEFAULT_CONTAINER_TAG",
    "INDEXED",
    "INDEXING_STAGES",
    "MAX_MEMORIES_PER_DOCUMENT",
    "Chunk",
    "Document",
    "MemoryEntry",
    "Predicate",
    "SeedMemory",
    "TenantData",
    "check_indexing_delay",
    "filepath_match",
    "is_url",
    "iso",
    "memory_texts",
    "new_document",
    "str_or_none",
    "summary_of",
    "tags_match",
    "title_of",
    "utc_now",
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


def utc_now() -> datetime:
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
    def dreaming_status(self) -> str:
        """Memory generation: ``"dreaming"`` until indexed, then ``"done"``."""
        return "done" if self.ready else "dreaming"

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
class TenantData:
    """Everything one API key has stored."""

    documents: dict[str, Document] = field(default_factory=dict)
    memories: dict[str, MemoryEntry] = field(default_factory=dict)
    chunks: dict[str, list[Chunk]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    namespace_buckets: dict[str, dict[str, str]] = field(default_factory=dict)
    namespace_context: dict[str, str | None] = field(default_factory=dict)
    namespace_created: dict[str, datetime] = field(default_factory=dict)
    organizational_context: str | None = None


def tags_match(item_tags: Sequence[str], wanted: Sequence[str] | None) -> bool:
    return not wanted or any(t in item_tags for t in wanted)


def filepath_match(path: str | None, wanted: str | None) -> bool:
    if not wanted:
        return True
    if path is None:
        return False
    return path.startswith(wanted) if wanted.endswith("/") else path == wanted


def is_url(content: str) -> bool:
    c = content.strip()
    return c.startswith(("http://", "https://")) and " " not in c


def str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def memory_texts(content: str) -> list[str]:
    if is_url(content):
        return [content.strip()]
    sentences = [s for s in split_sentences(content) if len(s) > 2]
    return sentences or ([content.strip()] if content.strip() else [])


def title_of(content: str) -> str:
    first = (split_sentences(content) or [content.strip()])[0] if content.strip() else "Untitled"
    return first if len(first) <= 60 else first[:57].rstrip() + "..."


def summary_of(content: str) -> str:
    text = " ".join(content.split())
    return text if len(text) <= 200 else text[:197].rstrip() + "..."


def new_document(
    doc_id: str,
    tenant: str,
    content: str,
    tags: list[str],
    *,
    metadata: Mapping[str, Any] | None,
    doc_type: str,
    task_type: str,
    static: bool,
    group: Mapping[str, Any] | None,
    custom_id: str | None,
    title: str | None,
    filepath: str | None,
    supporting_context: str | None,
    bucket: str | None,
) -> Document:
    """A new document of ``content``: title, summary, type and URL derived from it.

    The indexing window (``queued_at`` / ``ready_at``) is the store's to set.
    """
    created = utc_now()
    url = content.strip() if is_url(content) else None
    return Document(
        id=doc_id,
        tenant=tenant,
        content=content,
        container_tags=tags,
        metadata=dict(metadata or {}),
        created_at=created,
        updated_at=created,
        ready_at=0.0,
        custom_id=custom_id,
        title=title or title_of(content),
        type="webpage" if url else doc_type,
        filepath=filepath,
        summary=summary_of(content),
        task_type=task_type,
        url=url,
        supporting_context=supporting_context,
        group=dict(group or {}),
        is_static=static,
        bucket=bucket,
    )
