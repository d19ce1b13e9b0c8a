"""What a write says: the documents its answer names, their statuses, and how to follow them.

:class:`Follow` and :func:`documents_named` live with the other descriptions adapters build
(:mod:`wm_middleware._calls`); this module adds what only freshness reads: the statuses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._calls import Follow, documents_named, field_of

__all__ = ["FINISHED", "STAGES", "Follow", "documents_named", "field_of", "status_of"]

STAGES: Final = ("queued", "extracting", "chunking", "embedding", "indexing")
"""A document's statuses before ``done``, in order."""
FINISHED: Final = frozenset({"done", "failed", "error"})
"""Statuses after which a document changes no more (``error``: a batch item that failed)."""


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
