"""What a shadow comparison reads of a request and of an answer.

A read's **partition** is its key without the query text: two reads of one partition differ in
nothing but their query (same tenant, SDK generation, route, container tag or namespace, limit,
filters, headers). Every adapter ends its key with the canonical JSON of what it sends (the SDK
adapters' request body or arguments, the httpx transport's body; see ``Read.key``), and the
route table names the field that holds the query (``Route.query``): the partition is that key
with that field taken out. A key of any other shape has no partition, and its reads are never
compared.

An answer's **record ids** are the ids of its ranked results, in order: ``results[].id`` (memory
searches), ``results[].documentId`` (3.x document searches) or ``searchResults.results[]`` (3.x
profile). Two answers **agree** when their first three ids are the same, in the same order, and
the Jaccard index of their id sets is at least 0.9.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any, Final

from .._api.routes import ROUTES
from .._api.tenancy import canonical

__all__ = ["AGREEMENT", "TOP", "agree", "ids_of", "partition_of"]

# The fields a query travels in: the route table's, and the 3.x OpenAI middleware's profile.
_QUERY_FIELDS: Final = frozenset({row.query for row in ROUTES if row.query} | {"query_text"})
_ID_FIELDS: Final = ("id", "documentId")
TOP: Final = 3
AGREEMENT: Final = 0.9  # the least Jaccard index of the two id sets


def partition_of(key: Hashable, query: str | None) -> Hashable | None:
    """The partition of a read keyed ``key`` with query text ``query``, or ``None``."""
    if not query or type(key) is not tuple or not key or type(key[-1]) is not str:
        return None
    try:
        sent = json.loads(key[-1])
    except ValueError:
        return None
    # The body alone, or the body first beside the call's extra body, params and headers (3.x).
    body = sent[0] if isinstance(sent, list) and sent else sent
    if not isinstance(body, dict):
        return None
    fields = [name for name in _QUERY_FIELDS if body.get(name) == query]
    if len(fields) != 1:
        return None
    del body[fields[0]]
    return (*key[:-1], canonical(sent))


def _as_json(answer: Any) -> Any:
    """The JSON of an answer: a mapping, an SDK model (pydantic), an httpx response or the
    OpenAI middleware's ``SupermemoryProfileSearch`` (its ``search_results``)."""
    if isinstance(answer, Mapping):
        return answer
    dump = getattr(answer, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True)
    content = getattr(answer, "content", None)
    if isinstance(content, bytes):
        return json.loads(content)
    found = getattr(answer, "search_results", None)  # the OpenAI middleware's profile search
    return {"searchResults": found} if isinstance(found, Mapping) else None


def ids_of(answer: Any) -> tuple[str, ...] | None:
    """The record ids of ``answer``'s ranked results, in order; ``None``: none can be read."""
    data = _as_json(answer)
    if not isinstance(data, Mapping):
        return None
    results = data.get("results")
    if results is None:
        found = data.get("searchResults")
        results = found.get("results") if isinstance(found, Mapping) else None
    if not isinstance(results, list):
        return None
    ids: list[str] = []
    for item in results:
        ident = next(
            (item.get(name) for name in _ID_FIELDS if isinstance(item, Mapping) and item.get(name)),
            None,
        )
        if not isinstance(ident, str):
            return None
        ids.append(ident)
    return tuple(ids)


def agree(served: tuple[str, ...] | None, fetched: tuple[str, ...] | None) -> bool:
    """True when an answer with ids ``served`` would have done for one with ids ``fetched``.

    Unreadable ids never agree: a comparison that cannot be made counts as a disagreement.
    """
    if served is None or fetched is None or served[:TOP] != fetched[:TOP]:
        return False
    union = set(served) | set(fetched)
    return not union or len(set(served) & set(fetched)) / len(union) >= AGREEMENT
