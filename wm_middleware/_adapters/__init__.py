"""One module per client family, and the table that ``instrument()`` applies and reverses.

An adapter module exposes:

* ``LIBRARY``: the import name of the client library it patches (for logs);
* ``patches(runtime) -> list[Patch]``: wrapt wrappers closing over a
  :class:`~wm_middleware._runtime.Runtime`. It must not raise when the library is missing or of
  an unknown version: it returns only what it recognises;
* ``wrap(client, runtime) -> object | None``: a client-like copy whose reads go through
  ``runtime`` and whose writes invalidate, leaving ``client`` untouched; ``None`` when ``client``
  is not of this family.

Adding a client family is one new module and one line in :data:`ADAPTERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ADAPTERS", "Patch"]

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Patch:
    """Wrap ``module``'s attribute ``name`` (dotted within the module) with ``wrapper``."""

    module: str
    name: str
    wrapper: Wrapper


# Import paths of the adapter modules, in the order they are applied.
ADAPTERS: tuple[str, ...] = (
    "wm_middleware._adapters.sdk3",
    "wm_middleware._adapters.sdk5",
    "wm_middleware._adapters.openai_middleware",
    "wm_middleware._adapters.httpx_transport",
)
