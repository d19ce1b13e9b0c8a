"""The HTTP side every handler shares: errors, the request context, uploads, pagination.

Contract: a handler receives a :class:`Ctx` (tenant, path parameters, raw and parsed body)
and returns a JSON-serialisable value or a Starlette ``Response``; it answers an error by
raising :class:`ApiError`, which :func:`error_response` turns into the API's error shape
``{"error": ..., "details": ...}``.
"""

from __future__ import annotations

import math
import mimetypes
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import _messages as msg
from .store import Document
from .values import JSON, loads, str_list, to_str

__all__ = [
    "DEFAULT_LIMIT",
    "JSON",
    "ApiError",
    "Ctx",
    "Upload",
    "add_batch",
    "elapsed_ms",
    "error_response",
    "json_object",
    "json_or_str_tags",
    "paginate",
    "required",
    "write_result",
]

DEFAULT_LIMIT = 10
"""Results per search or page when a request names no ``limit`` (both generations)."""


class ApiError(Exception):
    """Raised by handlers to answer with a JSON error."""

    def __init__(self, status: int, error: str, details: str | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.details = details

    @classmethod
    def invalid(cls, details: str) -> ApiError:
        """A 400 ``Invalid request`` with ``details``."""
        return cls(400, msg.INVALID_REQUEST, details)


def error_response(
    status: int, error: str, details: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    """The API's JSON error answer."""
    body: JSON = {"error": error}
    if details is not None:
        body["details"] = details
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def required(body: Mapping[str, Any], field: str) -> str:
    """The non-empty string ``body[field]``.

    Raises:
        ApiError: 400 naming ``field`` when it is missing, empty or not a string.
    """
    value = body.get(field)
    if not isinstance(value, str) or value == "":
        raise ApiError.invalid(msg.REQUIRED.format(field=field))
    return value


def json_or_str_tags(value: object) -> list[str]:
    """Container tags sent in a form field: a JSON array, or one tag."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            return str_list(loads(value))
        except ValueError:
            return []
    return str_list(value)


def json_object(value: object) -> dict[str, Any] | None:
    """A mapping, or a form field holding a JSON object; ``None`` for anything else.

    Raises:
        ApiError: 400 when the field is not valid JSON.
    """
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip():
        try:
            parsed = loads(value)
        except ValueError as error:
            raise ApiError.invalid(f"metadata is not valid JSON: {error}") from None
        return dict(parsed) if isinstance(parsed, Mapping) else None
    return None


def write_result(doc: Document) -> JSON:
    """What a write answers about one document, both generations: its id and status."""
    return {"id": doc.id, "status": doc.status}


def add_batch(
    body: Mapping[str, Any],
    item_of: Callable[[Any], Mapping[str, Any]],
    add: Callable[[Mapping[str, Any]], Document],
    id_field: str,
) -> tuple[list[JSON], int]:
    """The results of a batch add, both generations, and how many of them failed.

    Each entry of ``body["documents"]`` becomes an item by ``item_of`` and is written by ``add``;
    an item that fails answers its error under its ``id_field`` (``"unknown"`` without one).
    """
    items = body.get("documents")
    if not isinstance(items, list):
        raise ApiError.invalid(msg.NOT_AN_ARRAY.format(field="documents"))
    results: list[JSON] = []
    failed = 0
    for raw in items:
        item = item_of(raw)
        try:
            results.append(write_result(add(item)))
        except ApiError as exc:
            item_id = to_str(item.get(id_field)) or "unknown"
            results.append(
                {"id": item_id, "status": "error", "error": exc.error, "details": exc.details}
            )
            failed += 1
    return results, failed


def elapsed_ms(start: float) -> int:
    """Whole milliseconds since ``time.perf_counter()`` was ``start`` (at least 1)."""
    return max(1, round((time.perf_counter() - start) * 1000))


def paginate(items: Sequence[Any], page: int, limit: int) -> tuple[list[Any], JSON]:
    """Page ``page`` (from 1) of ``limit`` items, and the API's ``pagination`` object."""
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
class Upload:
    """A ``multipart/form-data`` body: its plain fields and its one file (if any)."""

    fields: dict[str, str]
    filename: str | None
    content_type: str | None
    data: bytes | None

    @classmethod
    def parse(cls, content_type: str, body: bytes) -> Upload:
        """Parse a ``multipart/form-data`` body with the stdlib e-mail parser."""
        head = b"Content-Type: " + content_type.encode("latin-1") + b"\r\nMIME-Version: 1.0\r\n\r\n"
        message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
        upload = cls(fields={}, filename=None, content_type=None, data=None)
        if not message.is_multipart():
            return upload
        for part in message.iter_parts():
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

    def content(self) -> tuple[str, str]:
        """``(text content, document type)`` of the uploaded file."""
        data = self.data or b""
        mime = self.content_type or mimetypes.guess_type(self.filename or "")[0] or ""
        if self.filename and mime in ("", "application/octet-stream"):
            mime = mimetypes.guess_type(self.filename)[0] or mime
        kind = "text"
        if mime == "application/pdf":
            kind = "pdf"
        elif mime.startswith(("image/", "video/", "audio/")):
            kind = mime.split("/", 1)[0]
        if kind == "text":
            try:
                return data.decode("utf-8"), kind
            except UnicodeDecodeError:
                pass
        return f"[{kind} file {self.filename or 'upload'} ({len(data)} bytes)]", kind


@dataclass
class Ctx:
    """One API request as a handler sees it."""

    request: Request
    tenant: str
    params: dict[str, str]
    body: bytes
    json: Any

    @property
    def data(self) -> JSON:
        """The JSON body when it is an object, else ``{}``."""
        return dict(self.json) if isinstance(self.json, Mapping) else {}

    def query(self, name: str) -> str | None:
        """One query parameter."""
        return self.request.query_params.get(name)

    def query_list(self, name: str) -> list[str]:
        """A repeated and/or comma-separated query parameter."""
        out: list[str] = []
        for v in self.request.query_params.getlist(name):
            out.extend(x for x in v.split(",") if x)
        return out

    def upload(self) -> Upload:
        """The multipart body, or the JSON body's fields as form fields with no file."""
        ctype = self.request.headers.get("content-type", "")
        if ctype.startswith("multipart/"):
            return Upload.parse(ctype, self.body)
        fields = {k: str(v) for k, v in self.data.items()}
        return Upload(fields=fields, filename=None, content_type=None, data=None)
