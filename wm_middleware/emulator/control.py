"""The control API under ``/_emulator`` and the help page ``GET /``.

Contract: each control is declared with ``@control(METHOD, path, what)`` next to its handler;
the routes and the help page are both made from those declarations. A control receives the
emulator and the request's JSON object body (``{}`` when empty) and answers a JSON object; a
body that is not a JSON object, or a value the emulator refuses, is a JSON 400, never a
plain-text 500. Controls are never counted, delayed or faulted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from . import _messages as msg
from .core import Emulator
from .latency import LatencySpec
from .store import DEFAULT_CONTAINER_TAG
from .values import JSON, loads, to_float, to_int, to_str
from .wire import ApiError, error_response

__all__ = ["CONTROLS", "Control", "control", "control_routes", "describe"]

ControlHandler = Callable[[Emulator, JSON], JSON]


@dataclass(frozen=True)
class Control:
    """One control route: ``method path``, what it does (for ``GET /``) and its handler."""

    method: str
    path: str
    what: str
    handler: ControlHandler


CONTROLS: list[Control] = []
"""Every control, in declaration order."""


def control(method: str, path: str, what: str) -> Callable[[ControlHandler], ControlHandler]:
    """Declare the decorated function as the control ``method path``."""

    def mark(handler: ControlHandler) -> ControlHandler:
        CONTROLS.append(Control(method, path, what, handler))
        return handler

    return mark


def _seed_arg(data: Mapping[str, Any]) -> int | None:
    seed = data.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


@control("GET", "/_emulator/health", "liveness")
def health(emulator: Emulator, data: JSON) -> JSON:
    return {"ok": True}


@control("GET", "/_emulator/stats", "requests by method and path, tenants, latency")
def stats(emulator: Emulator, data: JSON) -> JSON:
    return emulator.stats()


@control("POST", "/_emulator/reset", '{"data": true, "counts": true, "faults": true}')
def reset(emulator: Emulator, data: JSON) -> JSON:
    emulator.reset(
        data=data.get("data", True) is not False,
        counts=data.get("counts", True) is not False,
        faults=data.get("faults", True) is not False,
    )
    return {"ok": True}


@control(
    "POST", "/_emulator/seed", '{"apiKey": "sk-...", "memories": ["..."], "containerTag": "..."}'
)
def seed(emulator: Emulator, data: JSON) -> JSON:
    key = to_str(data.get("apiKey"))
    if key is None:
        raise ApiError.invalid(msg.REQUIRED.format(field="apiKey"))
    items = data.get("memories")
    memories = emulator.seed(
        key,
        items if isinstance(items, list) else [],
        container_tag=to_str(data.get("containerTag")) or DEFAULT_CONTAINER_TAG,
    )
    return {"ids": [m.id for m in memories]}


@control(
    "POST",
    "/_emulator/faults",
    '{"status": 503, "count": 1, "path": "/v4/search"}, {"hang": 30} or {"errorRate": 0.1}',
)
def faults(emulator: Emulator, data: JSON) -> JSON:
    if "errorRate" in data:
        emulator.set_error_rate(
            to_float(data.get("errorRate"), 0.0),
            statuses=[int(s) for s in data.get("statuses") or []] or None,
            seed=_seed_arg(data),
        )
    count = data.get("count", 1)
    n = None if count is None else to_int(count, 1)
    path, method = to_str(data.get("path")), to_str(data.get("method"))
    if data.get("hang") is not None:
        emulator.hang_next(n, to_float(data.get("hang"), 30.0), path=path, method=method)
    if data.get("status") is not None:
        retry = data.get("retryAfter")
        emulator.fail_next(
            n,
            to_int(data.get("status"), 500),
            path=path,
            method=method,
            retry_after=to_float(retry, 0.0) if retry is not None else None,
        )
    return {"ok": True, "pending": len(emulator.faults.pending)}


@control("DELETE", "/_emulator/faults", "clear scheduled faults and the error rate")
def clear_faults(emulator: Emulator, data: JSON) -> JSON:
    emulator.clear_faults()
    return {"ok": True}


@control("POST", "/_emulator/latency", '{"latency": 0.1} (seconds) or {"latency": [0.08, 0.12]}')
def latency(emulator: Emulator, data: JSON) -> JSON:
    raw = data.get("latency")
    spec: LatencySpec
    if isinstance(raw, list) and len(raw) == 2:
        spec = (to_float(raw[0], 0.0), to_float(raw[1], 0.0))
    elif raw is None:
        spec = None
    else:
        spec = to_float(raw, 0.0)
    emulator.set_latency(spec, seed=_seed_arg(data))
    return {"ok": True}


@control(
    "POST",
    "/_emulator/indexing",
    '{"delay": 2.0} (seconds from a write until it is searchable; later writes)',
)
def indexing(emulator: Emulator, data: JSON) -> JSON:
    if "delay" not in data:
        raise ApiError.invalid("delay is required (seconds, >= 0)")
    emulator.set_indexing_delay(data["delay"])
    return {"ok": True, "delay": emulator.indexing_delay}


async def _body(request: Request) -> JSON:
    """The JSON object a control request sends (``{}`` when empty).

    Raises:
        ApiError: 400 for invalid JSON, a non-finite number, or anything but an object.
    """
    raw = await request.body()
    try:
        data = loads(raw) if raw.strip() else {}
    except ValueError as error:
        raise ApiError.invalid(msg.BODY_NOT_JSON.format(error=error)) from None
    if not isinstance(data, Mapping):
        raise ApiError.invalid(msg.BODY_NOT_OBJECT)
    return dict(data)


def _endpoint(
    emulator: Emulator, handler: ControlHandler
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return JSONResponse(handler(emulator, await _body(request)))
        except ApiError as exc:
            return error_response(exc.status, exc.error, exc.details)
        except (ValueError, TypeError) as exc:
            return error_response(400, msg.INVALID_REQUEST, str(exc))

    return endpoint


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


def control_routes(emulator: Emulator) -> list[Route]:
    """The Starlette routes of ``GET /`` and every control, serving ``emulator``."""
    help_rows = [(c.method, c.path, c.what) for c in CONTROLS]

    async def index(request: Request) -> Response:
        return PlainTextResponse(describe(emulator, str(request.base_url).rstrip("/"), help_rows))

    return [
        Route("/", index, methods=["GET"]),
        *(Route(c.path, _endpoint(emulator, c.handler), methods=[c.method]) for c in CONTROLS),
    ]
