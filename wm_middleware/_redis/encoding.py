"""How keys and values are written to Redis: the same bytes in every process, and no pickle.

A key's canonical text is JSON of its parts (tuples as lists, frozensets sorted), so it is
equal across processes and interpreter runs (``hash()`` is salted per process), and it decodes
back to an equal key, which is how an invalidation message names what other processes drop.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Hashable
from typing import Any

__all__ = ["canonical_key", "digest", "dump", "json_encode", "key_from_canonical"]


def _encode_part(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        return {"float": repr(value)}
    if isinstance(value, tuple):  # a NamedTuple (the adapters' scopes) spells as its tuple
        return [_encode_part(item) for item in value]
    if kind is frozenset:
        items = sorted(dump(_encode_part(item)) for item in value)
        return {"set": items}
    raise TypeError(f"a shared key holds only tuple/str/int/float/bool/None, not {kind.__name__}")


def _decode_part(value: Any) -> Any:
    if type(value) is list:
        return tuple(_decode_part(item) for item in value)
    if type(value) is dict:
        if "set" in value:
            return frozenset(_decode_part(json.loads(item)) for item in value["set"])
        return float(value["float"])
    return value


def dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def canonical_key(key: Hashable) -> str:
    """The canonical text of a cache key or scope, equal across processes and Python runs.

    Raises:
        TypeError: the key holds something other than tuples, frozensets, str, int, float,
            bool and None (such a key is simply not shared).
    """
    return dump(_encode_part(key))


def key_from_canonical(text: str) -> Hashable:
    """The key whose :func:`canonical_key` is ``text``."""
    return _decode_part(json.loads(text))  # type: ignore[no-any-return]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def json_encode(value: Any) -> bytes | None:
    """JSON bytes of ``value`` when it survives the round trip unchanged, else None."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if json.loads(text) != value or not _same_shape(json.loads(text), value):
        return None
    return text.encode()


def _same_shape(decoded: Any, value: Any) -> bool:
    # ``==`` takes a tuple for a list's equal only when both are lists, but takes 1 for True and
    # 1.0 for 1: compare types all the way down so a value comes back as the caller stored it.
    if type(decoded) is not type(value):
        return False
    if type(value) is dict:
        return all(_same_shape(decoded[k], v) for k, v in value.items())
    if type(value) is list:
        return all(_same_shape(d, v) for d, v in zip(decoded, value, strict=True))
    return True
