"""supermemory 5.x (Fern-generated, with the hand-written ``_compat`` layer).

Where it hooks, and why there:

* **Reads** wrap the generated model-level methods ``supermemory.client.Supermemory.search``,
  ``.profile`` and ``.list`` (and the ``AsyncSupermemory`` twins). ``_compat`` subclasses these
  classes and rebuilds a bound method on every attribute access, so the class attribute is the one
  stable place; ``_compat`` still applies per-call options and maps errors around our wrapper.
* **Writes and raw reads** are seen at ``core.http_client.HttpClient.request`` (and the async
  twin), which every generated call ends in. A write is classified by (method, path): the
  namespace is the ``ns/{namespace}`` path segment. ``client.with_raw_response.search(...)`` goes
  to ``RawSupermemory`` directly and so reaches the transport without a model-level read around
  it: it is recorded as a bypass and never cached. Retries recurse into ``request`` with
  ``retries > 0``; only the outermost call is handled.

Values: responses are frozen pydantic models whose lists and dicts still mutate. The cache holds
the model pickled (only ever made here, from objects the SDK built) and every hit unpickles a
fresh one, as the 3.x adapter does. Other processes (the shared tier) get the model's JSON
(``model_dump(mode="json", by_alias=True, exclude_unset=True)``) as data and rebuild it with
the SDK's own ``construct_type``, as the SDK does from the wire; the type they rebuild is the
one the called method is declared to return, never one named by the stored entry.

A hit builds only its key: what a client contributes to every read (its tenant, server address,
custom headers, retries and timeout) is computed once per client state, and a plain call seen
before on the client finds its whole :class:`Read` by the exact key of its arguments.
"""

from __future__ import annotations

import copy as _copy
import pickle
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from typing import Any, Final

import wrapt

from .._api.routes import (
    QUIET_METHODS,
    Route,
    find,
    query_of,
    route_named,
    written,
)
from .._api.tenancy import (
    Tenant,
    canonical,
    fingerprint,
    namespace_tag,
    read_scopes,
    server_of,
    tenant_of,
)
from .._calls import Follow, Read
from .._core import SharedCodec
from .._runtime import Runtime, handled_outside
from . import Patch
from .calls import Bypass, ClientVia, memo_key_of, remember, run, timeout_key, write_of

__all__ = ["patches", "wrap"]


_FAMILY = "sm5"
_OMIT: Any = ...  # the generated code's OMIT sentinel (``typing.cast(Any, ...)``)
# Positional parameters of the wrapped reads, after ``self``.
_READS: dict[str, tuple[str, ...]] = {
    "search": ("namespace",),
    "profile": ("namespace",),
    "list": ("namespace", "type"),
}
# Keyword arguments that never reach the request body, query or path.
_NOT_SENT = frozenset({"request_options", "timeout"})


def _sdk_is_5x() -> bool:
    try:
        from importlib.metadata import version

        return version("supermemory").split(".")[0] == "5"
    except Exception:
        return False


# -- tenant --------------------------------------------------------------------------------------
def _header(headers: Mapping[str, Any] | None, name: str) -> Any:
    if not headers:
        return None
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == name:
            return value
    return None


def _extra_headers(*sources: Mapping[str, Any] | None) -> str | None:
    """A fingerprint of the headers beyond the SDK's own, which may change an answer."""
    merged: dict[str, Any] = {}
    for source in sources:
        if source:
            merged.update((str(k).lower(), v) for k, v in source.items())
    merged.pop("authorization", None)
    return fingerprint(canonical(merged)) if merged else None


# -- values ---------------------------------------------------------------------------------------
class _Kept:
    """A value that does not pickle, kept as a private deep copy (not a model we know)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _encode(value: Any) -> bytes | _Kept:
    """An immutable snapshot of a response model: the SDK's own model, pickled.

    Unpickling rebuilds the identical frozen model with fresh lists and dicts, ~9x faster than
    rebuilding it from JSON with ``construct_type``. The bytes never leave this process and are
    only ever made from objects the SDK itself built.
    """
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return _Kept(_copy.deepcopy(value))


def _decode(stored: bytes | _Kept) -> Any:
    if type(stored) is bytes:
        return pickle.loads(stored)
    return _copy.deepcopy(stored.value)  # type: ignore[union-attr]


@cache  # one per operation in _READS
def _shared_codec(operation: str) -> SharedCodec | None:
    """How the response of ``operation`` crosses the shared tier: its JSON, as data.

    The class to rebuild is the return annotation of the generated method (Fern writes it as a
    name of the client module); ``None`` when it cannot be found, and the value stays local.
    """
    try:
        import supermemory.client

        method = getattr(supermemory.client.Supermemory, operation)
        returned = method.__annotations__["return"]
        cls = method.__globals__[returned] if isinstance(returned, str) else returned
        if not isinstance(cls, type):
            return None
    except Exception:
        return None

    def dump(snapshot: bytes | _Kept) -> Any:
        value = pickle.loads(snapshot) if type(snapshot) is bytes else None
        if type(value) is not cls:
            return None
        model: Any = value  # the one class ``cls`` names
        return model.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def load(body: Any) -> bytes | _Kept:
        # Built once here, so a body the model cannot take is a miss, not a caller's error.
        from supermemory.core.unchecked_base_model import construct_type

        if not isinstance(body, dict):
            raise TypeError(f"a {cls.__name__} body is a JSON object")
        return _encode(construct_type(type_=cls, object_=body))

    return SharedCodec(dump, load)


# -- reads at the model level ---------------------------------------------------------------------
class _Client:
    """What a client contributes to each of its reads, computed once per client state.

    A client's base URL, key (a string or a callable asked per call), custom headers, timeout
    and retries are plain attributes that may change; the entry is reused only while all of them
    are what they were when it was made.
    """

    __slots__ = (
        "api_key",
        "base_url",
        "flight",
        "headers",
        "reads",
        "retries",
        "server",
        "tenant",
        "timeout",
    )

    def __init__(self, wrapper: Any, api_key: str) -> None:
        self.base_url: str = wrapper.get_base_url()
        self.api_key = api_key
        self.headers: dict[str, Any] | None = _copied(wrapper.get_custom_headers())
        self.timeout: object = wrapper.get_timeout()
        self.retries: object = getattr(wrapper.httpx_client, "base_max_retries", None)
        self.tenant = tenant_of(self.base_url, f"Bearer {api_key}")
        self.server = server_of(self.base_url)
        # The flight of a call without options: the client's retries and timeout.
        self.flight = _flight(self.retries, self.timeout, {})
        # The Read of each plain call seen (arguments only, no request options), by an exact key
        # of its small flat arguments: a repeat skips key building. It lives with this entry.
        self.reads: dict[Hashable, Read] = {}

    def matches(self, wrapper: Any, api_key: str) -> bool:
        """True while ``wrapper`` (the client's) is in the state this entry was made from."""
        return (
            self.api_key == api_key
            and self.base_url == wrapper.get_base_url()
            and self.headers == wrapper.get_custom_headers()
            and self.timeout is wrapper.get_timeout()
            and self.retries == getattr(wrapper.httpx_client, "base_max_retries", None)
        )


def _copied(headers: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if headers is None else dict(headers)


_CLIENTS: weakref.WeakKeyDictionary[Any, _Client] = weakref.WeakKeyDictionary()


def _client(wrapper: Any) -> _Client:
    api_key = wrapper._get_api_key()  # per call: a callable key may rotate
    found = _CLIENTS.get(wrapper)
    if found is None or not found.matches(wrapper, api_key):
        found = _CLIENTS[wrapper] = _Client(wrapper, api_key)
    return found


def _describe_read(
    instance: Any, operation: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Read | None:
    """The :class:`Read` of a model-level call, or ``None`` (passed through).

    A call with arguments only (no ``request_options``) seen before on this client is looked up
    first, by its exact small flat arguments: a repeated read builds only that key.
    """
    names = _READS[operation]
    if len(args) > len(names):
        return None
    wrapper = instance._client_wrapper
    if getattr(wrapper, "_async_token", None) is not None:
        return None  # the Authorization header is only known once awaited: do not guess
    client = _client(wrapper)
    memo_key = None
    if "request_options" not in kwargs:
        # The arguments by name, typed like the rest: ``1`` and ``True`` are two namespaces.
        memo_key = memo_key_of((operation,), {**dict(zip(names, args, strict=False)), **kwargs})
        if memo_key is not None:
            found = client.reads.get(memo_key)
            if found is not None:
                return found
    read = _read_of(client, operation, names, args, kwargs)
    if read is not None and memo_key is not None:
        remember(client.reads, memo_key, read)
    return read


def _read_of(
    client: _Client,
    operation: str,
    names: tuple[str, ...],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Read | None:
    options = kwargs.get("request_options") or {}
    additional = options.get("additional_headers")
    authorization = _header(additional, "authorization")
    tenant = client.tenant if authorization is None else tenant_of(client.base_url, authorization)
    request = _request_of(names, args, kwargs, options)
    if "namespace" not in request:
        return None
    headers = _extra_headers(client.headers, additional)
    if headers is not None:
        request["headers"] = headers
    route = route_named(5, operation)
    query = request.get(route.query) if route.query is not None else None
    query = query if isinstance(query, str) else None
    return Read(
        operation=operation,
        key=(_FAMILY, tenant, operation, canonical(request)),
        scopes=read_scopes(tenant, [namespace_tag(request["namespace"])], query),
        server=client.server,
        query=query,
        encode=_encode,
        decode=_decode,
        count=route.records_in,
        share=_shared_codec(operation),
        flight=_flight(client.retries, client.timeout, options) if options else client.flight,
        indexed=route.indexed,
    )


def _request_of(
    names: tuple[str, ...],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """What a model-level read sends: its arguments and the extra body and query it is given."""
    request: dict[str, Any] = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name not in _NOT_SENT and value is not _OMIT:
            request[name] = value
    for option in ("additional_body_parameters", "additional_query_parameters"):
        if options.get(option):
            request[option] = options[option]
    return request


# ``request_options`` entries that decide a call's outcome but not its value.
_OUTCOME_OPTIONS: Final = ("max_retries", "timeout", "timeout_in_seconds")


def _flight(retries: object, timeout: object, options: Mapping[str, Any]) -> Hashable:
    """The client's retries and timeout and the call's own: callers join one fetch only when
    these match (a ``max_retries=0`` caller must not share a ``max_retries=3`` caller's outcome).
    """
    return (
        retries,
        timeout_key(timeout),
        *(timeout_key(options.get(name)) for name in _OUTCOME_OPTIONS),
    )


@contextmanager
def _keeping_response() -> Iterator[None]:
    """Around a fetch: remember on its error the response ``_compat`` needs for its 3.x error.

    ``_compat`` finds that response in a context variable set by an httpx hook. A coalesced or
    async fetch runs in another context, so the caller's variable would be empty.
    """
    try:
        yield
    except Exception as error:
        try:
            from supermemory._compat import _last_response

            response = _last_response.get()
            if response is not None:
                error._wm_response = response  # type: ignore[attr-defined]
        except Exception:
            pass
        raise


@contextmanager
def _restoring_response() -> Iterator[None]:
    """Around a read: put back, in the caller's context, the response its error remembers."""
    try:
        yield
    except Exception as error:
        response = getattr(error, "_wm_response", None)
        if response is not None:
            try:
                from supermemory._compat import _last_response

                _last_response.set(response)
            except Exception:
                pass
        raise


def _read_of_call(
    instance: Any, operation: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Read | None:
    """The step both read wrappers take first: the call's :class:`Read`, or ``None`` to pass it
    through (an outer layer handles it, or it is not one we cache)."""
    if handled_outside():
        return None
    try:
        return _describe_read(instance, operation, args, kwargs)
    except Exception:  # an unforeseen shape: pass it through rather than fail the caller
        return None


# Two short drivers of the same steps: the call awaited or not.
def _read_wrapper(runtime: Callable[[], Runtime], operation: str) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        read = _read_of_call(instance, operation, args, kwargs)
        if read is None:
            return wrapped(*args, **kwargs)

        def fetch() -> Any:
            with _keeping_response():
                return wrapped(*args, **kwargs)

        with _restoring_response():
            return runtime().read(read, fetch)

    return wrapper


def _aread_wrapper(runtime: Callable[[], Runtime], operation: str) -> Callable[..., Any]:
    async def wrapper(
        wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        read = _read_of_call(instance, operation, args, kwargs)
        if read is None:
            return await wrapped(*args, **kwargs)

        async def fetch() -> Any:
            with _keeping_response():
                return await wrapped(*args, **kwargs)

        with _restoring_response():
            return await runtime().aread(read, fetch)

    return wrapper


# -- writes and raw reads at the transport --------------------------------------------------------
def _body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    sent = kwargs.get("json")
    if isinstance(sent, Mapping):
        body.update((k, v) for k, v in sent.items() if v is not _OMIT)
    options = kwargs.get("request_options") or {}
    body.update(options.get("additional_body_parameters") or {})
    return body


def _query(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = dict(kwargs.get("params") or {})
    options = kwargs.get("request_options") or {}
    params.update(options.get("additional_query_parameters") or {})
    return params


def _tenant_at_transport(instance: Any, kwargs: Mapping[str, Any]) -> tuple[Tenant, str]:
    base_url = instance.get_base_url(kwargs.get("base_url"))
    options = kwargs.get("request_options") or {}
    authorization = (
        _header(options.get("additional_headers"), "authorization")
        or _header(kwargs.get("headers"), "authorization")
        or _header(instance.base_headers(), "authorization")
    )
    return tenant_of(base_url, authorization), base_url


def _classify(instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """``None`` (pass through), a :class:`Bypass` (a raw read), or a :class:`Write`."""
    path = args[0] if args else kwargs.get("path")
    method = kwargs.get("method")
    if not isinstance(path, str) or not isinstance(method, str):
        return None
    method = method.upper()
    if method in QUIET_METHODS:
        return None
    found = find(method, path)
    if found is None or found.route.kind == "pass":
        return None
    route: Route = found.route
    tenant, base_url = _tenant_at_transport(instance, kwargs)
    body = _body(kwargs)
    if route.kind == "read":
        if handled_outside():
            return None  # the fetch of a model-level read
        return Bypass(route.operation, server_of(base_url), query_of(found, body))
    scopes = written(found, tenant, body, _query(kwargs))
    if scopes is None:
        return None  # a preview (dry run): it reads, and must neither be cached nor invalidate

    def follow() -> Follow:
        options = kwargs.get("request_options") or {}
        extra = dict(options.get("additional_headers") or {})
        headers = {**instance.base_headers(), **(kwargs.get("headers") or {}), **extra}
        pairs = tuple((str(k), v) for k, v in headers.items() if isinstance(v, str))
        via = _Via(instance, _is_async(instance), _timeout_of(instance, options), base_url, extra)
        return Follow(5, base_url, pairs, via, namespace=found.namespace)

    return write_of(found, scopes, server_of(base_url), body, follow)


def _is_async(http: Any) -> bool:
    from supermemory.core.http_client import AsyncHttpClient

    return isinstance(http, AsyncHttpClient)


def _timeout_of(http: Any, options: Mapping[str, Any]) -> object:
    """A call's timeout as ``HttpClient.request`` picks it: the call's, the client's, httpx's."""
    for found in (options.get("timeout"), options.get("timeout_in_seconds"), http.base_timeout()):
        if found is not None:
            return found
    return http.httpx_client.timeout


class _Via(ClientVia):
    """A status request through the SDK's own ``HttpClient`` (its httpx client, base headers,
    the write's extra headers), with no retry; it answers any status as a response."""

    __slots__ = ("base_url", "headers")

    def __init__(
        self,
        http: Any,
        asynchronous: bool,
        timeout: object,
        base_url: str,
        headers: dict[str, Any],
    ) -> None:
        super().__init__(http, asynchronous, timeout)
        self.base_url = base_url
        self.headers = headers

    def _open(self, client: Any) -> bool:
        return not client.httpx_client.is_closed

    def _options(self, within: float) -> dict[str, Any]:
        return {"timeout": within, "max_retries": 0, "additional_headers": self.headers}

    def _send(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        options = self._options(within)
        return client.request(
            path, method="GET", base_url=self.base_url, params=dict(params), request_options=options
        )

    async def _asend(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        options = self._options(within)
        return await client.request(
            path, method="GET", base_url=self.base_url, params=dict(params), request_options=options
        )


def _transport_wrapper(runtime: Callable[[], Runtime], is_async: bool) -> Callable[..., Any]:
    """The wrapper of ``(Async)HttpClient.request``; async: it returns the awaitable."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if kwargs.get("retries"):
            return wrapped(*args, **kwargs)  # a retry of a call handled further out
        try:
            action = _classify(instance, args, kwargs)
        except Exception:
            action = None
        if action is None:
            return wrapped(*args, **kwargs)
        return run(runtime(), action, lambda: wrapped(*args, **kwargs), is_async)

    return wrapper


# -- entry points ---------------------------------------------------------------------------------
def patches(runtime: Callable[[], Runtime]) -> list[Patch]:
    """The model-level reads and the transport of supermemory 5.x; ``[]`` for any other version."""
    if not _sdk_is_5x():
        return []
    try:
        import supermemory.client
        import supermemory.core.http_client
        import supermemory.core.unchecked_base_model  # noqa: F401  (used on decode)
    except Exception:
        return []
    found: list[Patch] = []
    for cls, make in (("Supermemory", _read_wrapper), ("AsyncSupermemory", _aread_wrapper)):
        for operation in _READS:
            found.append(
                Patch("supermemory.client", f"{cls}.{operation}", make(runtime, operation))
            )
    found.append(
        Patch(
            "supermemory.core.http_client", "HttpClient.request", _transport_wrapper(runtime, False)
        )
    )
    found.append(
        Patch(
            "supermemory.core.http_client",
            "AsyncHttpClient.request",
            _transport_wrapper(runtime, True),
        )
    )
    return found


def wrap(client: Any, runtime: Runtime) -> Any:
    """A cached copy of a 5.x ``Supermemory``/``AsyncSupermemory``; ``None`` for anything else.

    The copy comes from ``client.copy()``: the same options and connection pool, but its own
    generated client and its own ``HttpClient``. Only the copy's instance attributes change:
    ``search``/``profile``/``list`` read through ``runtime``, and its ``HttpClient.request``
    classifies writes and raw reads. ``client`` is neither cached nor modified. A copy made from
    the copy (``with_options``) is a plain, uncached client.
    """
    if not _sdk_is_5x():
        return None
    try:
        from supermemory.client import AsyncSupermemory, Supermemory
    except Exception:
        return None
    if isinstance(client, AsyncSupermemory):
        generated: type[Any] = AsyncSupermemory
        read_wrapper, is_async = _aread_wrapper, True
    elif isinstance(client, Supermemory):
        generated = Supermemory
        read_wrapper, is_async = _read_wrapper, False
    else:
        return None
    make_copy = getattr(client, "copy", None)
    if not callable(make_copy):
        return None  # a bare generated client: no public way to copy it
    cached = make_copy()
    attributes: dict[str, Any] = vars(cached)
    for operation in _READS:
        function = wrapt.FunctionWrapper(
            getattr(generated, operation), read_wrapper(lambda: runtime, operation)
        )
        # Bound now and kept in the instance dict: ``_compat`` then finds a bound method with a
        # ``request_options`` parameter and wraps it like the original (options, error mapping).
        attributes[operation] = function.__get__(cached, type(cached))
    http = cached._client_wrapper.httpx_client
    request = wrapt.FunctionWrapper(
        type(http).request, _transport_wrapper(lambda: runtime, is_async)
    )
    vars(http)["request"] = request.__get__(http, type(http))
    attributes["working_memory"] = runtime.memory
    return cached
