"""OpenInference attributes (opt-in): memory reads as retrievals in Phoenix-style backends.

Switched on by the ``openinference`` setting (``WM_MIDDLEWARE_OPENINFERENCE=true``). A
read gets ``openinference.span.kind = RETRIEVER`` and a ``metadata`` JSON object naming its cache
result, tier and SDK operation. The query (``input.value``) and the documents
(``retrieval.documents.{i}.document.{id,content,score}``) are content: exported only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.util.types import AttributeValue

from . import names
from .spans import failed

__all__ = ["read_attributes", "read_metadata", "retrieval_documents"]

_ID_FIELDS = ("id", "documentId", "document_id", "memoryId", "memory_id")
_CONTENT_FIELDS = ("memory", "content", "chunk", "text", "summary", "title")
_SCORE_FIELDS = ("score", "similarity")


def read_attributes(query: str | None, capture_content: bool) -> dict[str, AttributeValue]:
    """What a read's span carries from its start."""
    found: dict[str, AttributeValue] = {names.OI_SPAN_KIND: names.OI_RETRIEVER}
    if capture_content and query is not None:
        found[names.OI_INPUT] = query
    return found


def read_metadata(
    operation: str, result: str, tier: str | None, value: Any, capture_content: bool
) -> dict[str, AttributeValue]:
    """What a read's span gets with its outcome: the metadata, and the documents if allowed."""
    metadata = {names.CACHE_RESULT: result, names.SM_OPERATION: operation}
    if tier is not None:
        metadata[names.CACHE_TIER] = tier
    found: dict[str, AttributeValue] = {names.OI_METADATA: json.dumps(metadata, sort_keys=True)}
    if capture_content:
        for index, document in enumerate(retrieval_documents(value)):
            prefix = f"{names.OI_DOCUMENTS}.{index}.document."
            for field, item in document.items():
                found[prefix + field] = item
    return found


def _plain(value: Any) -> Any:
    """A pydantic model as its dict, an httpx response as its JSON, anything else as is."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()
    if hasattr(value, "json") and hasattr(value, "status_code"):
        return value.json()
    return value


def _first(item: Mapping[str, Any], fields: tuple[str, ...]) -> Any:
    for field in fields:
        found = item.get(field)
        if found is not None:
            return found
    return None


def _document(item: Any) -> dict[str, AttributeValue] | None:
    item = _plain(item)
    if isinstance(item, str):
        return {"content": item}
    if not isinstance(item, Mapping):
        return None
    document: dict[str, AttributeValue] = {}
    found = _first(item, _ID_FIELDS)
    if found is not None:
        document["id"] = str(found)
    content = _first(item, _CONTENT_FIELDS)
    if content is None and isinstance(item.get("chunks"), list):
        parts = [_first(_plain(c), _CONTENT_FIELDS) for c in item["chunks"]]
        content = "\n".join(str(p) for p in parts if p is not None) or None
    if content is not None:
        document["content"] = str(content)
    score = _first(item, _SCORE_FIELDS)
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        document["score"] = float(score)
    return document or None


def retrieval_documents(value: Any) -> list[dict[str, AttributeValue]]:
    """The documents of a read's result (at most ``OI_MAX_DOCUMENTS``), best effort."""
    try:
        plain = _plain(value)
        if isinstance(plain, Mapping):
            plain = _first(plain, ("results", "memories", "documents")) or []
        if not isinstance(plain, (list, tuple)):
            return []
        found = (_document(item) for item in plain[: names.OI_MAX_DOCUMENTS])
        return [document for document in found if document is not None]
    except Exception:
        failed("reading the documents of a result")
        return []
