"""What a write says: the documents its answer names, their statuses, and how to follow them."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ["FINISHED", "STAGES", "Follow", "documents_named", "field_of", "status_of"]

STAGES: Final = ("queued", "extracting", "chunking", "embedding", "indexing")
"""A document's statuses before ``done``, in order."""
FINISHED: Final = frozenset({"done", "failed", "error"})
"""Statuses after which a document changes no more (``error``: a batch item that failed)."""


def field_of(item: Any, name: str) -> Any:
    """``item[name]`` of a mapping, ``item.name`` of a model, else ``None``."""
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def documents_named(answer: Any) -> list[tuple[str, str]]:
    """``(id, status)`` of each document a write's answer names; ``[]`` when it names none.

    Takes the SDKs' models (3.x ``{id, status}``, batch ``results``; 5.x ``DocumentRef``,
    ``BatchAddResult``), their JSON, or an ``httpx.Response`` that has been read.
    """
    if type(answer).__name__ == "Response" and hasattr(answer, "is_success"):  # httpx
        try:
            answer = answer.json() if answer.is_success else None
        except Exception:  # unread, or not JSON
            return []
    items = field_of(answer, "results")
    if not isinstance(items, list):
        items = [answer]
    found: list[tuple[str, str]] = []
    for item in items:
        ident, status = field_of(item, "id"), field_of(item, "status")
        if isinstance(ident, str) and ident and isinstance(status, str):
            found.append((ident, status))
    return found


def status_of(document: Any) -> str:
    """A document's status from its GET (3.x top level, 5.x under ``system``); memories still
    being generated (``dreamingStatus: dreaming``) count as not done."""
    system = field_of(document, "system")
    holder = system if isinstance(system, Mapping) else document
    status = field_of(holder, "status")
    if not isinstance(status, str):
        return "unknown"
    if status == "done" and field_of(holder, "dreamingStatus") == "dreaming":
        return "indexing"
    return status


@dataclass(frozen=True, slots=True)
class Follow:
    """How to follow a write's documents: built by the adapter that saw the write.

    ``headers`` are the client's own (credentials included); they are kept in this process only,
    to make the status requests, and never logged, traced or stored elsewhere.
    """

    generation: Literal[3, 5]
    base_url: str
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    namespace: str | None = None
    documents: Callable[[Any], list[tuple[str, str]]] = documents_named

    @property
    def tenant(self) -> Hashable:
        return (self.generation, self.base_url.rstrip("/"), self.headers)
