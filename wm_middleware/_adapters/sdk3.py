"""supermemory 3.x (Stainless): every call passes ``(Sync|Async)APIClient.request``.

Why ``request`` and nothing above it: resources copy ``client.post``/``get``/... into themselves
when first built, and the raw/streaming wrappers copy bound resource methods, so a patch on
``post`` or on a resource method misses calls made through objects built before the patch.
``request`` is looked up on the class at call time by every one of them, and it holds the SDK's
retry loop, so one wrapper call is one logical request (retries included).

Each call is classified by (HTTP method, path) before the wrapped function runs (it pops headers):

* cacheable reads (``search.memories``, ``search.execute``, ``search.documents``, ``profile``,
  ``documents.list``) go through ``Runtime.read``; the cached value is the
  SDK's own response model, pickled, and unpickled into a fresh object per caller. Other
  processes (the shared tier) get the API's JSON body instead, never the pickle, and rebuild the
  model with the SDK's own ``construct_type``, as the SDK does from the wire;
* raw and streaming responses of those reads (``X-Stainless-Raw-Response``) are observed but
  never cached;
* writes invalidate the container tags they name (``batch_add``: every item's too), or the whole
  tenant when they name none or could move a document between tags;
* everything else (status polls, POST reads of connections) passes through untouched.

A call that cannot be classified passes through: the wrapper never raises for its own reasons.
"""

from __future__ import annotations

import logging
import pickle
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Final

from .._api.routes import (
    QUIET_METHODS,
    RESPONSE_OPERATIONS,
    Match,
    find,
    query_of,
    read_tags,
    written,
)
from .._api.tenancy import Tenant, canonical, fingerprint, read_scopes, server_of, tenant_of
from .._calls import Follow, Read, Write
from .._core import SharedCodec
from .._runtime import Runtime, handled_outside
from . import Patch
from .calls import Bypass, ClientVia, memo_key_of, remember, run, timeout_key, write_of

if TYPE_CHECKING:
    from . import Wrapper

__all__ = ["patches", "wrap"]


logger = logging.getLogger(__name__)

_FAMILY: Final = "sm3"
_MODULE: Final = "supermemory._base_client"
_RAW_HEADER: Final = "x-stainless-raw-response"  # _constants.RAW_RESPONSE_HEADER, lowercased
# Header values that are credentials: fingerprinted before they enter a key.
_SECRET_HINTS: Final = ("auth", "key", "token", "secret", "cookie")


def _path_of(url: str) -> str:
    if "://" in url:
        import httpx

        return httpx.URL(url).path
    return url if url.startswith("/") else "/" + url


# -- what a call is --------------------------------------------------------------------------
Action = Read | Write | Bypass | None
"""What a request is to the runtime; ``None`` passes it through untouched."""


def _body_of(options: Any) -> dict[str, Any]:
    """The JSON body as it goes on the wire (``extra_body`` merged over the method's body)."""
    body: dict[str, Any] = {}
    json_data = options.json_data
    if isinstance(json_data, Mapping):
        body.update(json_data)
    extra = options.extra_json
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def _safe_headers(headers: object) -> dict[str, str] | None:
    """Headers as key material: lowercased names, credentials fingerprinted."""
    if not isinstance(headers, Mapping) or not headers:
        return None
    safe: dict[str, str] = {}
    for name, value in headers.items():
        lowered = str(name).lower()
        text = str(value)
        if any(hint in lowered for hint in _SECRET_HINTS):
            text = fingerprint(text)
        safe[lowered] = text
    return safe


def _encode(value: Any) -> bytes:
    """An immutable snapshot of the parsed response: the SDK's own model, pickled.

    Unpickling rebuilds the identical object (same class, fields, extras and alias quirks) with
    fresh lists and dicts, ~14x faster than re-parsing JSON with ``construct_type``. The bytes
    never leave this process and are only ever made from objects the SDK itself built.
    """
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


@lru_cache(maxsize=256)
def _shared_codec(cast_to: type) -> SharedCodec:
    """How a ``cast_to`` response crosses the shared tier: its API body, as JSON data.

    The pickle stays in this process (only ever made here, from objects the SDK built). Readers
    rebuild ``cast_to`` from the body with the SDK's ``construct_type``, as the client does from
    the wire, then keep it pickled in their L1 like any other entry.
    """
    from supermemory._models import construct_type

    def dump(snapshot: bytes) -> Any:
        return pickle.loads(snapshot).to_dict(mode="json")

    def load(body: Any) -> bytes:
        if not isinstance(body, dict):
            raise TypeError(f"a {cast_to.__name__} body is a JSON object")
        return _encode(construct_type(type_=cast_to, value=body))

    return SharedCodec(dump, load)


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: a memo key part
class _Client:
    """What a client contributes to every read of it, computed once per client state.

    A client's base URL, key, default headers and query, retries, timeout and strictness may
    change (they are plain attributes, ``base_url`` has a setter); the entry is reused only while
    all of them are what they were when it was made.
    """

    base_url: object  # the client's URL object itself: a new URL is a new state
    api_key: str | None
    headers: dict[str, Any]  # copies, compared by value
    query: dict[str, Any]
    max_retries: int
    timeout: object
    strict: bool
    tenant: Tenant
    server: tuple[str, int | None]
    defaults: str  # the default headers (credentials fingerprinted) and query, canonical
    # The Read of each plain request seen (no per-call options, files or stream), by an exact
    # key of its small flat body: a repeat skips key building. It lives and dies with this
    # entry, so with the client; bounded in count and in the text it holds.
    reads: dict[Hashable, Read] = field(default_factory=dict)

    def matches(self, instance: Any) -> bool:
        """True while ``instance`` is in the state this entry was made from."""
        return (
            self.base_url is not None
            and self.base_url is getattr(instance, "_base_url", None)
            and self.api_key == instance.api_key
            and self.headers == instance._custom_headers
            and self.query == instance._custom_query
            and self.max_retries == instance.max_retries
            and self.timeout is instance.timeout
            and self.strict == instance._strict_response_validation
        )


_CLIENTS: weakref.WeakKeyDictionary[Any, _Client] = weakref.WeakKeyDictionary()


def _client(instance: Any) -> _Client:
    found = _CLIENTS.get(instance)
    if found is not None and found.matches(instance):
        return found
    url = str(instance.base_url)
    made = _Client(
        getattr(instance, "_base_url", None),
        instance.api_key,
        dict(instance._custom_headers),
        dict(instance._custom_query),
        instance.max_retries,
        instance.timeout,
        bool(instance._strict_response_validation),
        tenant_of(url, instance.api_key),
        server_of(url),
        canonical([_safe_headers(instance._custom_headers), instance._custom_query or None]),
    )
    _CLIENTS[instance] = made
    return made


def _flight(client: _Client, options: Any) -> Hashable:
    """What decides this call's outcome but not its value: its retries, timeout and redirects.

    Callers join one fetch only when these match (see ``Read.flight``): a ``max_retries=0`` caller
    must not get the error a ``max_retries=3`` caller would have retried past, nor a ``timeout=5``
    caller the timeout of a ``timeout=0.1`` one.
    """
    retries = options.max_retries if _given(options.max_retries) else client.max_retries
    timeout = options.timeout if _given_timeout(options.timeout) else client.timeout
    return (retries, timeout_key(timeout), options.follow_redirects)


def _is_plain(options: Any, kwargs: Mapping[str, Any]) -> bool:
    """No per-call headers, query, extra body, options, files, stream or post-parser."""
    return (
        not options.headers
        and not options.extra_json
        and not options.params
        and options.files is None
        and options.content is None
        and not kwargs.get("stream")
        and not _given(options.post_parser)
        and not _given(options.max_retries)
        and not _given_timeout(options.timeout)
        and options.follow_redirects is None
    )


def _describe(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Action:
    """What ``instance.request(*args, **kwargs)`` is; ``None`` passes it through untouched.

    A plain request (see :func:`_is_plain`) whose small flat body was seen before is looked up
    first, by its exact method, URL and body: a repeated read skips route matching and key
    building alike.
    """
    cast_to = args[0] if args else kwargs.get("cast_to")
    options = args[1] if len(args) > 1 else kwargs.get("options")
    if options is None:
        return None
    client = _client(instance)
    plain = _is_plain(options, kwargs)
    memo_key = (
        memo_key_of((cast_to, options.method, options.url), options.json_data) if plain else None
    )
    if memo_key is not None:
        read = client.reads.get(memo_key)
        if read is not None:
            return read
    method = str(options.method).upper()
    if method in QUIET_METHODS:
        return None  # status polls and GET reads: never cached, nothing to invalidate
    found = find(method, _path_of(str(options.url)))
    if found is None or found.route.kind == "pass":
        return None
    operation = RESPONSE_OPERATIONS.get(
        (found.route.operation, getattr(cast_to, "__name__", "")), found.route.operation
    )
    body = _body_of(options)
    if found.route.kind == "write":
        return _write(found, operation, client, body, instance, options)  # a raw one too
    if not _cacheable(cast_to, options, kwargs):
        return Bypass(operation, client.server, query_of(found, body))
    read = _read(found, operation, client, cast_to, options, body)
    if memo_key is not None:
        remember(client.reads, memo_key, read)
    return read


def _write(
    found: Match,
    operation: str,
    client: _Client,
    body: dict[str, Any],
    instance: Any,
    options: Any,
) -> Write | None:
    scopes = written(found, client.tenant, body)
    if scopes is None:
        return None
    follow = partial(_follow, instance, options)
    return write_of(found, scopes, client.server, body, follow, operation)


def _cacheable(cast_to: Any, options: Any, kwargs: Mapping[str, Any]) -> bool:
    """A read answered with a model the SDK builds from JSON, with nothing streamed or raw."""
    headers = options.headers
    raw = isinstance(headers, Mapping) and any(str(name).lower() == _RAW_HEADER for name in headers)
    return not (
        raw
        or kwargs.get("stream")
        or not _is_model(cast_to)
        or options.files is not None
        or options.content is not None
        or _given(options.post_parser)
    )


def _read(
    found: Match,
    operation: str,
    client: _Client,
    cast_to: Any,
    options: Any,
    body: dict[str, Any],
) -> Read:
    extra, params, safe_headers = options.extra_json, options.params, _safe_headers(options.headers)
    if not extra and not params and safe_headers is None:
        sent = canonical(options.json_data)  # the common case: the method's own body only
    else:
        sent = canonical([options.json_data, extra, params or None, safe_headers])
    # ``_is_model`` checked: a model class. Its qualname separates same-body reads of two types.
    # Strictness is part of the entry: a strict client is never served what a loose one accepted.
    qualname = getattr(cast_to, "__qualname__", "")
    key: Hashable = (
        _FAMILY,
        client.tenant,
        operation,
        qualname,
        client.strict,
        client.defaults,
        sent,
    )
    query = query_of(found, body)
    return Read(
        operation,
        key,
        read_scopes(client.tenant, read_tags(found, body), query),
        client.server,
        query,
        encode=_encode,
        decode=pickle.loads,  # a fresh object per caller: no mutation reaches the next one
        count=found.route.records_in,
        share=_shared_codec(cast_to),
        flight=_flight(client, options),
        indexed=found.route.indexed,
    )


def _follow(instance: Any, options: Any) -> Follow:
    """How the freshness runtime asks about this client's documents: through the client, within
    the write's timeout; the client's URL and headers name the tenant."""
    headers = tuple((k, v) for k, v in instance.default_headers.items() if isinstance(v, str))
    timeout = options.timeout if _given_timeout(options.timeout) else instance.timeout
    from supermemory._base_client import AsyncAPIClient

    via = _Via(instance, isinstance(instance, AsyncAPIClient), timeout)
    return Follow(3, str(instance.base_url), headers, via)


class _Via(ClientVia):
    """A status request as a request of the client's own (``client.get``, the SDK's documented
    way to call an endpoint it has no method for): its ``http_client``, auth and default
    headers, no retry. An error status is answered as the response it carries."""

    __slots__ = ()

    def _open(self, client: Any) -> bool:
        return not client.is_closed()

    def _send(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        import httpx
        from supermemory import APIStatusError

        options = {"params": dict(params), "timeout": within, "max_retries": 0}
        try:
            return client.get(path, cast_to=httpx.Response, options=options)
        except APIStatusError as error:
            return error.response

    async def _asend(self, client: Any, path: str, params: Mapping[str, str], within: float) -> Any:
        import httpx
        from supermemory import APIStatusError

        options = {"params": dict(params), "timeout": within, "max_retries": 0}
        try:
            return await client.get(path, cast_to=httpx.Response, options=options)
        except APIStatusError as error:
            return error.response


_NOT_GIVEN_TYPES: tuple[type, ...] | None = None


def _given_timeout(value: object) -> bool:
    """A per-call timeout was given (``None`` is one: no timeout at all)."""
    return value is None or _given(value)


def _given(value: object) -> bool:
    global _NOT_GIVEN_TYPES
    if value is None:
        return False
    if _NOT_GIVEN_TYPES is None:
        from supermemory._types import NotGiven, Omit

        _NOT_GIVEN_TYPES = (NotGiven, Omit)
    return not isinstance(value, _NOT_GIVEN_TYPES)


@lru_cache(maxsize=256)
def _is_model(cast_to: object) -> bool:
    """True for the SDK's response models, which it parses with ``construct_type``."""
    from supermemory._models import BaseModel

    return (
        isinstance(cast_to, type)
        and issubclass(cast_to, BaseModel)
        and not callable(getattr(cast_to, "build", None))  # ModelBuilderProtocol
    )


def _classify(
    instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], is_async: bool
) -> Action:
    try:
        return _describe(instance, args, kwargs)
    except Exception:  # an unforeseen shape: pass it through rather than fail the caller
        logger.debug("wm_middleware: could not classify a supermemory request", exc_info=True)
        return None


# -- wrappers (small factories closing over the runtime) ----------------------------------------
def _wrapper(runtime: Callable[[], Runtime], is_async: bool) -> Wrapper:
    """The wrapper of ``request``; async: it returns the awaitable the caller awaits.

    ``runtime()`` gives the runtime a call runs on (made at the first call, see ``patches``).
    """

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if handled_outside():
            return wrapped(*args, **kwargs)
        action = _classify(instance, args, kwargs, is_async)
        if action is None:
            return wrapped(*args, **kwargs)
        return run(runtime(), action, lambda: wrapped(*args, **kwargs), is_async)

    return wrapper


# -- adapter contract ---------------------------------------------------------------------------
def _supported() -> bool:
    """True when ``supermemory`` is importable and is the Stainless 3.x SDK."""
    try:
        import supermemory
        from supermemory import _base_client
    except Exception:
        return False
    version = str(getattr(supermemory, "__version__", ""))
    return version.startswith("3.") and all(
        callable(getattr(getattr(_base_client, owner, None), "request", None))
        for owner in ("SyncAPIClient", "AsyncAPIClient")
    )


def patches(runtime: Callable[[], Runtime]) -> list[Patch]:
    """The two ``request`` methods, or nothing when supermemory 3.x is not installed."""
    if not _supported():
        return []
    return [
        Patch(_MODULE, "SyncAPIClient.request", _wrapper(runtime, False)),
        Patch(_MODULE, "AsyncAPIClient.request", _wrapper(runtime, True)),
    ]


def wrap(client: object, runtime: Runtime) -> object | None:
    """A copy of a 3.x ``Supermemory`` / ``AsyncSupermemory`` whose calls go through ``runtime``.

    The copy shares ``client``'s connection pool; ``client`` is left as it was. ``copy()`` and
    ``with_options()`` of the copy return cached copies too. ``None`` for any other object.
    """
    if not _supported():
        return None
    from supermemory import AsyncSupermemory, Supermemory

    if isinstance(client, Supermemory):
        copy: object = _install(_copy_of(client, {}), runtime, _wrapper(lambda: runtime, False))
        return copy
    if isinstance(client, AsyncSupermemory):
        copy = _install(_copy_of(client, {}), runtime, _wrapper(lambda: runtime, True))
        return copy
    return None


def _copy_of(client: Any, options: dict[str, Any]) -> Any:
    """``type(client).copy`` (never an instance override), keeping strict validation."""
    if client._strict_response_validation:
        extra = {"_strict_response_validation": True, **options.get("_extra_kwargs", {})}
        options = {**options, "_extra_kwargs": extra}
    return type(client).copy(client, **options)


def _install(client: Any, runtime: Runtime, wrapper: Wrapper) -> Any:
    """Route ``client``'s own calls through ``wrapper`` with instance attributes.

    ``post``/``get``/``patch``/``delete`` call ``self.request``; an instance attribute shadows
    the class's plain function. The class's ``request`` is looked up at each call, so an
    ``instrument()`` applied or removed later is seen (and skipped as nested: this layer runs
    first and marks the call as handled).
    """
    cls = type(client)

    def request(*args: Any, **kwargs: Any) -> Any:
        return wrapper(_class_request(cls).__get__(client, cls), client, args, kwargs)

    def derive(**options: Any) -> Any:
        return _install(_copy_of(client, options), runtime, wrapper)

    client.request = request
    client.copy = derive
    client.with_options = derive
    client.working_memory = runtime.memory
    return client


def _class_request(cls: type) -> Any:
    for klass in cls.__mro__:
        found = vars(klass).get("request")
        if found is not None:
            return found
    raise AttributeError("request")  # pragma: no cover - every Stainless client has one
