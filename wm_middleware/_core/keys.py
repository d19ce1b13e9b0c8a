"""Cache keys: query normalisation, order-independent freezing of parameters, and their memo.

A key must be hashable, cheap to build on the hit path, and must never let two requests that could
get different answers share an entry. So:

* the query has its outer whitespace stripped and inner runs folded to one space; case is kept;
* keyword parameters are order-independent (a frozenset of pairs), and values are frozen
  recursively: lists and tuples keep their order, dicts and sets do not, and ``True`` is kept
  apart from ``1`` (they hash alike in Python but are different JSON).

:class:`KeyMemo` memoises both steps for one cache. It belongs to that cache, so the query text it
holds lives no longer than the cache (and is dropped by its ``clear``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

TYPE_CHECKING = False  # typing is not imported at start-up: see the package docstring
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["MAX_DEPTH", "UNSET", "Key", "KeyMemo", "freeze", "make_key", "normalise_query"]

Key = Hashable

# Tags for frozen containers. Strings (not ``object()`` sentinels) so that keys stay picklable.
_LIST = "\x00list"
_DICT = "\x00dict"
_SET = "\x00set"
_BOOL = "\x00bool"


class _Unset:
    """The default of a parameter ``search`` names: not given, so no part of the key."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()

MAX_DEPTH: Final = 32
"""How deeply parameter values may nest; deeper (or self-referential) values are refused."""

# Queries longer than this are normalised on every call instead of memoised: the split/join then
# costs little next to the request, and the memo's memory stays small whatever callers send.
_MEMO_MAX_CHARS: Final = 1024
_MEMO_MAX_TAGS: Final = 32  # and tag lists longer than this (or than that many characters)


def normalise_query(query: object) -> str:
    """Return ``query`` with outer whitespace stripped and inner whitespace runs folded.

    Raises:
        TypeError: ``query`` is not a ``str``.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    folded = " ".join(query.split())
    # Keep the caller's object when nothing changed: one string in memory, not two.
    return query if folded == query else folded


def freeze(value: Any, _depth: int = 0) -> Hashable:
    """Turn a JSON-like value into an equal-if-and-only-if-equivalent hashable form.

    Raises:
        TypeError: the value holds something unhashable that is not a list, tuple, dict or set.
        ValueError: the value nests deeper than :data:`MAX_DEPTH` (or contains itself).
    """
    kind = type(value)
    if kind is str or kind is int or kind is float or value is None:
        # -0.0 == 0.0 already; NaN never equals itself, so a NaN parameter simply never hits.
        return value  # type: ignore[no-any-return]
    if kind is bool:
        return (_BOOL, value)
    if _depth >= MAX_DEPTH:
        raise ValueError(
            f"cache key parameters nest deeper than {MAX_DEPTH} levels (or contain themselves)"
        )
    depth = _depth + 1
    if kind is list or kind is tuple:
        for item in value:
            if type(item) is not str:
                break
        else:
            return (_LIST, *value)  # the common case: a list of tags
        return (_LIST, *(freeze(item, depth) for item in value))
    if isinstance(value, (list, tuple)):
        return (_LIST, *(freeze(item, depth) for item in value))
    if isinstance(value, Mapping):
        return (_DICT, *sorted((str(k), freeze(v, depth)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return (_SET, frozenset(freeze(item, depth) for item in value))
    if isinstance(value, float) and math.isnan(value):
        return value
    try:
        hash(value)
    except TypeError:
        raise TypeError(
            f"cache key parameters must be JSON-like or hashable, got {type(value).__name__}"
        ) from None
    return (kind.__qualname__, value)


def make_key(query: object, params: Mapping[str, Any]) -> Key:
    """The key of ``query`` with ``params``: the normalised query alone when there are none.

    With parameters it is one frozenset: the ``(name, frozen value)`` pairs plus ``(0, query)``
    (a parameter's name is always a str, so the query's pair is never a parameter's). A frozenset
    is order-independent by construction and keeps its hash once computed, so probing a table
    with a key object already built hashes nothing again, however many parameters it holds.
    """
    normalised = normalise_query(query)
    if not params:
        return normalised
    return frozenset([(0, normalised), *[(name, freeze(v)) for name, v in params.items()]])


class KeyMemo:
    """Memoised :func:`normalise_query` and :func:`make_key` for one cache.

    Agents repeat the same few queries, so the split/join and the freezing of every lookup become
    one dict probe. Bounded by ``size`` entries per table, dropped wholesale past it; a lookup whose
    query (or query and text parameters) runs over 1,024 characters is not memoised. Reads and
    writes of a dict are atomic under the GIL, so no lock is needed.
    """

    __slots__ = ("_named", "_params", "_queries", "_size")

    def __init__(self, size: int) -> None:
        self._size = size
        self._queries: dict[str, str] = {}  # query as given -> normalised
        self._params: dict[tuple[Any, ...], Key] = {}  # key()'s stand-ins -> keys
        self._named: dict[tuple[Any, ...], Key] = {}  # search_key()'s stand-ins -> keys

    def __len__(self) -> int:
        """Keys memoised now, in every table."""
        return len(self._queries) + len(self._params) + len(self._named)

    def query(self, query: object) -> str:
        """:func:`normalise_query`, memoised."""
        if type(query) is not str:
            return normalise_query(query)
        normalised = self._queries.get(query)
        if normalised is not None:
            return normalised
        normalised = normalise_query(query)
        if len(query) <= _MEMO_MAX_CHARS:
            if len(self._queries) >= self._size:
                self._queries.clear()
            self._queries[query] = normalised
        return normalised

    def key(self, query: object, params: Mapping[str, Any]) -> Key:
        """:func:`make_key`, memoised when every parameter is a str, int, float or list of str.

        The memo is probed with a cheap stand-in for ``(query, params)``: the query, then each
        ``(name, value)`` pair in call order, a list or tuple of str standing as a tagged tuple
        of its items. Stand-ins are equal exactly when the frozen keys are (``True`` is no int
        here: ``type(value) is int``), and the same call spelled in another order is another
        slot holding the same key.
        """
        if not params:
            return self.query(query)
        if type(query) is not str or len(query) > _MEMO_MAX_CHARS:
            return make_key(query, params)
        probe: list[Any] = [query]
        text = len(query)
        for item in params.items():
            value = item[1]
            kind = type(value)
            if kind is str:
                probe.append(item)
                text += len(value)
            elif kind is int or kind is float:
                probe.append(item)
            elif kind is list or kind is tuple:
                for tag in value:
                    if type(tag) is not str:
                        return make_key(query, params)
                    text += len(tag)
                probe.append((item[0], _LIST, *value))
            else:
                return make_key(query, params)
        if text > _MEMO_MAX_CHARS:
            return make_key(query, params)  # a stand-in this large is not worth keeping
        stand_in = tuple(probe)
        key = self._params.get(stand_in)
        if key is None:
            key = make_key(self.query(query), params)
            if len(self._params) >= self._size:
                self._params.clear()
            self._params[stand_in] = key
        return key

    def search_key(
        self, query: object, container_tags: Any, limit: Any, params: dict[str, Any]
    ) -> Key:
        """:func:`make_key` of a search: ``params`` plus the two parameters ``search`` names.

        ``container_tags`` and ``limit`` are :data:`UNSET` when not given. ``params`` holds the
        other parameters (the named ones are added to it when there are some: the key then goes
        through :meth:`key`). With none, the key is memoised in a slot of its own, the stand-in
        ``(query, limit, tuple(container_tags))`` (``(query, limit)`` without tags), probed
        first. Only an int limit (a bool is no int here) and a short list or tuple of str as
        tags are memoised, and the probe is tried only with an int limit or none, so a probe
        finds a slot exactly when the keys are equal (a tag equal to a str is that str in JSON
        too).
        """
        if params:
            if container_tags is not UNSET:
                params["container_tags"] = container_tags
            if limit is not UNSET:
                params["limit"] = limit
            return self.key(query, params)
        if container_tags is UNSET and limit is UNSET:
            return self.query(query)
        # The slot to probe: only with an int limit (or none) and a list or tuple of tags (or none).
        stand_in: tuple[Any, ...] | None = None
        if type(limit) is int or limit is UNSET:  # the common int limit first
            kind = type(container_tags)
            if kind is list or kind is tuple:
                stand_in = (query, limit, tuple(container_tags))
            elif container_tags is UNSET:
                stand_in = (query, limit)
        if stand_in is not None:
            try:
                key = self._named.get(stand_in)
            except TypeError:  # an unhashable query or tag: make_key refuses it clearly
                stand_in = key = None
            if key is not None:
                return key
        named: dict[str, Any] = {}
        if container_tags is not UNSET:
            named["container_tags"] = container_tags
        if limit is not UNSET:
            named["limit"] = limit
        key = make_key(self.query(query), named)  # refuses what cannot be a key
        if stand_in is not None and _memoisable(query, container_tags):
            if len(self._named) >= self._size:
                self._named.clear()
            self._named[stand_in] = key
        return key

    def scopes(self, query: object, key: Key) -> tuple[Hashable, ...]:
        """The scopes an entry of ``query`` stored under ``key`` carries.

        A query's plain entry is keyed by the query; its parameter variants carry it as a scope,
        so that invalidating the query finds them all.
        """
        return () if type(key) is str else (self.query(query),)

    def clear(self) -> None:
        """Forget every memoised query."""
        self._queries.clear()
        self._params.clear()
        self._named.clear()


def _memoisable(query: object, container_tags: Any) -> bool:
    """True when a :meth:`KeyMemo.search_key` slot for these arguments is worth keeping."""
    if type(query) is not str or len(query) > _MEMO_MAX_CHARS:
        return False
    return container_tags is UNSET or (
        len(container_tags) <= _MEMO_MAX_TAGS
        and all(type(tag) is str for tag in container_tags)
        and sum(map(len, container_tags)) <= _MEMO_MAX_CHARS
    )
