"""Metadata filter compilers for both SDK generations.

Contract: each compiler turns the wire-format filter into a :data:`Predicate` over a
metadata mapping, or ``None`` when no filter was given. Unknown shapes match
everything (the emulator is lenient where the real API would reject).

* 3.x (``filters``): ``{"AND": [...]}`` / ``{"OR": [...]}`` nesting of conditions
  ``{"key", "value", "filterType"?, "negate"?, "ignoreCase"?, "numericOperator"?}``.
* 5.x (``filter``): ``{"operator": "and"|"or", "operands": [...]}`` nesting of
  predicates ``{"field", "operator", "value", "caseSensitive"?}`` with operators
  ``eq/neq/contains/notContains/arrayContains/arrayNotContains/gt/gte/lt/lte``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from .store import Predicate
from .values import as_float, loads, to_bool

__all__ = ["compile_v3_filters", "compile_v5_filter"]


def _compare(op: str, left: float, right: float) -> bool:
    return {
        ">": left > right,
        "gt": left > right,
        "<": left < right,
        "lt": left < right,
        ">=": left >= right,
        "gte": left >= right,
        "<=": left <= right,
        "lte": left <= right,
        "=": left == right,
    }.get(op, False)


def _v3_condition(cond: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
    key = str(cond.get("key", ""))
    want = cond.get("value")
    kind = cond.get("filterType") or "metadata"
    ignore_case = to_bool(cond.get("ignoreCase"))
    have = meta.get(key)
    result: bool
    if kind == "numeric":
        left, right = as_float(have), as_float(want)
        result = (
            left is not None
            and right is not None
            and _compare(str(cond.get("numericOperator") or "="), left, right)
        )
    elif kind == "array_contains":
        items = have if isinstance(have, list) else []
        result = any(
            (str(i).lower() == str(want).lower()) if ignore_case else str(i) == str(want)
            for i in items
        )
    elif kind == "string_contains":
        a, b = str(have if have is not None else ""), str(want)
        result = have is not None and ((b.lower() in a.lower()) if ignore_case else (b in a))
    else:
        if have is None:
            result = False
        elif isinstance(have, bool) or ignore_case:
            result = str(have).lower() == str(want).lower()
        else:
            result = str(have) == str(want)
    return (not result) if to_bool(cond.get("negate")) else result


def _v3_group(node: Mapping[str, Any]) -> tuple[bool, list[Any]] | None:
    """``{"AND": [...]}`` / ``{"OR": [...]}`` as ``(is_or, operands)``; ``None`` for a leaf."""
    if "AND" in node:
        return False, node["AND"] or []
    if "OR" in node:
        return True, node["OR"] or []
    return None


def compile_v3_filters(filters: object) -> Predicate | None:
    """Compile a 3.x ``filters`` value (object or JSON string) into a predicate."""
    if filters is None:
        return None
    if isinstance(filters, str):
        try:
            filters = loads(filters)
        except ValueError:
            return None
    return partial(_evaluate, _V3, filters)


def _v5_predicate(node: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
    op = str(node.get("operator", "eq"))
    have = meta.get(str(node.get("field", "")))
    want = node.get("value")
    case_sensitive = node.get("caseSensitive")
    fold = case_sensitive is False

    def norm(v: object) -> str:
        s = str(v).lower() if isinstance(v, bool) else str(v)
        return s.lower() if fold else s

    if op in ("eq", "neq"):
        if isinstance(want, bool) or isinstance(have, bool):
            equal = have is not None and str(have).lower() == str(want).lower()
        elif isinstance(want, int | float):
            equal = as_float(have) == float(want)
        else:
            equal = have is not None and norm(have) == norm(want)
        return equal if op == "eq" else not equal
    if op in ("contains", "notContains"):
        found = have is not None and norm(want) in norm(have)
        return found if op == "contains" else not found
    if op in ("arrayContains", "arrayNotContains"):
        items = have if isinstance(have, list) else []
        found = any(str(i) == str(want) for i in items)
        return found if op == "arrayContains" else not found
    left, right = as_float(have), as_float(want)
    return left is not None and right is not None and _compare(op, left, right)


def _v5_group(node: Mapping[str, Any]) -> tuple[bool, list[Any]] | None:
    """``{"operator": "and"|"or", "operands": [...]}`` as ``(is_or, operands)``."""
    if "operands" not in node:
        return None
    return node.get("operator") == "or", node.get("operands") or []


@dataclass(frozen=True)
class _Grammar:
    """How one generation spells a group of operands and a leaf condition."""

    group: Callable[[Mapping[str, Any]], tuple[bool, list[Any]] | None]
    leaf_key: str
    leaf: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


_V3 = _Grammar(_v3_group, "key", _v3_condition)
_V5 = _Grammar(_v5_group, "field", _v5_predicate)


def _evaluate(grammar: _Grammar, node: object, meta: Mapping[str, Any]) -> bool:
    """Whether ``meta`` passes the filter tree ``node``; what is not a group or leaf passes.

    An AND holds when every operand does; an OR when any does, or when it has none.
    """
    if not isinstance(node, Mapping):
        return True
    group = grammar.group(node)
    if group is not None:
        is_or, operands = group
        if is_or:
            return any(_evaluate(grammar, n, meta) for n in operands) if operands else True
        return all(_evaluate(grammar, n, meta) for n in operands)
    if grammar.leaf_key in node:
        return grammar.leaf(node, meta)
    return True


def compile_v5_filter(filter_: object) -> Predicate | None:
    """Compile a 5.x ``filter`` expression into a predicate."""
    if filter_ is None:
        return None
    return partial(_evaluate, _V5, filter_)
