"""The emulator's Starlette application: one dispatch for every API route.

Contract:

* :func:`create_app` exposes an :class:`~wm_middleware.emulator.core.Emulator` over HTTP with
  the paths the ``supermemory`` SDKs send: 3.x (``/v3/...``, ``/v4/...``, :mod:`.v3`) and 5.x
  (``/ns/...``, also accepted under a ``/v5`` prefix, :mod:`.v5`), plus the control API under
  ``/_emulator`` (:mod:`.control`).
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
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import _messages as msg
from . import v3, v5
from .control import control_routes, describe
from .core import Emulator
from .faults import FaultDecision
from .request_log import RecordedRequest
from .routes import Router
from .values import loads
from .wire import ApiError, Ctx, error_response

__all__ = ["Emulator", "api_routes", "create_app", "describe"]

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
V5_PREFIX = "/v5"
"""5.x paths are served with and without this prefix."""


def _router(emulator: Emulator) -> Router:
    return Router(*v3.handlers(emulator.store), *v5.handlers(emulator.store))


def api_routes() -> list[tuple[str, str]]:
    """Every Supermemory API route the emulator serves: (method, path template).

    Templates name one path segment ``{name}``; 5.x paths are also served under ``/v5``.
    """
    return list(_router(Emulator()).templates)


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
    status = decision.status or 500
    body = decision.body or {
        "error": msg.FAULT_ERRORS.get(status, msg.FAULT_DEFAULT),
        "details": msg.FAULT_DETAILS,
    }
    return JSONResponse(body, status_code=status, headers=decision.response_headers())


def _parse(request: Request, body: bytes) -> tuple[Any, str | None]:
    """The JSON body (``None`` if none), and why it was refused (answered after routing)."""
    if not body or "json" not in request.headers.get("content-type", "json"):
        return None, None
    try:
        return loads(body), None
    except ValueError as error:
        return None, str(error)


async def _before(em: Emulator, request: Request, body: bytes, parsed: Any) -> Response | None:
    """Record the request, sleep its latency, apply its fault; a fault's answer, if any."""
    em.log.record(
        RecordedRequest(
            method=request.method.upper(),
            path=request.url.path,
            query={k: request.query_params.getlist(k) for k in request.query_params},
            headers=dict(request.headers),
            body=body,
            json=parsed,
            tenant=_bearer(request),
            peer=None if request.client is None else (request.client.host, request.client.port),
        )
    )
    delay = em.latency.draw()
    if delay > 0:
        await asyncio.sleep(delay)
    decision = em.faults.decide(request.method.upper(), request.url.path)
    if decision is not None:
        if decision.hang is not None:
            await _hang(em, request, decision.hang)
        if decision.status is not None:
            return _fault_response(decision)
    return None


def create_app(emulator: Emulator | None = None) -> Starlette:
    """Build the Starlette ASGI app serving ``emulator`` (a fresh one if omitted).

    The emulator is reachable as ``app.state.emulator``.
    """
    em = emulator if emulator is not None else Emulator()
    router = _router(em)

    async def endpoint(request: Request) -> Response:
        method, path = request.method.upper(), request.url.path
        body = await request.body()
        parsed, invalid = _parse(request, body)
        answered = await _before(em, request, body, parsed)
        if answered is not None:
            return answered
        tenant = em.authorize(_bearer(request))
        if tenant is None:
            return error_response(401, msg.UNAUTHORIZED, msg.BAD_API_KEY)
        route_path = path.removeprefix(V5_PREFIX) if path.startswith(V5_PREFIX + "/") else path
        found = router.match(method, route_path.rstrip("/") or "/")
        if found is None:
            return error_response(404, msg.NOT_FOUND, msg.NO_ROUTE.format(method=method, path=path))
        if found is True:
            details = msg.METHOD_NOT_ALLOWED_DETAILS.format(method=method, path=path)
            return error_response(405, msg.METHOD_NOT_ALLOWED, details)
        assert isinstance(found, tuple)
        handler, params = found
        if invalid is not None:
            return error_response(400, msg.INVALID_REQUEST, msg.BODY_NOT_JSON.format(error=invalid))
        try:
            result = handler(
                Ctx(request=request, tenant=tenant, params=params, body=body, json=parsed)
            )
        except ApiError as exc:
            return error_response(exc.status, exc.error, exc.details)
        except Exception as exc:  # the emulator must always answer in JSON
            return error_response(500, msg.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        return result if isinstance(result, Response) else JSONResponse(result)

    routes = [*control_routes(em), Route("/{path:path}", endpoint, methods=_METHODS)]
    app = Starlette(routes=routes)
    app.state.emulator = em
    return app
