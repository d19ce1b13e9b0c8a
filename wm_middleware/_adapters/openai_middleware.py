"""supermemory-openai-sdk: the profile search of ``with_supermemory(...)``.

``supermemory_openai.middleware.supermemory_profile_search(container_tag, query_text, api_key,
base_url)`` reads ``POST {base_url}/v4/profile`` with aiohttp (or ``requests`` in a thread when
aiohttp is missing), not through the SDK or httpx, so no other adapter sees it.
``add_system_prompt`` looks the function up as a module global on every call: patching that
module attribute catches every chat completion, sync (``asyncio.run`` per call) or async.

Cached: the returned ``SupermemoryProfileSearch``, stored as a JSON snapshot of its plain dicts and
rebuilt fresh for every caller; other processes (the shared tier) get those dicts as JSON data.
Keyed by tenant (base URL, fingerprint of the key), container tag and query text. Never cached:
``SupermemoryAPIError`` and network errors, which reach the caller unchanged. The middleware's
write (``add_memory_tool`` -> ``supermemory.Supermemory.add``) goes through the SDK, whose adapter
invalidates the container tag.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from .._api.routes import route_named
from .._api.tenancy import canonical, read_scopes, server_of, tenant_of
from .._calls import Read
from .._core import SharedCodec
from .._runtime import Runtime
from . import Patch

__all__ = ["patches", "wrap"]

_MODULE: Final = "supermemory_openai.middleware"
_FUNCTION: Final = "supermemory_profile_search"
_PARAMETERS: Final = ("container_tag", "query_text", "api_key", "base_url")
_ROUTE: Final = route_named(3, "profile")  # what it reads: POST {base_url}/v4/profile


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """The four arguments, if the call has exactly those and all are strings."""
    if len(args) > len(_PARAMETERS) or set(kwargs) - set(_PARAMETERS[len(args) :]):
        return None
    values = [*args, *(kwargs.get(name) for name in _PARAMETERS[len(args) :])]
    if not all(isinstance(value, str) for value in values):
        return None
    tag, query, api_key, base_url = values
    return tag, query, api_key, base_url


def _encode(result: Any) -> tuple[type[Any], str]:
    # ``SupermemoryProfileSearch(data)`` keeps ``data["profile"]`` and ``data["searchResults"]``.
    snapshot = {"profile": result.profile, "searchResults": result.search_results}
    return type(result), json.dumps(snapshot)


def _decode(stored: tuple[type[Any], str]) -> Any:
    kind, snapshot = stored
    return kind(json.loads(snapshot))


def _shared_codec(kind: type[Any]) -> SharedCodec:
    """The snapshot's dicts as JSON data; ``kind`` (the function's result type) rebuilt."""

    def dump(stored: tuple[type[Any], str]) -> Any:
        return json.loads(stored[1]) if stored[0] is kind else None

    def load(data: Any) -> tuple[type[Any], str]:
        if not isinstance(data, dict) or set(data) - {"profile", "searchResults"}:
            raise ValueError("a shared profile search is {'profile': ..., 'searchResults': ...}")
        return kind, json.dumps(data)

    return SharedCodec(dump, load)


def _profile_search(runtime: Callable[[], Runtime], share: SharedCodec | None) -> Any:
    def wrapper(
        wrapped: Callable[..., Awaitable[Any]],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Awaitable[Any]:
        try:
            arguments = _arguments(args, kwargs)
            if arguments is None:
                return wrapped(*args, **kwargs)
            tag, query, api_key, base_url = arguments
            tenant = tenant_of(base_url, api_key)
            read = Read(
                "profile",
                (
                    "openai-mw",
                    tenant,
                    "profile",
                    canonical({"container_tag": tag, "query_text": query}),
                ),
                read_scopes(tenant, [tag], query),
                server_of(base_url),
                query or None,
                encode=_encode,
                decode=_decode,
                count=_ROUTE.records_in,
                share=share,
                indexed=_ROUTE.indexed,
            )
        except Exception:  # never fail a call for our own reasons
            return wrapped(*args, **kwargs)
        return runtime().aread(read, lambda: wrapped(*args, **kwargs))

    return wrapper


def patches(runtime: Callable[[], Runtime]) -> list[Patch]:
    """The profile search of the middleware, if supermemory-openai-sdk is installed."""
    try:
        module = importlib.import_module(_MODULE)
    except Exception:
        return []
    if not callable(getattr(module, _FUNCTION, None)):
        return []
    kind = getattr(module, "SupermemoryProfileSearch", None)
    share = _shared_codec(kind) if isinstance(kind, type) else None
    return [Patch(_MODULE, _FUNCTION, _profile_search(runtime, share))]


def wrap(client: object, runtime: Runtime) -> object | None:
    """``None``: the middleware is reached through ``instrument()`` only.

    Its reads go through a module function, not a client object; ``SupermemoryTools`` and the
    middleware's write use the SDK and are covered by ``wrap`` of the SDK client.
    """
    return None
