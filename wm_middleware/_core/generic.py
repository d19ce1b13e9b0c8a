"""``WorkingMemory[T]`` at run time, without importing :mod:`typing` (see the package docstring).

Type checkers see :class:`typing.Generic` and a :class:`typing.TypeVar`: ``memory.py`` imports
them when type checking. At run time ``Generic[T]`` is this class, and subscripting a subclass
gives a :class:`types.GenericAlias`, as ``list[int]`` does, so ``WorkingMemory[list[str]]`` is
valid at run time too and ``WorkingMemory[list[str]]()`` makes a memory.
"""

from __future__ import annotations

from types import GenericAlias

__all__ = ["Generic", "T"]

T = "T"
"""What stands for the type variable at run time."""


class Generic:
    """A base whose subclasses can be subscripted, as :class:`typing.Generic`'s can."""

    __slots__ = ()

    def __class_getitem__(cls, item: object) -> GenericAlias:  # a classmethod implicitly
        return GenericAlias(cls, item)
