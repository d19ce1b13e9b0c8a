"""The emulator core (:class:`Emulator`) and its Starlette application.

Contract:

* :class:`Emulator` owns the store, the latency model, the fault injector and the
  request log; it is independent of any server and fully usable from Python.
* :func:`create_app` exposes an :class:`Emulator` over HTTP with the paths the
  ``supermemory`` SDKs send: 3.x (``/v3/...``, ``/v4/...``) and 5.x (``/ns/...``,
  also accepted under a ``/v5`` prefix), plus the control API under ``/_emulator``.
* Per API request, in order: it is recorded/counted, latency is slept, a scheduled
  fault (hang and/or error status) is applied, the ``Authorization: Bearer <key>``
  header is checked (``401`` when missing, or not in ``api_keys`` when that is set),
  then the endpoint runs against the tenant named by the key. Every error answer is
  a JSON body ``{"error": ..., "details": ...}``.
* ``/_emulator/*`` control requests are neither counted, delayed nor faulted; neither is
  ``GET /``, a plain-text page describing the emulator, its controls and the keys with data.
"""

from __future__ import annotations

import asyncio
import json
import math
import mimetypes
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .faults import (
    FaultDecision,
    FaultInjector,
    FaultRule,
    LatencyModel,
    LatencySpec,
    RecordedRequest,
    RequestLog,
)
from .filters import compile_v3_filters, compile_v5_filter
from .store import (
    DEFAULT_CONTAINER_TAG,
    Chunk,
    Document,
    MemoryEntry,
    MemoryStore,
    SeedMemory,
    iso,
)

__all__ = ["Emulator", "create_app"]

JSON = dict[str, Any]

DEFAULT_LIMIT = 10
FORGET_MATCH_THRESHOLD = 0.5
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class ApiError(Exception):
    """Raised by handlers to answer with a JSON error."""

    def __init__(self, status: int, error: str, details: str | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.details = details


def _error(
    status: int, error: str, details: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    body: JSON = {"error": error}
    if details is not None:
        body["details"] = details
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


# ----------------------------------------------------------------- helpers


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _loads(data: str | bytes) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and numbers that overflow to them.

    Python's parser accepts those by default, and Starlette's ``JSONResponse`` refuses to write
    them: a stored NaN would turn every later answer that includes it into a 500.

    Raises:
        ValueError: not valid JSON, or a non-finite number.
    """
    return json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def _int(value: object, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return default
    return default


def _float(value: object, default: float) -> float:
    if isinstance(value, bool):
        return default
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return default
    return default


def _bool(value: object) -> bool:
    return value is True or value == "true"


def _dict(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _str_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str) and v]
    return []


def _tags_v3(body: Mapping[str, Any]) -> list[str] | None:
    tags = _str_list(body.get("containerTags"))
    tag = _str(body.get("containerTag"))
    if tag and tag not in tags:
        tags.insert(0, tag)
    return tags or None


def _json_or_str_tags(value: object) -> list[str]:
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            return _str_list(_loads(value))
        except ValueError:
            return []
    return _str_list(value)


def _json_obj(value: object) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip():
        try:
            parsed = _loads(value)
        except ValueError as error:
            raise ApiError(400, "Invalid request", f"metadata is not valid JSON: {error}") from None
        return dict(parsed) if isinstance(parsed, Mapping) else None
    return None


def _ms(start: float) -> int:
    return max(1, round((time.perf_counter() - start) * 1000))


def _paginate(items: Sequence[Any], page: int, limit: int) -> tuple[list[Any], JSON]:
    page = max(page, 1)
    limit = max(limit, 1)
    total = len(items)
    window = list(items[(page - 1) * limit : page * limit])
    return window, {
        "currentPage": page,
        "limit": limit,
        "totalItems": total,
        "totalPages": max(1, math.ceil(total / limit)) if total else 0,
    }


@dataclass
class _Upload:
    fields: dict[str, str]
    filename: str | None
    content_type: str | None
    data: bytes | None


def _parse_multipart(content_type: str, body: bytes) -> _Upload:
    """Parse a ``multipart/form-data`` body with the stdlib e-mail parser."""
    raw = (
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\nMIME-Version: 1.0\r\n\r\n" + body
    )
    msg = BytesParser(policy=policy.HTTP).parsebytes(raw)
    upload = _Upload(fields={}, filename=None, content_type=None, data=None)
    if not msg.is_multipart():
        return upload
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename is not None or name == "file":
            upload.filename = filename
            upload.content_type = part.get_content_type()
            upload.data = data
        elif isinstance(name, str):
            upload.fields[name] = data.decode("utf-8", errors="replace")
    return upload


def _file_content(upload: _Upload) -> tuple[str, str]:
    """Return ``(text content, document type)`` for an uploaded file."""
    data = upload.data or b""
    mime = upload.content_type or mimetypes.guess_type(upload.filename or "")[0] or ""
    if upload.filename and mime in ("", "application/octet-stream"):
        mime = mimetypes.guess_type(upload.filename)[0] or mime
    kind = "text"
    if mime == "application/pdf":
        kind = "pdf"
    elif mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("video/"):
        kind = "video"
    elif mime.startswith("audio/"):
        kind = "audio"
    if kind == "text":
        try:
            return data.decode("utf-8"), kind
        except UnicodeDecodeError:
            pass
    return f"[{kind} file {upload.filename or 'upload'} ({len(data)} bytes)]", kind


# ------------------------------------------------------------------ context


@dataclass
class _Ctx:
    request: Request
    tenant: str
    params: dict[str, str]
    body: bytes
    json: Any

    @property
    def data(self) -> JSON:
        return dict(self.json) if isinstance(self.json, Mapping) else {}

    def query(self, name: str) -> str | None:
        return self.request.query_params.get(name)

    def query_list(self, name: str) -> list[str]:
        out: list[str] = []
        for v in self.request.query_params.getlist(name):
            out.extend(x for x in v.split(",") if x)
        return out

    def upload(self) -> _Upload:
        ctype = self.request.headers.get("content-type", "")
        if ctype.startswith("multipart/"):
            return _parse_multipart(ctype, self.body)
        fields = {k: str(v) for k, v in self.data.items()}
        return _Upload(fields=fields, filename=None, content_type=None, data=None)


Handler = Callable[[_Ctx], Response | JSON | list[Any]]


class Emulator:
    """In-process Supermemory emulator state with its Python control API.

    Args:
        latency: ``None`` (default, no delay), fixed seconds, or a ``(low, high)``
            uniform range drawn from a RNG seeded with ``seed``.
        seed: seeds ids, latency jitter and the random error rate (reproducible runs).
        error_rate: fraction (0..1) of API requests answered with one of
            ``error_statuses`` instead of running.
        error_statuses: statuses used by ``error_rate`` (default ``(500,)``).
        api_keys: when given, only these bearer tokens are accepted (else any
            non-empty token is, each being its own tenant).
        indexing_delay: seconds from a write until its document is indexed (default ``0``:
            at once); meanwhile its status goes ``queued -> extracting -> chunking ->
            embedding -> indexing`` and search, profile and the memory lists do not see it.

    Raises:
        ValueError: ``indexing_delay`` is not a finite number ``>= 0``.
    """

    def __init__(
        self,
        *,
        latency: LatencySpec = None,
        seed: int | None = None,
        error_rate: float = 0.0,
        error_statuses: Sequence[int] = (500,),
        api_keys: Iterable[str] | None = None,
        indexing_delay: float = 0.0,
    ) -> None:
        self.store = MemoryStore(seed=seed, indexing_delay=indexing_delay)
        self.latency = LatencyModel(latency, seed=seed)
        self.faults = FaultInjector(error_rate=error_rate, error_statuses=error_statuses, seed=seed)
        self.log = RequestLog()
        self.api_keys: frozenset[str] | None = frozenset(api_keys) if api_keys is not None else None
        self.stopping = threading.Event()

    # ----------------------------------------------------------- seeding

    def seed(
        self,
        api_key: str,
        memories: Iterable[SeedMemory | str | Mapping[str, Any]],
        *,
        container_tag: str = DEFAULT_CONTAINER_TAG,
    ) -> list[MemoryEntry]:
        """Seed memories for ``api_key``; plain strings go to ``container_tag``.

        Items may be strings, :class:`SeedMemory` or mappings with its fields
        (``content``, ``container_tag``/``containerTag``/``namespace``,
        ``metadata``, ``static``, ``bucket``, ``title``, ``filepath``). Seeded
        memories are searchable immediately, even with an indexing delay.
        """
        return self.store.seed(api_key, memories, container_tag=container_tag)

    def add_memory(
        self,
        api_key: str,
        content: str,
        *,
        container_tag: str = DEFAULT_CONTAINER_TAG,
        metadata: Mapping[str, Any] | None = None,
        static: bool = False,
        bucket: str | None = None,
    ) -> MemoryEntry:
        """Seed a single memory and return it."""
        return self.store.add_memory(
            api_key,
            content,
            container_tag=container_tag,
            metadata=metadata,
            static=static,
            bucket=bucket,
        )

    # ------------------------------------------------------ observation

    @property
    def counts(self) -> dict[tuple[str, str], int]:
        """``{(METHOD, path): n}`` for every API request received (faulted ones too)."""
        return self.log.counts

    def count(self, method: str = "*", path: str = "*") -> int:
        """Requests received for ``method``/``path`` (exact or ``fnmatch`` glob)."""
        return self.log.count(method, path)

    def reset_counts(self) -> None:
        """Zero the request counters, recorded requests and latency statistics."""
        self.log.reset()
        self.latency.reset_stats()

    def last_request(self, method: str, path: str) -> RecordedRequest | None:
        """The most recent request received for ``method``/``path`` (glob allowed)."""
        return self.log.last(method, path)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Recent requests (bounded), oldest first."""
        return self.log.recent

    @property
    def latency_applied(self) -> int:
        """How many requests had a non-zero artificial latency applied."""
        return self.latency.applied

    def stats(self) -> JSON:
        """A JSON-serialisable snapshot (also served at ``GET /_emulator/stats``)."""
        counts = self.log.counts
        return {
            "total": sum(counts.values()),
            "counts": {f"{m} {p}": n for (m, p), n in sorted(counts.items())},
            "latency": {
                "applied": self.latency.applied,
                "totalSeconds": round(self.latency.total_seconds, 6),
                "spec": list(self.latency.spec)
                if isinstance(self.latency.spec, tuple)
                else self.latency.spec,
            },
            "faults": {
                "injected": self.faults.injected,
                "hangs": self.faults.hangs,
                "pending": len(self.faults.pending),
                "errorRate": self.faults.error_rate,
            },
            "indexing": {"delay": self.store.indexing_delay},
            "tenants": len(self.store.tenants()),
        }

    # ----------------------------------------------------------- control

    @property
    def indexing_delay(self) -> float:
        """Seconds from a write until its document is indexed (settable; later writes only)."""
        return self.store.indexing_delay

    @indexing_delay.setter
    def indexing_delay(self, seconds: float) -> None:
        self.store.indexing_delay = seconds

    def set_indexing_delay(self, seconds: float) -> None:
        """Change the indexing delay at run time (documents already written keep theirs).

        Raises:
            ValueError: ``seconds`` is not a finite number ``>= 0``.
        """
        self.store.indexing_delay = seconds

    def set_latency(self, latency: LatencySpec, *, seed: int | None = None) -> None:
        """Change the latency model at runtime (``None`` disables it)."""
        self.latency.set(latency, seed=seed)

    def fail_next(
        self,
        n: int | None = 1,
        status: int = 500,
        *,
        path: str | None = None,
        method: str | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> FaultRule:
        """Answer the next ``n`` matching API requests with ``status``.

        ``path``/``method`` are exact strings or ``fnmatch`` globs (``None`` = any).
        ``retry_after`` (seconds) adds ``Retry-After`` (integer, rounded up) and
        ``retry-after-ms`` headers; note the 3.x SDK honours ``retry-after-ms`` while
        the 5.x SDK only reads integer ``Retry-After`` and falls back to ~1 s
        exponential backoff for ``0``.
        """
        return self.faults.fail_next(
            n, status, path=path, method=method, retry_after=retry_after, body=body
        )

    def hang_next(
        self,
        n: int | None = 1,
        seconds: float = 30.0,
        *,
        path: str | None = None,
        method: str | None = None,
    ) -> FaultRule:
        """Make the next ``n`` matching requests sleep ``seconds`` before answering.

        The hang ends early when the client disconnects or the server stops.
        """
        return self.faults.hang_next(n, seconds, path=path, method=method)

    def set_error_rate(
        self, rate: float, *, statuses: Sequence[int] | None = None, seed: int | None = None
    ) -> None:
        """Fail a seeded random fraction of API requests (``0`` disables)."""
        self.faults.set_error_rate(rate, statuses=statuses, seed=seed)

    def clear_faults(self) -> None:
        """Disarm every fault rule and the random error rate."""
        self.faults.clear()

    def reset(self, *, data: bool = True, counts: bool = True, faults: bool = True) -> None:
        """Reset stored data, counters and/or faults (all by default)."""
        if data:
            self.store.clear()
        if counts:
            self.reset_counts()
        if faults:
            self.clear_faults()

    def authorize(self, token: str | None) -> str | None:
        """Return the tenant for a bearer token, or ``None`` if it is not accepted."""
        if not token:
            return None
        if self.api_keys is not None and token not in self.api_keys:
            return None
        return token


# ===================================================================== routes


class _Router:
    def __init__(self) -> None:
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.templates: list[tuple[str, str]] = []  # (method, path template), as added

    def add(self, method: str, template: str, handler: Handler) -> None:
        pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
        self.routes.append((method, re.compile(f"^{pattern}$"), handler))
        self.templates.append((method, template))

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]] | bool | None:
        """Return (handler, params); ``True`` when only the method differs; ``None`` if no path."""
        path_known = False
        for m, rx, handler in self.routes:
            found = rx.match(path)
            if found is None:
                continue
            path_known = True
            if m == method:
                return handler, found.groupdict()
        return True if path_known else None


def api_routes() -> list[tuple[str, str]]:
    """Every Supermemory API route the emulator serves: (method, path template).

    Templates name one path segment ``{name}``; 5.x paths are also served under ``/v5``.
    """
    return list(_Api(Emulator()).router.templates)


class _Api:
    """Endpoint implementations (3.x and 5.x) over one :class:`Emulator`."""

    def __init__(self, emulator: Emulator) -> None:
        self.em = emulator
        self.store = emulator.store
        r = _Router()
        # ---- 3.x (Stainless SDK)
        r.add("POST", "/v4/search", self.v4_search)
        r.add("POST", "/v3/search", self.v3_search)
        r.add("POST", "/v4/profile", self.v4_profile)
        r.add("POST", "/v3/documents/list", self.v3_documents_list)
        r.add("POST", "/v3/documents/batch", self.v3_documents_batch)
        r.add("POST", "/v3/documents/file", self.v3_documents_file)
        r.add("GET", "/v3/documents/processing", self.v3_documents_processing)
        r.add("DELETE", "/v3/documents/bulk", self.v3_documents_bulk_delete)
        r.add("POST", "/v3/documents", self.v3_documents_add)
        r.add("GET", "/v3/documents/{id}", self.v3_documents_get)
        r.add("PATCH", "/v3/documents/{id}", self.v3_documents_update)
        r.add("DELETE", "/v3/documents/{id}", self.v3_documents_delete)
        r.add("DELETE", "/v4/memories", self.v4_memories_forget)
        r.add("PATCH", "/v4/memories", self.v4_memories_update)
        r.add("GET", "/v3/settings", self.v3_settings_get)
        r.add("PATCH", "/v3/settings", self.v3_settings_update)
        r.add("POST", "/v3/connections/list", lambda ctx: [])
        # ---- 5.x (Fern SDK)
        r.add("GET", "/ns", self.v5_namespaces_list)
        r.add("POST", "/ns/{ns}/document", self.v5_document_add)
        r.add("DELETE", "/ns/{ns}/document", self.v5_document_delete)
        r.add("POST", "/ns/{ns}/document/batch", self.v5_document_batch)
        r.add("POST", "/ns/{ns}/document/file", self.v5_document_file)
        r.add("POST", "/ns/{ns}/document/file/{id}", self.v5_document_file_replace)
        r.add("PATCH", "/ns/{ns}/document/file/{id}", self.v5_document_file_update)
        r.add("GET", "/ns/{ns}/document/{id}", self.v5_document_get)
        r.add("PATCH", "/ns/{ns}/document/{id}", self.v5_document_update)
        r.add("POST", "/ns/{ns}/search", self.v5_search)
        r.add("GET", "/ns/{ns}/profile/buckets", self.v5_buckets_get)
        r.add("PUT", "/ns/{ns}/profile/buckets", self.v5_buckets_set)
        r.add("DELETE", "/ns/{ns}/profile/buckets", self.v5_buckets_delete)
        r.add("POST", "/ns/{ns}/profile", self.v5_profile)
        r.add("POST", "/ns/{ns}/list/documents/memory-counts", self.v5_memory_counts)
        r.add("POST", "/ns/{ns}/list/{type}", self.v5_list)
        r.add("DELETE", "/ns/{ns}/memories/semantic", self.v5_forget_matching)
        r.add("DELETE", "/ns/{ns}/memories", self.v5_forget)
        r.add("GET", "/ns/{ns}/memories/{id}", self.v5_memory_get)
        r.add("GET", "/ns/{ns}/connectors", self.v5_connectors)
        r.add("GET", "/connectors", self.v5_connectors)
        r.add("GET", "/ns/{ns}", self.v5_namespace_get)
        r.add("PATCH", "/ns/{ns}", self.v5_namespace_update)
        r.add("DELETE", "/ns/{ns}", self.v5_namespace_delete)
        r.add("GET", "/organization", self.v5_organization_get)
        r.add("PATCH", "/organization", self.v5_organization_update)
        r.add("POST", "/feedback", self.v5_feedback)
        self.router = r

    # ================================================================ 3.x

    def _v3_memory_result(
        self, tenant: str, m: MemoryEntry, score: float, include: Mapping[str, Any]
    ) -> JSON:
        doc = self.store.get_document(tenant, m.document_id) if m.document_id else None
        item: JSON = {
            "id": m.id,
            "memory": m.memory,
            "metadata": m.metadata or None,
            "similarity": score,
            "updatedAt": iso(m.updated_at),
            "version": m.version,
            "rootMemoryId": m.root_id,
            "isAggregated": False,
            "filepath": doc.filepath if doc else None,
        }
        if _bool(include.get("documents")) or _bool(include.get("summaries")):
            docs: list[JSON] = []
            if doc is not None:
                d: JSON = {
                    "id": doc.id,
                    "createdAt": iso(doc.created_at),
                    "updatedAt": iso(doc.updated_at),
                }
                if _bool(include.get("documents")):
                    d.update(metadata=doc.metadata or None, title=doc.title, type=doc.type)
                if _bool(include.get("summaries")):
                    d["summary"] = doc.summary
                docs.append(d)
            item["documents"] = docs
        if _bool(include.get("relatedMemories")):
            versions = self.store.memory_versions(tenant, m)
            item["context"] = {
                "parents": [
                    {
                        "memory": v.memory,
                        "relation": "updates",
                        "updatedAt": iso(v.updated_at),
                        "metadata": v.metadata or None,
                        "version": v.version - m.version,
                    }
                    for v in versions
                    if v.version < m.version
                ],
                "children": [
                    {
                        "memory": v.memory,
                        "relation": "updates",
                        "updatedAt": iso(v.updated_at),
                        "metadata": v.metadata or None,
                        "version": v.version - m.version,
                    }
                    for v in versions
                    if v.version > m.version
                ],
                "related": [],
            }
        if _bool(include.get("chunks")) and doc is not None:
            item["chunks"] = [
                {"content": c.content, "documentId": doc.id, "position": c.position}
                for c in self.store.document_chunks(tenant, doc.id)
            ]
        return item

    def _v3_memory_search(self, ctx: _Ctx, body: Mapping[str, Any], query: str) -> JSON:
        start = time.perf_counter()
        include = _dict(body.get("include"))
        mode = _str(body.get("searchMode")) or (
            "hybrid" if _bool(include.get("chunks")) else "memories"
        )
        if _bool(include.get("chunks")):
            mode = "memories"  # deprecated format: chunks embedded in memory results
        limit = _int(body.get("limit"), DEFAULT_LIMIT)
        threshold = _float(body.get("threshold"), 0.0)
        tags = _tags_v3(body)
        predicate = compile_v3_filters(body.get("filters"))
        filepath = _str(body.get("filepath"))
        results: list[JSON] = []
        if mode in ("memories", "hybrid"):
            for m, s in self.store.search_memories(
                ctx.tenant,
                query,
                container_tags=tags,
                limit=limit,
                threshold=threshold,
                predicate=predicate,
                include_forgotten=_bool(include.get("forgottenMemories")),
                filepath=filepath,
            ):
                results.append(self._v3_memory_result(ctx.tenant, m, s, include))
        if mode in ("hybrid", "documents"):
            seen = {r.get("memory") for r in results}
            for c, d, s in self.store.search_chunks(
                ctx.tenant,
                query,
                container_tags=tags,
                threshold=threshold,
                predicate=predicate,
                filepath=filepath,
            ):
                if c.content in seen:
                    continue
                results.append(
                    {
                        "id": c.id,
                        "chunk": c.content,
                        "metadata": d.metadata or None,
                        "similarity": s,
                        "updatedAt": iso(d.updated_at),
                        "filepath": d.filepath,
                    }
                )
        results.sort(key=lambda r: -float(r["similarity"]))
        results = results[: max(limit, 0)]
        return {"results": results, "timing": _ms(start), "total": len(results)}

    def v4_search(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        query = _str(body.get("q"))
        if query is None:
            raise ApiError(400, "Invalid request", "q is required")
        return self._v3_memory_search(ctx, body, query)

    def v3_search(self, ctx: _Ctx) -> JSON:
        start = time.perf_counter()
        body = ctx.data
        query = _str(body.get("q"))
        if query is None:
            raise ApiError(400, "Invalid request", "q is required")
        limit = _int(body.get("limit"), DEFAULT_LIMIT)
        threshold = _float(body.get("chunkThreshold"), 0.0)
        only_matching = _bool(body.get("onlyMatchingChunks"))
        hits = self.store.search_chunks(
            ctx.tenant,
            query,
            container_tags=_tags_v3(body),
            threshold=threshold,
            predicate=compile_v3_filters(body.get("filters")),
            doc_id=_str(body.get("docId")),
            filepath=_str(body.get("filepath")),
        )
        grouped: dict[str, tuple[Document, dict[int, tuple[Chunk, float]]]] = {}
        for c, d, s in hits:
            grouped.setdefault(d.id, (d, {}))[1][c.position] = (c, s)
        results: list[JSON] = []
        for doc, matched in grouped.values():
            chunks: dict[int, JSON] = {
                pos: {"content": c.content, "isRelevant": True, "position": pos, "score": s}
                for pos, (c, s) in matched.items()
            }
            if not only_matching:
                all_chunks = self.store.document_chunks(ctx.tenant, doc.id)
                for pos in list(matched):
                    for near in (pos - 1, pos + 1):
                        if 0 <= near < len(all_chunks) and near not in chunks:
                            chunks[near] = {
                                "content": all_chunks[near].content,
                                "isRelevant": False,
                                "position": near,
                                "score": 0.0,
                            }
            item: JSON = {
                "documentId": doc.id,
                "chunks": [chunks[p] for p in sorted(chunks)],
                "createdAt": iso(doc.created_at),
                "updatedAt": iso(doc.updated_at),
                "metadata": doc.metadata or None,
                "score": max(s for _, s in matched.values()),
                "title": doc.title,
                "type": doc.type,
            }
            if _bool(body.get("includeFullDocs")):
                item["content"] = doc.content
            if _bool(body.get("includeSummary")):
                item["summary"] = doc.summary
            results.append(item)
        results.sort(key=lambda r: -float(r["score"]))
        results = results[: max(limit, 0)]
        return {"results": results, "timing": _ms(start), "total": len(results)}

    def v4_profile(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        tag = _str(body.get("containerTag"))
        if tag is None:
            raise ApiError(400, "Invalid request", "containerTag is required")
        predicate = compile_v3_filters(body.get("filters"))
        sections = _str_list(body.get("include")) or ["static", "dynamic", "buckets"]
        static, dynamic, buckets = self.store.profile(ctx.tenant, [tag], predicate=predicate)
        profile: JSON = {}
        if "static" in sections:
            profile["static"] = [m.memory for m in static]
        if "dynamic" in sections:
            profile["dynamic"] = [m.memory for m in dynamic]
        if "buckets" in sections:
            wanted = _str_list(body.get("buckets"))
            names = set(self.store.buckets(ctx.tenant, tag)) | set(buckets)
            profile["buckets"] = {
                name: [m.memory for m in buckets.get(name, [])]
                for name in sorted(names)
                if not wanted or name in wanted
            }
        out: JSON = {"profile": profile}
        query = _str(body.get("q"))
        if query is not None:
            out["searchResults"] = self._v3_memory_search(
                ctx,
                {
                    "containerTag": tag,
                    "threshold": body.get("threshold"),
                    "filters": body.get("filters"),
                },
                query,
            )
        return out

    def _v3_doc_item(self, doc: Document, *, content: bool) -> JSON:
        item: JSON = {
            "id": doc.id,
            "connectionId": None,
            "createdAt": iso(doc.created_at),
            "customId": doc.custom_id,
            "filepath": doc.filepath,
            "metadata": doc.metadata or None,
            "status": doc.status,
            "summary": doc.summary,
            "title": doc.title,
            "type": doc.type,
            "updatedAt": iso(doc.updated_at),
            "containerTags": list(doc.container_tags),
            "url": doc.url,
        }
        if content:
            item["content"] = doc.content
        return item

    def v3_documents_list(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        docs = self.store.list_documents(
            ctx.tenant,
            container_tags=_str_list(body.get("containerTags")) or None,
            filepath=_str(body.get("filepath")),
            predicate=compile_v3_filters(body.get("filters")),
            sort=_str(body.get("sort")) or "createdAt",
            descending=(_str(body.get("order")) or "desc") == "desc",
        )
        page, pagination = _paginate(
            docs, _int(body.get("page"), 1), _int(body.get("limit"), DEFAULT_LIMIT)
        )
        include_content = _bool(body.get("includeContent"))
        return {
            "memories": [self._v3_doc_item(d, content=include_content) for d in page],
            "pagination": pagination,
        }

    def _v3_add(
        self, tenant: str, item: Mapping[str, Any], defaults: Mapping[str, Any]
    ) -> Document:
        content = _str(item.get("content"))
        if content is None:
            raise ApiError(400, "Invalid request", "content is required")
        merged = {**defaults, **{k: v for k, v in item.items() if v is not None}}
        metadata = {**_dict(defaults.get("metadata")), **_dict(item.get("metadata"))}
        return self.store.add_document(
            tenant,
            content,
            container_tags=_tags_v3(merged),
            metadata=metadata,
            custom_id=_str(merged.get("customId")),
            filepath=_str(merged.get("filepath")),
            task_type=_str(merged.get("taskType")) or "memory",
            supporting_context=_str(merged.get("entityContext")),
        )

    def v3_documents_add(self, ctx: _Ctx) -> JSON:
        doc = self._v3_add(ctx.tenant, ctx.data, {})
        return {"id": doc.id, "status": doc.status}

    def v3_documents_batch(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        items = body.get("documents")
        if not isinstance(items, list):
            raise ApiError(400, "Invalid request", "documents must be an array")
        defaults = {k: v for k, v in body.items() if k != "documents"}
        results: list[JSON] = []
        for raw in items:
            item: Mapping[str, Any] = {"content": raw} if isinstance(raw, str) else _dict(raw)
            try:
                doc = self._v3_add(ctx.tenant, item, defaults)
            except ApiError as exc:
                results.append(
                    {
                        "id": _str(item.get("customId")) or "unknown",
                        "status": "error",
                        "error": exc.error,
                        "details": exc.details,
                    }
                )
                continue
            results.append({"id": doc.id, "status": doc.status})
        failed = sum(1 for r in results if r["status"] == "error")
        return {"results": results, "success": len(results) - failed, "failed": failed}

    def v3_documents_file(self, ctx: _Ctx) -> JSON:
        upload = ctx.upload()
        if upload.data is None:
            raise ApiError(400, "Invalid request", "file is required")
        f = upload.fields
        content, kind = _file_content(upload)
        tags = _json_or_str_tags(f.get("containerTags"))
        if f.get("containerTag"):
            tags.insert(0, f["containerTag"])
        doc = self.store.add_document(
            ctx.tenant,
            content,
            container_tags=tags or None,
            metadata=_json_obj(f.get("metadata")) or {},
            custom_id=_str(f.get("customId")),
            title=upload.filename,
            doc_type=_str(f.get("fileType")) or kind,
            filepath=_str(f.get("filepath")),
            task_type=_str(f.get("taskType")) or "memory",
        )
        return {"id": doc.id, "status": doc.status}

    def _v3_doc(self, ctx: _Ctx) -> Document:
        doc = self.store.get_document(ctx.tenant, ctx.params["id"])
        if doc is None:
            raise ApiError(404, "Document not found", f"No document with id {ctx.params['id']}")
        return doc

    def v3_documents_get(self, ctx: _Ctx) -> JSON:
        doc = self._v3_doc(ctx)
        memories = self.store.document_memories(ctx.tenant, doc.id)
        out = self._v3_doc_item(doc, content=True)
        out.update(
            activeContentUpdateId=None,
            dreamingStatus="done" if doc.ready else "dreaming",
            latestRevision=doc.revision,
            ogImage=None,
            raw=None,
            source="api",
            taskType=doc.task_type,
            tombstonedAt=None,
        )
        if memories:
            out["memories"] = [
                {
                    "id": m.id,
                    "createdAt": iso(m.created_at),
                    "isForgotten": m.is_forgotten,
                    "isInference": m.is_inference,
                    "isLatest": m.is_latest,
                    "isStatic": m.is_static,
                    "memory": m.memory,
                    "metadata": m.metadata or None,
                    "parentMemoryId": m.parent_id,
                    "rootMemoryId": m.root_id,
                    "sourceCount": 1,
                    "updatedAt": iso(m.updated_at),
                    "version": m.version,
                }
                for m in memories
            ]
        return out

    def v3_documents_update(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        doc = self.store.update_document(
            ctx.tenant,
            ctx.params["id"],
            content=_str(body.get("content")),
            container_tags=_tags_v3(body),
            metadata=_dict(body["metadata"]) if isinstance(body.get("metadata"), Mapping) else None,
            custom_id=_str(body.get("customId")),
            filepath=_str(body.get("filepath")),
        )
        if doc is None:
            raise ApiError(404, "Document not found", f"No document with id {ctx.params['id']}")
        return {"id": doc.id, "status": doc.status}

    def v3_documents_delete(self, ctx: _Ctx) -> Response:
        if not self.store.delete_document(ctx.tenant, ctx.params["id"]):
            raise ApiError(404, "Document not found", f"No document with id {ctx.params['id']}")
        return Response(status_code=204)

    def v3_documents_bulk_delete(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        ids = _str_list(body.get("ids"))
        tags = _str_list(body.get("containerTags"))
        filepath = _str(body.get("filepath"))
        if not (ids or tags or filepath):
            raise ApiError(400, "Invalid request", "Provide ids, containerTags or filepath")
        deleted = 0
        errors: list[JSON] = []
        for doc_id in ids:
            if self.store.delete_document(ctx.tenant, doc_id):
                deleted += 1
            else:
                errors.append({"id": doc_id, "error": "Document not found"})
        if tags or filepath:
            for doc in self.store.list_documents(
                ctx.tenant, container_tags=tags or None, filepath=filepath
            ):
                if self.store.delete_document(ctx.tenant, doc.id):
                    deleted += 1
        out: JSON = {"success": True, "deletedCount": deleted}
        if ids:
            out["errors"] = errors
        if tags:
            out["containerTags"] = tags
        return out

    def v3_documents_processing(self, ctx: _Ctx) -> JSON:
        tags = ctx.query_list("containerTags")
        view = ctx.query("view") or "active"
        docs = [
            d
            for d in self.store.list_documents(ctx.tenant, container_tags=tags or None)
            if not d.ready
        ]
        items = [
            {
                "id": d.id,
                "connectionId": None,
                "createdAt": iso(d.created_at),
                "customId": d.custom_id,
                "metadata": d.metadata or None,
                "status": d.status,
                "summary": None,
                "title": d.title,
                "type": d.type,
                "updatedAt": iso(d.updated_at),
                "containerTags": list(d.container_tags),
                "stuck": False,
            }
            for d in docs
        ]
        out: JSON = {"documents": items, "totalCount": len(items)}
        if view == "all":
            page, pagination = _paginate(
                items, _int(ctx.query("page"), 1), _int(ctx.query("limit"), 50)
            )
            out.update(documents=page, pagination=pagination)
        return out

    def v4_memories_forget(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        tag = _str(body.get("containerTag"))
        if tag is None:
            raise ApiError(400, "Invalid request", "containerTag is required")
        if _str(body.get("id")) is None and _str(body.get("content")) is None:
            raise ApiError(400, "Invalid request", "Provide id or content")
        m = self.store.forget_memory(
            ctx.tenant,
            container_tag=tag,
            memory_id=_str(body.get("id")),
            content=_str(body.get("content")),
            reason=_str(body.get("reason")),
        )
        if m is None:
            raise ApiError(404, "Memory not found")
        return {"id": m.id, "forgotten": True}

    def v4_memories_update(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        tag = _str(body.get("containerTag"))
        new_content = _str(body.get("newContent"))
        if tag is None or new_content is None:
            raise ApiError(400, "Invalid request", "containerTag and newContent are required")
        metadata = _dict(body["metadata"]) if isinstance(body.get("metadata"), Mapping) else None
        temporal = body.get("temporalContext")
        if isinstance(temporal, Mapping):
            metadata = {**(metadata or {}), "temporalContext": dict(temporal)}
        m = self.store.update_memory(
            ctx.tenant,
            container_tag=tag,
            new_content=new_content,
            memory_id=_str(body.get("id")),
            content=_str(body.get("content")),
            metadata=metadata,
            forget_after=_str(body.get("forgetAfter")),
            forget_reason=_str(body.get("forgetReason")),
        )
        if m is None:
            raise ApiError(404, "Memory not found")
        return {
            "id": m.id,
            "createdAt": iso(m.created_at),
            "forgetAfter": m.forget_after,
            "forgetReason": m.forget_reason,
            "memory": m.memory,
            "metadata": m.metadata or None,
            "parentMemoryId": m.parent_id,
            "rootMemoryId": m.root_id,
            "version": m.version,
        }

    def v3_settings_get(self, ctx: _Ctx) -> JSON:
        return self.store.settings(ctx.tenant)

    def v3_settings_update(self, ctx: _Ctx) -> JSON:
        updated = {k: v for k, v in ctx.data.items() if v is not None}
        self.store.update_settings(ctx.tenant, updated)
        return {"orgId": f"org_{ctx.tenant[:8]}", "orgSlug": "emulator", "updated": updated}

    # ================================================================ 5.x

    @staticmethod
    def _system(created: Any, updated: Any) -> JSON:
        return {"createdAt": iso(created), "updatedAt": iso(updated)}

    def _v5_doc(self, ctx: _Ctx) -> Document:
        doc = self.store.get_document(ctx.tenant, ctx.params["id"])
        if doc is None or ctx.params["ns"] not in doc.container_tags:
            raise ApiError(
                404, "Document not found", f"No document {ctx.params['id']} in this namespace"
            )
        return doc

    def _v5_add(self, ctx: _Ctx, item: Mapping[str, Any], task_type: str | None) -> Document:
        content = _str(item.get("content"))
        if content is None:
            raise ApiError(400, "Invalid request", "content is required")
        metadata = _dict(item.get("metadata"))
        if _str(item.get("date")):
            metadata.setdefault("documentDate", item["date"])
        return self.store.add_document(
            ctx.tenant,
            content,
            container_tags=[ctx.params["ns"]],
            metadata=metadata,
            doc_id=_str(item.get("id")),
            task_type=_str(item.get("taskType")) or task_type or "memory",
            supporting_context=_str(item.get("supportingContext")),
            group=_dict(item.get("group")) or None,
            append=True,
        )

    def v5_document_add(self, ctx: _Ctx) -> JSON:
        doc = self._v5_add(ctx, ctx.data, None)
        return {"id": doc.id, "status": doc.status}

    def v5_document_batch(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        items = body.get("documents")
        if not isinstance(items, list):
            raise ApiError(400, "Invalid request", "documents must be an array")
        results: list[JSON] = []
        for raw in items:
            item = _dict(raw)
            try:
                doc = self._v5_add(ctx, item, _str(body.get("taskType")))
            except ApiError as exc:
                results.append(
                    {
                        "id": _str(item.get("id")) or "unknown",
                        "status": "error",
                        "error": exc.error,
                        "details": exc.details,
                    }
                )
                continue
            results.append({"id": doc.id, "status": doc.status})
        failed = sum(1 for r in results if r["status"] == "error")
        return {"results": results, "count": len(results) - failed, "failed": failed}

    def v5_document_delete(self, ctx: _Ctx) -> JSON:
        count = 0
        errors: list[JSON] = []
        for doc_id in _str_list(ctx.data.get("ids")):
            doc = self.store.get_document(ctx.tenant, doc_id)
            if doc is not None and ctx.params["ns"] in doc.container_tags:
                self.store.delete_document(ctx.tenant, doc.id)
                count += 1
            else:
                errors.append({"id": doc_id, "error": "Document not found"})
        return {"count": count, "errors": errors}

    def _v5_file(self, ctx: _Ctx, doc_id: str | None, *, require_file: bool) -> JSON:
        upload = ctx.upload()
        f = upload.fields
        if upload.data is None and require_file:
            raise ApiError(400, "Invalid request", "file is required")
        metadata = _json_obj(f.get("metadata"))
        if upload.data is None:
            assert doc_id is not None
            doc = self.store.update_document(
                ctx.tenant,
                doc_id,
                metadata=metadata,
                supporting_context=_str(f.get("supportingContext")),
            )
            if doc is None:
                raise ApiError(404, "Document not found")
            return {"id": doc.id, "status": doc.status}
        content, kind = _file_content(upload)
        if doc_id is not None and self.store.get_document(ctx.tenant, doc_id) is not None:
            doc = self.store.update_document(
                ctx.tenant, doc_id, content=content, metadata=metadata, title=upload.filename
            )
            assert doc is not None
            return {"id": doc.id, "status": doc.status}
        doc = self.store.add_document(
            ctx.tenant,
            content,
            container_tags=[ctx.params["ns"]],
            metadata=metadata or {},
            doc_id=doc_id,
            title=upload.filename,
            doc_type=_str(f.get("fileType")) or kind,
            task_type=_str(f.get("taskType")) or "memory",
            supporting_context=_str(f.get("supportingContext")),
            group=_json_obj(f.get("group")),
        )
        return {"id": doc.id, "status": doc.status}

    def v5_document_file(self, ctx: _Ctx) -> JSON:
        return self._v5_file(ctx, None, require_file=True)

    def v5_document_file_replace(self, ctx: _Ctx) -> JSON:
        return self._v5_file(ctx, ctx.params["id"], require_file=True)

    def v5_document_file_update(self, ctx: _Ctx) -> JSON:
        self._v5_doc(ctx)
        return self._v5_file(ctx, ctx.params["id"], require_file=False)

    def _v5_memory(self, m: MemoryEntry) -> JSON:
        return {
            "id": m.id,
            "memory": m.memory,
            "metadata": dict(m.metadata),
            "isStatic": m.is_static,
            "isInference": m.is_inference,
            "isLatest": m.is_latest,
            "isForgotten": m.is_forgotten,
            "version": m.version,
            "system": self._system(m.created_at, m.updated_at),
        }

    def _v5_chunk(self, c: Chunk, doc: Document) -> JSON:
        return {
            "id": c.id,
            "position": c.position,
            "content": c.content,
            "type": "text",
            "metadata": {},
            "system": {"createdAt": iso(c.created_at)},
            "documentId": doc.id,
        }

    def v5_document_get(self, ctx: _Ctx) -> JSON:
        doc = self._v5_doc(ctx)
        include = set(ctx.query_list("include"))
        out: JSON = {
            "id": doc.id,
            "title": doc.title,
            "type": doc.type,
            "summary": doc.summary,
            "content": doc.content,
            "metadata": dict(doc.metadata),
            "system": {
                "status": doc.status,
                "dreamingStatus": "done" if doc.ready else "dreaming",
                **self._system(doc.created_at, doc.updated_at),
            },
        }
        if "chunks" in include:
            out["chunks"] = [
                self._v5_chunk(c, doc) for c in self.store.document_chunks(ctx.tenant, doc.id)
            ]
        if "memories" in include:
            out["memories"] = [
                self._v5_memory(m) for m in self.store.document_memories(ctx.tenant, doc.id)
            ]
        return out

    def v5_document_update(self, ctx: _Ctx) -> JSON:
        self._v5_doc(ctx)
        body = ctx.data
        metadata = _dict(body["metadata"]) if isinstance(body.get("metadata"), Mapping) else None
        doc = self.store.update_document(
            ctx.tenant,
            ctx.params["id"],
            content=_str(body.get("content")),
            metadata=metadata,
            supporting_context=_str(body.get("supportingContext")),
            group=_dict(body["group"]) if isinstance(body.get("group"), Mapping) else None,
        )
        assert doc is not None
        return {"id": doc.id, "status": doc.status}

    def _v5_related(self, tenant: str, m: MemoryEntry, limit: int = 10) -> JSON:
        versions = self.store.memory_versions(tenant, m)

        def rel(v: MemoryEntry) -> JSON:
            return {
                "id": v.id,
                "relation": "updates",
                "version": v.version,
                "memory": v.memory,
                "metadata": dict(v.metadata),
                "system": {"updatedAt": iso(v.updated_at)},
            }

        return {
            "parents": [rel(v) for v in versions if v.version < m.version][-limit:],
            "children": [rel(v) for v in versions if v.version > m.version][:limit],
            "siblings": [],
        }

    def _v5_included_doc(self, doc: Document) -> JSON:
        return {
            "id": doc.id,
            "title": doc.title,
            "type": doc.type,
            "metadata": dict(doc.metadata),
            "summary": doc.summary,
            "system": self._system(doc.created_at, doc.updated_at),
        }

    def v5_search(self, ctx: _Ctx) -> JSON:
        start = time.perf_counter()
        body = ctx.data
        query = _str(body.get("query"))
        if query is None:
            raise ApiError(400, "Invalid request", "query is required")
        ns = ctx.params["ns"]
        mode = _str(body.get("searchMode")) or "hybrid"
        limit = _int(body.get("limit"), DEFAULT_LIMIT)
        threshold = _float(body.get("threshold"), 0.0)
        include = _dict(body.get("include"))
        predicate = compile_v5_filter(body.get("filter"))
        scored: list[tuple[float, JSON]] = []
        if mode in ("hybrid", "memories"):
            for m, s in self.store.search_memories(
                ctx.tenant,
                query,
                container_tags=[ns],
                limit=limit,
                threshold=threshold,
                predicate=predicate,
                include_forgotten=_bool(include.get("forgotten")),
            ):
                item: JSON = {
                    "id": m.id,
                    "memory": m.memory,
                    "metadata": dict(m.metadata),
                    "similarity": s,
                    "isLatest": m.is_latest and not m.is_forgotten,
                    "isInference": m.is_inference,
                    "system": self._system(m.created_at, m.updated_at),
                }
                included: JSON = {}
                if _bool(include.get("related")):
                    included["related"] = self._v5_related(ctx.tenant, m)
                if _bool(include.get("documents")) and m.document_id:
                    doc = self.store.get_document(ctx.tenant, m.document_id)
                    if doc is not None:
                        included["document"] = self._v5_included_doc(doc)
                if included:
                    item["included"] = included
                scored.append((s, item))
        if mode in ("hybrid", "chunks"):
            seen = {i.get("memory") for _, i in scored}
            for c, d, s in self.store.search_chunks(
                ctx.tenant, query, container_tags=[ns], threshold=threshold, predicate=predicate
            ):
                if c.content in seen:
                    continue
                item = {
                    "id": c.id,
                    "chunk": c.content,
                    "metadata": dict(d.metadata),
                    "similarity": s,
                    "isLatest": True,
                    "isInference": False,
                    "system": self._system(c.created_at, d.updated_at),
                }
                if _bool(include.get("documents")):
                    item["included"] = {"document": self._v5_included_doc(d)}
                scored.append((s, item))
        scored.sort(key=lambda p: -p[0])
        return {"results": [i for _, i in scored[: max(limit, 0)]], "searchTime": _ms(start)}

    def v5_profile(self, ctx: _Ctx) -> JSON:
        ns = ctx.params["ns"]
        body = ctx.data
        static, dynamic, buckets = self.store.profile(
            ctx.tenant, [ns], predicate=compile_v5_filter(body.get("filter"))
        )
        wanted = _str_list(body.get("buckets"))
        names = set(self.store.buckets(ctx.tenant, ns)) | set(buckets)

        def fact(m: MemoryEntry) -> JSON:
            return {"id": m.id, "memory": m.memory}

        return {
            "profile": {
                "static": [fact(m) for m in static],
                "dynamic": [fact(m) for m in dynamic],
                "buckets": {
                    n: [fact(m) for m in buckets.get(n, [])]
                    for n in sorted(names)
                    if not wanted or n in wanted
                },
            }
        }

    def v5_list(self, ctx: _Ctx) -> JSON:
        ns = ctx.params["ns"]
        kind = ctx.params["type"]
        if kind not in ("documents", "chunks", "memories"):
            raise ApiError(400, "Invalid request", f"Unknown list type {kind!r}")
        body = ctx.data
        include = _dict(body.get("include"))
        predicate = compile_v5_filter(body.get("filter"))
        sort = ctx.query("sort") or "createdAt"
        descending = (ctx.query("order") or "desc") == "desc"
        page_no = _int(ctx.query("page"), 1)
        limit = _int(ctx.query("limit"), 20)
        out: JSON = {"documents": [], "chunks": [], "memories": []}
        if kind == "documents":
            docs = self.store.list_documents(
                ctx.tenant,
                container_tags=[ns],
                predicate=predicate,
                sort=sort,
                descending=descending,
            )
            page, out["pagination"] = _paginate(docs, page_no, limit)
            for d in page:
                system: JSON = {
                    "status": d.status,
                    "dreamingStatus": "done" if d.ready else "dreaming",
                    **self._system(d.created_at, d.updated_at),
                }
                if _bool(include.get("memoryCount")):
                    system["memoryCount"] = sum(
                        1
                        for m in self.store.document_memories(ctx.tenant, d.id)
                        if m.is_latest and not m.is_forgotten
                    )
                out["documents"].append(
                    {
                        "id": d.id,
                        "title": d.title,
                        "type": d.type,
                        "content": d.content if _bool(include.get("content")) else None,
                        "summary": d.summary,
                        "metadata": dict(d.metadata),
                        "url": d.url,
                        "system": system,
                    }
                )
        elif kind == "chunks":
            docs = self.store.list_documents(
                ctx.tenant, container_tags=[ns], predicate=predicate, include_pending=False
            )
            pairs = [(c, d) for d in docs for c in self.store.document_chunks(ctx.tenant, d.id)]
            if sort == "position":
                pairs.sort(key=lambda p: (p[1].id, p[0].position), reverse=descending)
            else:
                pairs.sort(key=lambda p: (p[0].created_at, p[0].position), reverse=descending)
            page, out["pagination"] = _paginate(pairs, page_no, limit)
            out["chunks"] = [self._v5_chunk(c, d) for c, d in page]
        else:
            mems = self.store.list_memories(
                ctx.tenant,
                container_tags=[ns],
                predicate=predicate,
                include_forgotten=_bool(include.get("forgotten")),
            )
            attr = "updated_at" if sort == "updatedAt" else "created_at"
            mems.sort(key=lambda m: (getattr(m, attr), m.id), reverse=descending)
            page, out["pagination"] = _paginate(mems, page_no, limit)
            out["memories"] = [self._v5_memory(m) for m in page]
        return out

    def v5_memory_counts(self, ctx: _Ctx) -> JSON:
        counts = []
        for doc_id in _str_list(ctx.data.get("ids")):
            mems = self.store.document_memories(ctx.tenant, doc_id)
            counts.append(
                {
                    "id": doc_id,
                    "memoryCount": sum(1 for m in mems if m.is_latest and not m.is_forgotten),
                }
            )
        return {"counts": counts}

    def v5_forget(self, ctx: _Ctx) -> JSON:
        ns = ctx.params["ns"]
        matches: list[JSON] = []
        errors: list[JSON] = []
        for mid in _str_list(ctx.data.get("ids")):
            m = self.store.forget_memory(ctx.tenant, container_tag=ns, memory_id=mid)
            if m is None:
                errors.append({"id": mid, "error": "Memory not found"})
            else:
                matches.append({"id": m.id, "memory": m.memory})
        return {"count": len(matches), "errors": errors, "matches": matches}

    def v5_forget_matching(self, ctx: _Ctx) -> JSON:
        body = ctx.data
        query = _str(body.get("query"))
        if query is None:
            raise ApiError(400, "Invalid request", "query is required")
        ns = ctx.params["ns"]
        hits = self.store.search_memories(
            ctx.tenant, query, container_tags=[ns], limit=100, threshold=FORGET_MATCH_THRESHOLD
        )
        matches = [{"id": m.id, "memory": m.memory} for m, _ in hits]
        if not _bool(body.get("dryRun")):
            for m, _ in hits:
                self.store.forget_memory(
                    ctx.tenant, container_tag=ns, memory_id=m.id, reason=f"forget: {query}"
                )
        return {"count": len(matches), "errors": [], "matches": matches}

    def v5_memory_get(self, ctx: _Ctx) -> JSON:
        m = self.store.get_memory(ctx.tenant, ctx.params["id"])
        if m is None or ctx.params["ns"] not in m.container_tags:
            raise ApiError(404, "Memory not found")
        include = set(ctx.query_list("include"))
        out = self._v5_memory(m)
        included: JSON = {}
        if "related" in include:
            included["related"] = self._v5_related(
                ctx.tenant, m, _int(ctx.query("relatedLimit"), 10)
            )
        if "documents" in include and m.document_id:
            doc = self.store.get_document(ctx.tenant, m.document_id)
            if doc is not None:
                included["document"] = self._v5_included_doc(doc)
        if included:
            out["included"] = included
        return out

    def v5_buckets_get(self, ctx: _Ctx) -> JSON:
        return {"buckets": self.store.buckets(ctx.tenant, ctx.params["ns"])}

    def v5_buckets_set(self, ctx: _Ctx) -> JSON:
        raw = _dict(ctx.data.get("buckets"))
        buckets = {str(k): str(v) for k, v in raw.items()}
        return {"buckets": self.store.set_buckets(ctx.tenant, ctx.params["ns"], buckets)}

    def v5_buckets_delete(self, ctx: _Ctx) -> JSON:
        names = _str_list(ctx.data.get("buckets"))
        return {"buckets": self.store.delete_buckets(ctx.tenant, ctx.params["ns"], names)}

    def _v5_namespace_details(self, tenant: str, ns: str) -> JSON:
        created, context = self.store.namespace_info(tenant, ns)
        docs = self.store.list_documents(tenant, container_tags=[ns])
        updated = max([created, *(d.updated_at for d in docs)])
        return {
            "namespace": ns,
            "supportingContext": context,
            "system": self._system(created, updated),
        }

    def v5_namespaces_list(self, ctx: _Ctx) -> JSON:
        q = (ctx.query("q") or "").lower()
        names = [n for n in self.store.namespaces(ctx.tenant) if q in n.lower()]
        page, pagination = _paginate(
            names, _int(ctx.query("page"), 1), _int(ctx.query("limit"), 20)
        )
        items = []
        for ns in page:
            details = self._v5_namespace_details(ctx.tenant, ns)
            items.append(
                {
                    "id": f"ns_{ns}",
                    "namespace": ns,
                    "documentCount": len(
                        self.store.list_documents(ctx.tenant, container_tags=[ns])
                    ),
                    "memoryCount": len(self.store.list_memories(ctx.tenant, container_tags=[ns])),
                    "description": details["supportingContext"],
                    "system": details["system"],
                }
            )
        return {"namespaces": items, "pagination": pagination}

    def v5_namespace_get(self, ctx: _Ctx) -> JSON:
        ns = ctx.params["ns"]
        if ns not in self.store.namespaces(ctx.tenant):
            raise ApiError(404, "Namespace not found")
        return self._v5_namespace_details(ctx.tenant, ns)

    def v5_namespace_update(self, ctx: _Ctx) -> JSON:
        ns = ctx.params["ns"]
        self.store.set_namespace_context(ctx.tenant, ns, _str(ctx.data.get("supportingContext")))
        return self._v5_namespace_details(ctx.tenant, ns)

    def v5_namespace_delete(self, ctx: _Ctx) -> JSON:
        ns = ctx.params["ns"]
        move_to = ctx.query("moveTo")
        if ns not in self.store.namespaces(ctx.tenant):
            raise ApiError(404, "Namespace not found")
        docs, mems = self.store.delete_namespace(ctx.tenant, ns, move_to)
        if move_to:
            return {
                "status": "queued",
                "operationId": self.store.new_id(),
                "namespace": ns,
                "moveTo": move_to,
            }
        return {
            "status": "deleted",
            "namespace": ns,
            "deletedDocumentsCount": docs,
            "deletedMemoriesCount": mems,
        }

    def v5_organization_get(self, ctx: _Ctx) -> JSON:
        return {
            "organizationalContext": self.store.organizational_context(ctx.tenant),
            "namespaceCount": len(self.store.namespaces(ctx.tenant)),
        }

    def v5_organization_update(self, ctx: _Ctx) -> JSON:
        self.store.set_organizational_context(
            ctx.tenant, _str(ctx.data.get("organizationalContext"))
        )
        return self.v5_organization_get(ctx)

    def v5_feedback(self, ctx: _Ctx) -> JSON:
        return {"id": self.store.new_id(), "remaining": 100}

    def v5_connectors(self, ctx: _Ctx) -> JSON:
        return {
            "connectors": [],
            "pagination": {"currentPage": 1, "limit": 20, "totalItems": 0, "totalPages": 0},
        }


# ================================================================ ASGI app


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return request.headers.get("x-api-key") or None


async def _hang(emulator: Emulator, request: Request, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not emulator.stopping.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await asyncio.sleep(min(0.05, remaining))
        if await request.is_disconnected():
            return


def _fault_response(decision: FaultDecision) -> Response:
    messages = {
        429: "Too many requests",
        500: "Internal server error",
        502: "Bad gateway",
        503: "Service unavailable",
        504: "Gateway timeout",
    }
    status = decision.status or 500
    body = decision.body or {
        "error": messages.get(status, "Injected fault"),
        "details": "injected by emulator",
    }
    return JSONResponse(body, status_code=status, headers=decision.response_headers())


async def _control_body(request: Request) -> dict[str, Any]:
    """The JSON object a control request sends (``{}`` when empty).

    Raises:
        ApiError: 400 for invalid JSON, a non-finite number, or anything but an object.
    """
    raw = await request.body()
    try:
        data = _loads(raw) if raw.strip() else {}
    except ValueError as error:
        raise ApiError(400, "Invalid request", f"Body is not valid JSON: {error}") from None
    if not isinstance(data, Mapping):
        raise ApiError(400, "Invalid request", "Body must be a JSON object")
    return dict(data)


def describe(emulator: Emulator, base_url: str, controls: Iterable[tuple[str, str, str]]) -> str:
    """The text ``GET /`` answers: what this server is, how to point a client at it, and its
    ``controls`` as ``(method, path, what it does)``.

    The demo's data (``wm-middleware serve --demo-data``) is seeded under the API key
    ``sk-wm-demo``; every key with data is listed, so the page shows whichever key to use.
    """
    tenants = emulator.store.tenants()
    key = tenants[0] if tenants else "sk-wm-demo"
    lines = [
        "wm_middleware emulator: a Supermemory-compatible API for tests and demos, data in memory.",
        "",
        "Point a client at it:",
        f'  supermemory 5.x or 3.x: Supermemory(api_key="{key}", base_url="{base_url}")',
        "  API: supermemory 3.x paths (/v3/..., /v4/...) and 5.x paths (/ns/{namespace}/...).",
        "",
    ]
    if emulator.api_keys is None:
        lines.append(
            "API keys: any 'Authorization: Bearer <key>' works; each key is its own tenant."
        )
    else:
        lines.append(f"API keys: only the {len(emulator.api_keys)} configured keys are accepted.")
    if tenants:
        lines.append("Keys with data:")
        for tenant in tenants:
            tags = ", ".join(emulator.store.namespaces(tenant)) or "(none)"
            lines.append(f"  {tenant}: container tags {tags}")
    else:
        lines.append(
            "No data yet: 'wm-middleware serve --demo-data' seeds the demo's memories under key "
            "sk-wm-demo (container tag user-alex), or POST /_emulator/seed."
        )
    lines += ["", "Controls (never counted, delayed or faulted):"]
    lines += [f"  {method:<6} {path:<19} {what}" for method, path, what in controls]
    return "\n".join(lines) + "\n"


def _control_routes(emulator: Emulator) -> list[Route]:
    async def stats(request: Request) -> Response:
        return JSONResponse(emulator.stats())

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def reset(request: Request) -> Response:
        data = await _control_body(request)
        emulator.reset(
            data=data.get("data", True) is not False,
            counts=data.get("counts", True) is not False,
            faults=data.get("faults", True) is not False,
        )
        return JSONResponse({"ok": True})

    async def seed(request: Request) -> Response:
        data = await _control_body(request)
        key = _str(data.get("apiKey"))
        if key is None:
            return _error(400, "Invalid request", "apiKey is required")
        items = data.get("memories")
        mems = emulator.seed(
            key,
            items if isinstance(items, list) else [],
            container_tag=_str(data.get("containerTag")) or DEFAULT_CONTAINER_TAG,
        )
        return JSONResponse({"ids": [m.id for m in mems]})

    async def faults(request: Request) -> Response:
        if request.method == "DELETE":
            emulator.clear_faults()
            return JSONResponse({"ok": True})
        data = await _control_body(request)
        if "errorRate" in data:
            emulator.set_error_rate(
                _float(data.get("errorRate"), 0.0),
                statuses=[int(s) for s in data.get("statuses") or []] or None,
                seed=data.get("seed") if isinstance(data.get("seed"), int) else None,
            )
        count = data.get("count", 1)
        n = None if count is None else _int(count, 1)
        if data.get("hang") is not None:
            emulator.hang_next(
                n,
                _float(data.get("hang"), 30.0),
                path=_str(data.get("path")),
                method=_str(data.get("method")),
            )
        if data.get("status") is not None:
            retry = data.get("retryAfter")
            emulator.fail_next(
                n,
                _int(data.get("status"), 500),
                path=_str(data.get("path")),
                method=_str(data.get("method")),
                retry_after=_float(retry, 0.0) if retry is not None else None,
            )
        return JSONResponse({"ok": True, "pending": len(emulator.faults.pending)})

    async def latency(request: Request) -> Response:
        data = await _control_body(request)
        raw = data.get("latency")
        spec: LatencySpec
        if isinstance(raw, list) and len(raw) == 2:
            spec = (_float(raw[0], 0.0), _float(raw[1], 0.0))
        elif raw is None:
            spec = None
        else:
            spec = _float(raw, 0.0)
        emulator.set_latency(
            spec, seed=data.get("seed") if isinstance(data.get("seed"), int) else None
        )
        return JSONResponse({"ok": True})

    async def indexing(request: Request) -> Response:
        data = await _control_body(request)
        if "delay" not in data:
            return _error(400, "Invalid request", "delay is required (seconds, >= 0)")
        emulator.set_indexing_delay(data["delay"])
        return JSONResponse({"ok": True, "delay": emulator.indexing_delay})

    def answering(handler: Callable[[Request], Awaitable[Response]]) -> Any:
        """``handler`` answering a bad request with a JSON 400, never a plain-text 500."""

        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except ApiError as exc:
                return _error(exc.status, exc.error, exc.details)
            except (ValueError, TypeError) as exc:
                return _error(400, "Invalid request", str(exc))

        return endpoint

    # One table: the routes and the help page ``GET /`` are both made from it.
    controls: list[tuple[str, str, Callable[[Request], Awaitable[Response]], str]] = [
        ("GET", "/_emulator/health", health, "liveness"),
        ("GET", "/_emulator/stats", stats, "requests by method and path, tenants, latency"),
        ("POST", "/_emulator/reset", reset, '{"data": true, "counts": true, "faults": true}'),
        ("POST", "/_emulator/seed", seed, '{"apiKey": "sk-...", "memories": ["..."], '
         '"containerTag": "..."}'),
        ("POST", "/_emulator/faults", faults, '{"status": 503, "count": 1, "path": "/v4/search"}'
         ', {"hang": 30} or {"errorRate": 0.1}'),
        ("DELETE", "/_emulator/faults", faults, "clear scheduled faults and the error rate"),
        ("POST", "/_emulator/latency", latency, '{"latency": 0.1} (seconds) or '
         '{"latency": [0.08, 0.12]}'),
        ("POST", "/_emulator/indexing", indexing, '{"delay": 2.0} (seconds from a write until '
         'it is searchable; later writes)'),
    ]  # fmt: skip
    help_rows = [(method, path, what) for method, path, _, what in controls]

    async def index(request: Request) -> Response:
        return PlainTextResponse(describe(emulator, str(request.base_url).rstrip("/"), help_rows))

    return [
        Route("/", index, methods=["GET"]),
        *(
            Route(path, answering(handler), methods=[method])
            for method, path, handler, _ in controls
        ),
    ]


def create_app(emulator: Emulator | None = None) -> Starlette:
    """Build the Starlette ASGI app serving ``emulator`` (a fresh one if omitted).

    The emulator is reachable as ``app.state.emulator``.
    """
    em = emulator if emulator is not None else Emulator()
    api = _Api(em)

    async def endpoint(request: Request) -> Response:
        method = request.method.upper()
        path = request.url.path
        body = await request.body()
        parsed: Any = None
        invalid: str | None = None  # why the JSON body was refused, answered after routing
        if body and "json" in request.headers.get("content-type", "json"):
            try:
                parsed = _loads(body)
            except ValueError as error:
                invalid = str(error)
        token = _bearer(request)
        em.log.record(
            RecordedRequest(
                method=method,
                path=path,
                query={k: request.query_params.getlist(k) for k in request.query_params},
                headers=dict(request.headers),
                body=body,
                json=parsed,
                tenant=token,
            )
        )
        delay = em.latency.draw()
        if delay > 0:
            await asyncio.sleep(delay)
        decision = em.faults.decide(method, path)
        if decision is not None:
            if decision.hang is not None:
                await _hang(em, request, decision.hang)
            if decision.status is not None:
                return _fault_response(decision)
        tenant = em.authorize(token)
        if tenant is None:
            return _error(401, "Unauthorized", "Missing or invalid API key")
        route_path = path[3:] if path.startswith("/v5/") else path
        found = api.router.match(method, route_path.rstrip("/") or "/")
        if found is None:
            return _error(404, "Not found", f"No route for {method} {path}")
        if found is True:
            return _error(405, "Method not allowed", f"{method} is not supported on {path}")
        assert isinstance(found, tuple)
        handler, params = found
        if invalid is not None:
            return _error(400, "Invalid request", f"Body is not valid JSON: {invalid}")
        try:
            result = handler(
                _Ctx(request=request, tenant=tenant, params=params, body=body, json=parsed)
            )
        except ApiError as exc:
            return _error(exc.status, exc.error, exc.details)
        except Exception as exc:  # the emulator must always answer in JSON
            return _error(500, "Internal server error", f"{type(exc).__name__}: {exc}")
        if isinstance(result, Response):
            return result
        return JSONResponse(result)

    routes = [*_control_routes(em), Route("/{path:path}", endpoint, methods=_METHODS)]
    app = Starlette(routes=routes)
    app.state.emulator = em
    return app
