"""What an adapter says a call is: :class:`Read`, :class:`Write`, and how to :class:`Follow` one.

Adapters build these descriptions; the runtime (:mod:`wm_middleware._runtime`) acts on them, the
telemetry (:mod:`wm_middleware._telemetry`) observes them and the freshness runtime
(:mod:`wm_middleware._freshness`) follows what a :class:`Follow` names. They live here, apart
from all three, so that each imports them and none imports another for them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from ._core import SharedCodec

__all__ = ["Follow", "Read", "Via", "Write", "documents_named", "field_of"]


def _same(value: Any) -> Any:
    return value


def _no_count(value: Any) -> int | None:
    return None


@dataclass(frozen=True, slots=True)
class Read:
    """A cacheable read, as an adapter describes it."""

    operation: str  # "search.memories", "profile", "search", ...
    key: Hashable  # tenant + operation + canonical request
    scopes: tuple[Hashable, ...]  # what writes may invalidate it by
    server: tuple[str, int | None]
    query: str | None = None  # only exported when content capture is switched on
    encode: Callable[[Any], Any] = field(default=_same)
    decode: Callable[[Any], Any] = field(default=_same)
    count: Callable[[Any], int | None] = field(default=_no_count)
    # How a snapshot (what ``encode`` made) crosses the shared tier; None: the tier's own rule.
    share: SharedCodec | None = None
    # The single-flight key: callers join a flight only when key and flight match; None: the key.
    flight: Hashable | None = None
    # The one record a read by id targets (``gen_ai.memory.record.id``), else None.
    record_id: str | None = None
    # Its answer holds indexed documents only (search, profile; not a list of documents): while
    # a write's new documents are indexed, what it answered before the write still stands.
    indexed: bool = False


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


class Via(Protocol):
    """The client that made a write, as the status requests that follow it go through it: its
    own transport (proxy, TLS, resolver), headers and event hooks, never retried. Held weakly:
    once the client is closed or collected, no request is made (:attr:`alive` is false)."""

    asynchronous: bool  # an async client: :meth:`aget` on the caller's loop, not :meth:`get`
    timeout: object  # the write's timeout (per call, else the client's): seconds or httpx's

    @property
    def alive(self) -> bool:
        """The client is still open (and not collected)."""

    def get(self, path: str, params: Mapping[str, str], within: float) -> Any:
        """GET ``path`` below the write's base URL within ``within`` seconds: the
        ``httpx.Response``, whatever its status; raises when none came (a timeout, no
        connection, the client gone). For an async client, from a worker thread of its loop."""

    async def aget(self, path: str, params: Mapping[str, str], within: float) -> Any:
        """:meth:`get` of an async client, on its loop."""


@dataclass(frozen=True, slots=True)
class Follow:
    """How to follow a write's documents: built by the adapter that saw the write.

    ``headers`` are the client's own (credentials included): with the generation and the base
    URL they name the tenant. They are kept in this process only and never logged, traced or
    stored elsewhere. ``via`` is the client the status requests go through.
    """

    generation: Literal[3, 5]
    base_url: str
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    via: Via = field(repr=False, compare=False)
    namespace: str | None = None
    documents: Callable[[Any], list[tuple[str, str]]] = documents_named

    @property
    def tenant(self) -> Hashable:
        return (self.generation, self.base_url.rstrip("/"), self.headers)


@dataclass(frozen=True, slots=True)
class Write:
    """A write, and the scopes it invalidates once it is done (success or not)."""

    operation: str
    scopes: tuple[Hashable, ...]
    server: tuple[str, int | None]
    deletes: bool = False
    # Records the write attempts (``gen_ai.memory.record.count``); None: unknown.
    records: int | None = None
    _: KW_ONLY
    # The semconv operation (``gen_ai.operation.name``): upsert_memory | update_memory |
    # delete_memory | create_memory; the route table names it for every write route.
    operation_name: str
    # The one record an update or delete targets (``gen_ai.memory.record.id``), else None.
    record_id: str | None = None
    # How to follow the documents its answer names until they are indexed (``None``: it
    # indexes nothing, e.g. a delete, which the API applies at once).
    follow: Follow | None = None
    # It only adds new documents (no existing one named): until they are indexed, an indexed
    # read answers what it answered before it.
    creates: bool = False
