"""Names a package imports when first asked for, not with the package (see the package docstring).

The start-up rule of the core, also the package's: a module a name needs is imported by the first
``from package import name`` or ``package.name``, through the package's module ``__getattr__``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Any

__all__ = ["lazily"]


def lazily(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``names[name]`` (a module, relative
    to ``package``) when ``name`` is first asked for, and keeps the value in the package."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import sys
        from importlib import import_module

        value = getattr(import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # found directly from now on
        return value

    return __getattr__
