"""httpx: a caching transport for callers that speak the Supermemory HTTP API with plain httpx.

For code that builds its own ``httpx.Client`` / ``httpx.AsyncClient`` (supermemory-bash does)::

    import httpx
    from wm_middleware import AsyncCachingTransport

    transport = AsyncCachingTransport()
    client = httpx.AsyncClient(base_url="https://api.supermemory.ai",
                               headers={"Authorization": f"Bearer {key}"}, transport=transport)
    await client.post("/v4/search", json={"q": "tea", "containerTag": "user-1"})  # upstream
    await client.post("/v4/search", json={"q": "tea", "containerTag": "user-1"})  # from memory
    transport.working_memory.stats()  # CacheStats(hits=1, misses=1, ...)

What is cached: 2xx answers to the POST reads ``v3/search``, ``v4/search``, ``v4/profile``,
``v3/documents/list`` and ``ns/{ns}/search``, ``ns/{ns}/profile``, ``ns/{ns}/list/{type}``,
matched on the tail of the path (any base path in front, e.g. ``/v5/`` or ``/api/``). The key is
the method, the URL (scheme, host, port, path, query), a fingerprint of the credentials
(``Authorization`` or ``x-api-key``) and the canonical JSON body (the raw bytes when it is not
JSON). The stored value is the status, the headers and the *decoded* body; every hit gets a fresh
``httpx.Response``, so callers never share one. Other processes (the shared tier) get the status,
the ``Content-Type`` and the body text: headers that describe one exchange (dates, cookies,
request ids, rate limits) are never replayed to another process's caller.

Never cached: non-2xx answers, GETs, other paths, request bodies that are unread streams, and, for
the ``Client.send`` patches, ``stream=True`` sends and requests whose credentials an httpx ``auth``
flow adds after ``send`` (the transport below still sees those; use :class:`CachingTransport`).

Writes sent the same way (``v3/documents*``, ``v4/memories``, ``v3/settings``, ``v3/connections*``,
``ns/{ns}/document*``, ``ns/{ns}/memories*``, ``ns/{ns}/profile/buckets``, ``ns/{ns}`` ...)
invalidate the container tags or namespace they name, or the whole tenant (origin + credentials)
when they name none.

Nesting: the supermemory SDKs send through httpx too. Their calls are handled one level up by the
SDK adapters, and this layer passes them straight through (``handled_outside()``), so a call is
cached and traced once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cache, partial
from typing import Any, Final, Generic, TypeVar, cast

import httpx

from .._api.routes import Match, Route, find_in, query_of, read_tags, written
from .._api.tenancy import canonical, fingerprint, read_scopes, server_of
from .._calls import Follow, Read, Write
from .._core import SharedCodec, WorkingMemory
from .._runtime import Runtime, handled_outside
from .._telemetry import Telemetry
from . import Patch
from .calls import Bypass, ClientVia, run, write_of

__all__ = [
    "AsyncCachingTransport",
    "CachingTransport",
    "patches",
]

# Headers that describe the bytes on the wire, not the decoded body we store.
_WIRE_HEADERS: Final = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})
_WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_Inner = TypeVar("_Inner", httpx.BaseTransport, httpx.AsyncBaseTransport)


# -- describing a request ----------------------------------------------------------------------
ViaOf = Callable[[str, dict[str, str], object], ClientVia]
"""What a write's status requests go through, given its base URL, credentials and timeout."""


@dataclass(frozen=True, slots=True)
class _ReadSpec:
    route: Route
    key: Hashable
    scopes: tuple[Hashable, ...]
    server: tuple[str, int | None]
    query: str | None
    flight: Hashable  # the request's timeouts: what decides its outcome but not its value


_NOT_JSON: Final = object()


def _body_of(request: httpx.Request) -> bytes | None:
    """The request body, or ``None`` for a stream nobody has read (we never consume it)."""
    try:
        return request.content
    except httpx.RequestNotRead:
        return None


def _json(content: bytes) -> Any:
    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return _NOT_JSON


def _credentials(headers: httpx.Headers) -> str | None:
    authorization: str | None = headers.get("authorization")
    if authorization:
        # The bare key, so a tenant here equals ``tenant_of(base_url, api_key)`` of the SDK layer.
        scheme, _, token = authorization.partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else authorization
    api_key: str | None = headers.get("x-api-key")
    return api_key


def describe(request: httpx.Request, via: ViaOf | None = None) -> _ReadSpec | Write | None:
    """What ``request`` is to the working memory: a cacheable read, a write, or neither.

    ``via``: what a write's status requests go through (default: the transport that sends).
    """
    method = request.method
    if method not in _WRITE_METHODS:
        return None
    url = request.url
    found = find_in(method, url.raw_path.partition(b"?")[0].decode("ascii", "replace"))
    if found is None or found.route.kind == "pass":
        return None
    route = found.route
    origin = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}"
    tenant = (origin, fingerprint(_credentials(request.headers)))
    server = server_of(origin)
    content = _body_of(request)
    body = _NOT_JSON if content is None else _json(content)
    if route.kind == "write":
        scopes = written(found, tenant, body, url.params)
        if scopes is None:
            return None  # a preview (dry run) reads
        return write_of(
            found,
            scopes,
            server,
            body,
            lambda: _follow(found, request, origin, via),
        )
    if content is None:
        return None  # an unread streaming body: cannot key it, pass it through
    body_key: Hashable = content if body is _NOT_JSON else canonical(body)
    url_key = f"{origin}{url.raw_path.decode('ascii', 'replace')}"
    key = ("httpx", tenant, route.operation, method, url_key, body_key)
    query = query_of(found, body)
    scopes = read_scopes(tenant, read_tags(found, body), query)
    flight = canonical(request.extensions.get("timeout"))
    return _ReadSpec(route, key, scopes, server, query, flight)


def _follow(found: Match, request: httpx.Request, origin: str, via: ViaOf | None) -> Follow | None:
    """How to ask about a write's documents: the API root in front of the route, the key, and
    the client or transport the write went through (none: the write is not followed).

    Both read from the path as sent (``raw_path``): a decoded ``%2F`` would split a segment, and
    the namespace is decoded once, by the match.
    """
    if via is None:
        return None
    route = found.route
    parts = request.url.raw_path.partition(b"?")[0].decode("ascii", "replace").strip("/")
    segments = parts.split("/")
    root = "/".join(segments[: len(segments) - len(route.template.strip("/").split("/"))])
    headers = tuple(
        (name, value)
        for name, value in request.headers.items()
        if name.lower() in ("authorization", "x-api-key")
    )
    base_url = f"{origin}/{root}" if root else origin
    sender = via(base_url, dict(headers), request.extensions.get("timeout"))
    return Follow(route.generation, base_url, headers, sender, found.namespace)


class _ViaHttpx(ClientVia):
    """Status requests as the write went: through the caller's ``httpx`` client (its auth,
    event hooks, transport) or through the transport a :class:`CachingTransport` wraps (where
    httpx keeps proxy, TLS and resolver), with the write's credentials."""

    __slots__ = ("base_url", "headers")

    def __init__(
        self,
        client: object,
        asynchronous: bool,
        base_url: str,
        headers: dict[str, str],
        timeout: object,
    ) -> None:
        super().__init__(client, asynchronous, timeout)
        self.base_url, self.headers = base_url, headers

    def _request(self, path: str, params: Mapping[str, str], within: float) -> httpx.Request:
        return httpx.Request(
            "GET",
            self.base_url + path,
            params=dict(params),
            headers=self.headers,
            extensions={"timeout": httpx.Timeout(within).as_dict()},
        )


class _ViaClient(_ViaHttpx):
    """Through an ``httpx.Client`` / ``AsyncClient`` (the ``send`` patches)."""

    __slots__ = ()

    def _open(self, client: Any) -> bool:
        return not client.is_closed

    def _send(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        url = self.base_url + path
        return client.send(
            client.build_request("GET", url, params=params, headers=self.headers, timeout=within)
        )

    async def _asend(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        url = self.base_url + path
        return await client.send(
            client.build_request("GET", url, params=params, headers=self.headers, timeout=within)
        )


class _ViaTransport(_ViaHttpx):
    """Through the transport a caching transport wraps."""

    __slots__ = ()

    def _open(self, client: Any) -> bool:
        return True  # a transport says nothing of being closed: a closed one raises

    def _send(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        response = client._transport.handle_request(self._request(path, params, within))
        try:
            response.read()
        finally:
            response.close()
        return response

    async def _asend(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        sent = self._request(path, params, within)
        response = await client._transport.handle_async_request(sent)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response


def _read(response: httpx.Response) -> httpx.Response:
    """A write's answer read, so its document ids can be followed (writes are small)."""
    response.read()
    return response


async def _aread(response: Awaitable[httpx.Response]) -> httpx.Response:
    answer = await response
    await answer.aread()
    return answer


# -- stored answers ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Stored:
    """An immutable snapshot of a fully read response: decoded body, headers that still fit it."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    content: bytes
    http_version: bytes | None
    reason_phrase: bytes | None
    records: int | None = None  # results in the body, for ``gen_ai.memory.record.count``


class _ErrorStatus(Exception):
    """Carries a non-2xx answer out of the shared fetch, so it reaches its callers uncached."""

    def __init__(self, stored: _Stored) -> None:
        super().__init__(stored.status)
        self.stored = stored


def _snapshot(response: httpx.Response) -> _Stored:
    extensions = response.extensions
    version = extensions.get("http_version")
    reason = extensions.get("reason_phrase")
    return _Stored(
        response.status_code,
        tuple((k, v) for k, v in response.headers.raw if k.lower() not in _WIRE_HEADERS),
        response.content,
        version if isinstance(version, bytes) else None,
        reason if isinstance(reason, bytes) else None,
    )


def _checked(response: httpx.Response) -> _Stored:
    stored = _snapshot(response)
    if not 200 <= stored.status < 300:
        raise _ErrorStatus(stored)
    return stored


def _fetched(send: Callable[[], httpx.Response]) -> Callable[[], _Stored]:
    """The fetch of a read: ``send``, its answer read in full and closed, then checked."""

    def fetch() -> _Stored:
        response = send()
        try:
            response.read()
        finally:
            response.close()
        return _checked(response)

    return fetch


def _afetched(send: Callable[[], Awaitable[httpx.Response]]) -> Callable[[], Awaitable[_Stored]]:
    """Async :func:`_fetched`."""

    async def fetch() -> _Stored:
        response = await send()
        try:
            await response.aread()
        finally:
            await response.aclose()
        return _checked(response)

    return fetch


def _replay(stored: _Stored, request: httpx.Request) -> httpx.Response:
    """A fresh, unread response for one caller, as a transport returns it to its client."""
    extensions: dict[str, Any] = {}
    if stored.http_version is not None:
        extensions["http_version"] = stored.http_version
    if stored.reason_phrase is not None:
        extensions["reason_phrase"] = stored.reason_phrase
    return httpx.Response(
        stored.status,
        # The client reads the stream itself (and times it for ``.elapsed``).
        headers=[*stored.headers, (b"content-length", str(len(stored.content)).encode())],
        stream=httpx.ByteStream(stored.content),
        request=request,
        extensions=extensions,
    )


def _replay_sent(stored: _Stored, request: httpx.Request) -> httpx.Response:
    """A fresh, read response, as ``Client.send`` returns it to its caller."""
    response = _replay(stored, request)
    response.read()
    response.elapsed = timedelta(0)  # no time was spent on the wire
    return response


# Headers of a stored answer that other processes get: what the body means, nothing of the
# exchange it came from.
_SHARED_HEADERS: Final = frozenset({b"content-type"})


def _share(stored: _Stored) -> Any:
    """A 2xx answer as JSON data for the shared tier; ``None`` (kept local) for a binary body."""
    try:
        body = stored.content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return {
        "status": stored.status,
        "headers": [
            [name.decode("latin-1"), value.decode("latin-1")]
            for name, value in stored.headers
            if name.lower() in _SHARED_HEADERS
        ],
        "body": body,
        "http_version": None if stored.http_version is None else stored.http_version.decode(),
    }


def _unshare(data: Any) -> _Stored:
    """The :class:`_Stored` of :func:`_share`'s data; raises on anything else."""
    status = data["status"]
    if type(status) is not int or not 200 <= status < 300:
        raise ValueError(f"a shared answer has a 2xx status, not {status!r}")
    headers = tuple(
        (str(name).encode("latin-1"), str(value).encode("latin-1"))
        for name, value in data["headers"]
        if str(name).lower().encode("latin-1") in _SHARED_HEADERS
    )
    content = str(data["body"]).encode("utf-8")
    version = data.get("http_version")
    return _Stored(
        status,
        headers,
        content,
        version.encode("ascii") if isinstance(version, str) else None,
        None,
    )


def _counted(route: Route, stored: _Stored) -> _Stored:
    """``stored`` with the records its body holds, by the route's rule."""
    return replace(stored, records=route.records_in(_json(stored.content)))


@cache  # one per read route
def _shared_codec(route: Route) -> SharedCodec:
    """How an answer of ``route`` crosses the shared tier; its records counted on arrival."""
    return SharedCodec(_share, lambda data: _counted(route, _unshare(data)))


Replay = Callable[[_Stored, httpx.Request], httpx.Response]


def _read_of(spec: _ReadSpec, request: httpx.Request, replay: Replay) -> Read:
    # One Read per request: ``count`` runs right after ``decode`` for the same caller.
    records: list[int | None] = [None]

    def decode(stored: _Stored) -> httpx.Response:
        records[0] = stored.records
        return replay(stored, request)

    return Read(
        spec.route.operation,
        spec.key,
        spec.scopes,
        spec.server,
        spec.query,
        encode=partial(_counted, spec.route),  # a fetched answer, counted once
        decode=decode,
        count=lambda response: records[0],
        share=_shared_codec(spec.route),
        flight=spec.flight,
        indexed=spec.route.indexed,
    )


# -- the shared call path ----------------------------------------------------------------------
def _decide(request: httpx.Request, via: ViaOf) -> _ReadSpec | Write | None:
    """What to do with ``request`` here: ``None`` sends it untouched (also on our own errors)."""
    if handled_outside():
        return None  # an outer layer (an SDK adapter) handles this call
    try:
        return describe(request, via)
    except Exception:  # never fail a request for our own reasons
        return None


def _handle(
    runtime: Runtime,
    request: httpx.Request,
    send: Callable[[], httpx.Response],
    fetch: Callable[[], _Stored],
    replay: Replay,
    via: ViaOf,
) -> httpx.Response:
    call = _decide(request, via)
    if call is None:
        return send()
    if isinstance(call, Write):
        return runtime.write(call, lambda: _read(send()))
    try:
        # The runtime returns ``decode(stored)``: a fresh response, not the ``_Stored`` itself.
        return cast(httpx.Response, runtime.read(_read_of(call, request, replay), fetch))
    except _ErrorStatus as error:
        return replay(error.stored, request)


async def _ahandle(
    runtime: Runtime,
    request: httpx.Request,
    send: Callable[[], Awaitable[httpx.Response]],
    fetch: Callable[[], Awaitable[_Stored]],
    replay: Replay,
    via: ViaOf,
) -> httpx.Response:
    call = _decide(request, via)
    if call is None:
        return await send()
    if isinstance(call, Write):
        return await runtime.awrite(call, lambda: _aread(send()))
    try:
        return cast(httpx.Response, await runtime.aread(_read_of(call, request, replay), fetch))
    except _ErrorStatus as error:
        return replay(error.stored, request)


def _runtime(working_memory: WorkingMemory[Any] | None, runtime: Runtime | None) -> Runtime:
    if runtime is not None:
        if working_memory is not None and working_memory is not runtime.memory:
            raise ValueError("pass working_memory or runtime, not both")
        return runtime
    return Runtime(working_memory if working_memory is not None else WorkingMemory(), Telemetry())


# -- transports --------------------------------------------------------------------------------
class _Caching(Generic[_Inner]):
    """What both transports hold: the transport that really sends and the call path they read
    and invalidate through. The sending itself, sync or async, is each one's own."""

    _default: Callable[[], _Inner]  # the inner transport when none is given

    def __init__(
        self,
        transport: _Inner | None = None,
        *,
        working_memory: WorkingMemory[Any] | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        self._transport: _Inner = transport if transport is not None else self._default()
        self._runtime = _runtime(working_memory, runtime)

    @property
    def working_memory(self) -> WorkingMemory[Any]:
        """The working memory this transport reads and invalidates."""
        return self._runtime.memory


class CachingTransport(_Caching[httpx.BaseTransport], httpx.BaseTransport):
    """An ``httpx`` transport that answers repeated Supermemory reads from a working memory.

    Args:
        transport: the transport that really sends (default ``httpx.HTTPTransport()``).
        working_memory: where entries live (default: a new ``WorkingMemory()``).
        runtime: share the call path of an ``instrument()`` or another transport instead.

    See the module documentation for what is cached and what invalidates. Errors of the inner
    transport reach the caller unchanged; non-2xx answers are returned, never stored.
    """

    _default = httpx.HTTPTransport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        send = partial(self._transport.handle_request, request)
        via = partial(_ViaTransport, self, False)
        return _handle(self._runtime, request, send, _fetched(send), _replay, via)

    def close(self) -> None:
        self._transport.close()


class AsyncCachingTransport(_Caching[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """The :class:`CachingTransport` of ``httpx.AsyncClient`` (default ``AsyncHTTPTransport()``)."""

    _default = httpx.AsyncHTTPTransport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        send = partial(self._transport.handle_async_request, request)
        via = partial(_ViaTransport, self, True)
        return await _ahandle(self._runtime, request, send, _afetched(send), _replay, via)

    async def aclose(self) -> None:
        await self._transport.aclose()


# -- instrument(httpx=True): Client.send / AsyncClient.send ------------------------------------
def _sendable(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> httpx.Request | None:
    """The request of a ``send`` call we may answer from memory, else ``None``."""
    request = args[0] if args else kwargs.get("request")
    if not isinstance(request, httpx.Request) or instance.is_closed:
        return None
    auth = kwargs.get("auth", httpx.USE_CLIENT_DEFAULT)
    if auth is httpx.USE_CLIENT_DEFAULT:
        auth = instance.auth
    if auth is not None or request.url.username or request.url.password:
        return None  # an auth flow adds credentials after this point: the key could not see them
    return request


def _plan(
    instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[httpx.Request | None, Bypass | None]:
    """The request a ``send`` may answer from memory (else ``None``), and the bypass of a
    streamed read, which is observed but never cached."""
    if handled_outside():
        return None, None
    try:
        request = _sendable(instance, args, kwargs)
        if request is None or not kwargs.get("stream"):
            return request, None
        call = describe(request)
    except Exception:  # never fail a request for our own reasons
        return None, None
    if isinstance(call, _ReadSpec):
        return request, Bypass(call.route.operation, call.server, call.query)
    return request, None


def _send(runtime: Callable[[], Runtime], is_async: bool) -> Any:
    """The wrapper of ``Client.send`` (``AsyncClient.send`` when ``is_async``: it returns the
    awaitable its caller awaits); ``runtime()`` gives the runtime a call runs on."""
    handle: Callable[..., Any] = _ahandle if is_async else _handle
    fetched: Callable[[Callable[[], Any]], Callable[[], Any]] = _afetched if is_async else _fetched

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        request, streamed = _plan(instance, args, kwargs)
        send = partial(wrapped, *args, **kwargs)
        if request is None:
            return send()
        if streamed is not None:
            return run(runtime(), streamed, send, is_async)
        via = partial(_ViaClient, instance, is_async)
        return handle(runtime(), request, send, fetched(send), _replay_sent, via)

    return wrapper


def patches(runtime: Callable[[], Runtime]) -> list[Patch]:
    """``httpx.Client.send`` and ``httpx.AsyncClient.send``, for ``instrument(httpx=True)``."""
    return [
        Patch("httpx", "Client.send", _send(runtime, False)),
        Patch("httpx", "AsyncClient.send", _send(runtime, True)),
    ]
