"""Names a package imports when first asked for, not with the package (see the package docstring),
and values made when first needed.

The start-up rule of the core, also the package's: a module a name needs is imported by the first
``from package import name`` or ``package.name``, through the package's module ``__getattr__``.
A value that costs imports or connections to make can wait for its first use the same way: an
:class:`OnFirstCall` makes it then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from .forks import reset_in_child

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Any, Generic, TypeVar

    T = TypeVar("T")
else:
    from .generic import Generic, T

__all__ = ["OnFirstCall", "lazily"]


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


class OnFirstCall(Generic[T]):
    """``make()``, called at the first call and kept: the same value every call after.

    Made once, also when threads race for it (the second check is under the lock); then a call
    reads one attribute. :meth:`take` forgets it, and the next call makes another.
    """

    __slots__ = ("__weakref__", "_lock", "_made", "_make")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made: T | None = None  # written under the lock, read without it
        self._lock = threading.Lock()
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``forks.py``): a new lock. A thread of the parent making the
        value at the fork never finishes here: the child's first call makes it."""
        self._lock = threading.Lock()

    def __call__(self) -> T:
        made = self._made
        if made is None:
            with self._lock:
                made = self._made
                if made is None:
                    made = self._made = self._make()
        return made

    def take(self) -> T | None:
        """The value made, if any, forgotten here."""
        with self._lock:
            made, self._made = self._made, None
        return made
