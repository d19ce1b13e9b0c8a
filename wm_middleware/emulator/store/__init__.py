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

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .memories import RecallStore
from .model import (
    DEFAULT_CONTAINER_TAG,
    INDEXED,
    INDEXING_STAGES,
    Chunk,
    Document,
    MemoryEntry,
    Predicate,
    SeedMemory,
    check_indexing_delay,
    iso,
    utc_now,
)

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


class MemoryStore(RecallStore):
    """Thread-safe, tenant-scoped in-memory store (see module docstring): documents and
    recall, plus organisation settings, profiles, profile buckets and namespaces."""

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
            created = t.namespace_created.setdefault(namespace, utc_now())
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
