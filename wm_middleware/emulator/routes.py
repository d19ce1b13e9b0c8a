"""Routes declared next to their handlers, and the router that dispatches to them.

Contract: ``@route(METHOD, "/path/{param}")`` marks a handler method (several marks serve one
handler on several routes); :class:`Router` collects the marked methods of handler objects,
in declaration order. A template names one path segment per ``{name}``. :meth:`Router.match`
prefers the route with the fewest parameters, so a literal segment (``/v3/documents/bulk``)
wins over a parameter (``/v3/documents/{id}``) whatever the declaration order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.responses import Response

from .store import MemoryStore
from .wire import JSON, Ctx

__all__ = ["Handler", "Handlers", "Router", "route"]

Handler = Callable[[Ctx], Response | JSON | list[Any]]
F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__emulator_routes__"
_PARAM = re.compile(r"\{(\w+)\}")


def route(method: str, template: str) -> Callable[[F], F]:
    """Declare that the decorated handler serves ``method template``."""

    def mark(handler: F) -> F:
        marks: list[tuple[str, str]] = handler.__dict__.setdefault(_MARK, [])
        marks.append((method, template))
        return handler

    return mark


class Router:
    """The (method, template) routes of some handler objects; see the module docstring."""

    def __init__(self, *handlers: object) -> None:
        self.templates: list[tuple[str, str]] = []
        self._routes: list[tuple[int, str, re.Pattern[str], Handler]] = []
        for owner in handlers:
            for name, attribute in vars(type(owner)).items():
                for method, template in getattr(attribute, _MARK, ()):
                    self._add(method, template, getattr(owner, name))
        self._routes.sort(key=lambda r: r[0])

    def _add(self, method: str, template: str, handler: Handler) -> None:
        pattern = _PARAM.sub(r"(?P<\1>[^/]+)", template)
        weight = len(_PARAM.findall(template))
        self._routes.append((weight, method, re.compile(f"^{pattern}$"), handler))
        self.templates.append((method, template))

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]] | bool | None:
        """Return (handler, params); ``True`` when only the method differs; ``None`` if no path."""
        path_known = False
        for _, m, rx, handler in self._routes:
            found = rx.match(path)
            if found is None:
                continue
            path_known = True
            if m == method:
                return handler, found.groupdict()
        return True if path_known else None


class Handlers:
    """Base of a family of handlers: they read and write one store."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
