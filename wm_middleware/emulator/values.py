"""Reading the loosely typed JSON values clients send, the same way everywhere.

Contract: :func:`loads` is the one JSON parser of the emulator (it refuses ``NaN``,
``Infinity`` and numbers that overflow to them, which Starlette could not answer with); the
coercions never raise: a value of the wrong type reads as the default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "JSON",
    "as_float",
    "loads",
    "str_list",
    "to_bool",
    "to_dict",
    "to_float",
    "to_int",
    "to_str",
]


JSON = dict[str, Any]
"""A JSON object as the emulator reads and answers it."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def loads(data: str | bytes) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and numbers that overflow to them.

    Python's parser accepts those by default, and Starlette's ``JSONResponse`` refuses to write
    them: a stored NaN would turn every later answer that includes it into a 500.

    Raises:
        ValueError: not valid JSON, or a non-finite number.
    """
    return json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)


def to_str(value: object) -> str | None:
    """A non-empty string, else ``None``."""
    return value if isinstance(value, str) and value != "" else None


def as_float(value: object) -> float | None:
    """A number, or a string holding one, as a float; ``None`` otherwise (booleans too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def to_float(value: object, default: float) -> float:
    """:func:`as_float`, or ``default``."""
    number = as_float(value)
    return default if number is None else number


def to_int(value: object, default: int) -> int:
    """A number, or a string holding one, truncated to an int; ``default`` otherwise."""
    number = as_float(value)
    if number is None or not math.isfinite(number):
        return default
    return int(number)


def to_bool(value: object) -> bool:
    """``True`` for ``true`` and ``"true"`` only."""
    return value is True or value == "true"


def to_dict(value: object) -> dict[str, Any]:
    """A copy of a mapping, else ``{}``."""
    return dict(value) if isinstance(value, Mapping) else {}


def str_list(value: object) -> list[str]:
    """A string or a list of strings as a list of the non-empty strings."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str) and v]
    return []
