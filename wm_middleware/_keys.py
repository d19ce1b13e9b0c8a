"""Cache keys: query normalisation and order-independent freezing of parameters.

A key must be hashable, cheap to build on the hit path, and must never let two requests that could
get different answers share an entry. So:

* the query has its outer whitespace stripped and inner runs folded to one space; case is kept;
* keyword parameters are order-independent (sorted by name), and values are frozen recursively:
  lists and tuples keep their order, dicts and sets do not, and ``True`` is kept apart from ``1``
  (they hash alike in Python but are different JSON).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

__all__ = ["Key", "freeze", "make_key", "normalise_query"]

Key = Hashable

# Tags for frozen containers. Strings (not ``object()`` sentinels) so that keys stay picklable.
_LIST = "\x00list"
_DICT = "\x00dict"
_SET = "\x00set"
_BOOL = "\x00bool"

# Normalised forms of recently seen queries. Agents repeat the same few queries, so this turns the
# split/join of every lookup into one dict probe. Reads and writes of a dict are atomic under the
# GIL; the cache is dropped wholesale when it grows past its bound.
_NORMALISED: dict[str, str] = {}
_NORMALISED_MAX = 4096


def normalise_query(query: object) -> str:
    """Return ``query`` with outer whitespace stripped and inner whitespace runs folded.

    Raises:
        TypeError: ``query`` is not a ``str``.
    """
    if type(query) is str:
        cached = _NORMALISED.get(query)
        if cached is not None:
            return cached
    elif not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    folded = " ".join(query.split())
    # Keep the caller's object when nothing changed: one string in memory, not two.
    normalised = query if folded == query else folded
    if len(_NORMALISED) >= _NORMALISED_MAX:
        _NORMALISED.clear()
    _NORMALISED[query] = normalised
    return normalised


def freeze(value: Any) -> Hashable:
    """Turn a JSON-like value into an equal-if-and-only-if-equivalent hashable form.

    Raises:
        TypeError: the value holds something unhashable that is not a list, tuple, dict or set.
    """
    kind = type(value)
    if kind is str or kind is int or value is None:
        return value  # type: ignore[no-any-return]
    if kind is float:
        # -0.0 == 0.0 already; NaN never equals itself, so a NaN parameter simply never hits.
        return value  # type: ignore[no-any-return]
    if kind is bool:
        return (_BOOL, value)
    if kind is list or kind is tuple:
        for item in value:
            if type(item) is not str:
                break
        else:
            return (_LIST, *value)  # the common case: a list of tags
        return (_LIST, *map(freeze, value))
    if isinstance(value, (list, tuple)):
        return (_LIST, *map(freeze, value))
    if isinstance(value, Mapping):
        return (_DICT, *sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return (_SET, frozenset(map(freeze, value)))
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
    """The key of ``query`` with ``params``: the normalised query alone when there are none."""
    normalised = normalise_query(query)
    if not params:
        return normalised
    return (normalised, tuple(sorted((name, freeze(v)) for name, v in params.items())))
