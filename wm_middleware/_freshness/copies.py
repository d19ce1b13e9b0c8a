"""The copies a read of a settling scope may be answered from, and when each was fetched.

Two kinds, one per key:

* a copy fetched while the key's scopes settle (:meth:`Copies.keep`): what the API answered
  then, true as long as every write covering it is still pending (a status check says so);
* a copy from before a write that only adds documents (:meth:`Copies.standing`, then
  :meth:`Copies.stand`): the entry the memory held, true for reads of indexed documents while
  the new documents are pending (they are in no search or profile answer yet).

A plain structure with no lock: :class:`~.pending.Freshness` holds its own around every call.
Whatever the memory drops is forgotten here too (:meth:`Copies.forget`), and each drop is
counted, so that copies taken before a write are kept past the write's own invalidation only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Copies", "Copy", "Standing"]


@dataclass(slots=True, eq=False)
class Copy:
    """A key's copy, the scopes it goes with, and when it was fetched (monotonic)."""

    value: Any
    scopes: frozenset[Hashable]
    fetched: float
    before: bool = False  # from before a write: answers only reads of indexed documents


@dataclass(slots=True, eq=False)
class Standing:
    """The copies a write that only adds documents left true, taken before its invalidation."""

    copies: dict[Hashable, Copy]
    drops: int  # the drops counted when they were taken, the write's own forgetting included


class Copies:
    """The copies by key (see the module docstring)."""

    __slots__ = ("_by_key", "drops")

    def __init__(self) -> None:
        self._by_key: dict[Hashable, Copy] = {}
        self.drops = 0  # every forget() so far

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._by_key

    def get(self, key: Hashable) -> Copy | None:
        return self._by_key.get(key)

    def keep(self, key: Hashable, scopes: Iterable[Hashable], value: Any, fetched: float) -> None:
        """The copy of ``key`` fetched at ``fetched`` while its scopes settle."""
        self._by_key[key] = Copy(value, frozenset((*scopes, key)), fetched)

    def forget(self, keys: Iterable[Hashable], scopes: Iterable[Hashable], whole: bool) -> None:
        """Forget the copies of ``keys`` and of ``scopes`` (``whole``: every copy): dropped from
        the memory, they may no longer be what the API says."""
        self.drops += 1
        if whole:
            self._by_key.clear()
            return
        gone, covered = set(keys), set(scopes)
        for key in [k for k, c in self._by_key.items() if k in gone or c.scopes & covered]:
            del self._by_key[key]

    def clear(self) -> None:
        """Forget every copy: nothing settles any more (not a drop: nothing changed)."""
        self._by_key.clear()

    def standing(
        self, entries: Iterable[tuple[Hashable, Any, float, tuple[Hashable, ...]]], now: float
    ) -> Standing:
        """The memory's ``entries`` (``(key, value, age, scopes)``) before a write drops them,
        as copies; a copy kept for a key answers for the entry made from it, with the time of
        its own fetch. Counted as if the write's own forgetting had happened already."""
        copies = {}
        for key, value, age, scopes in entries:
            kept = self._by_key.get(key)
            if kept is not None and kept.value is value:
                copies[key] = kept
            else:
                copies[key] = Copy(value, frozenset((*scopes, key)), now - age, before=True)
        return Standing(copies, self.drops + 1)

    def stand(self, standing: Standing) -> None:
        """After the write's invalidation: keep its standing copies, unless anything else was
        dropped meanwhile (then they may no longer be what the API says)."""
        if self.drops == standing.drops + 1:  # the write's own invalidation, and nothing else
            for key, copy in standing.copies.items():
                self._by_key.setdefault(key, copy)
