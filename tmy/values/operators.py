"""The operators of ``?=`` expressions, each charged to the cost model before it runs.

``**`` refuses exponents and results that would be huge; ``*`` bounds repeated
strings and lists and the size of integer products; ``%`` on strings is
refused (its width comes from the expression); comparisons, ``in`` and
arithmetic are charged for the size of what they touch (:mod:`tmy.values.cost`).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

import simpleeval

from tmy.errors import ExpressionError
from tmy.values import cost
from tmy.values.cost import (
    ITEM_COST,
    MAX_EXPONENT,
    MAX_POWER_BITS,
    MAX_STRING,
    SIZED,
    VIEWS,
    cost_of,
    shallow,
    words,
)


def _linear(a: Any, b: Any) -> int:
    return shallow(a) + shallow(b)


def _compare(a: Any, b: Any) -> int:
    """``==``/``<``…: up to the first difference, so at most the smaller side's walk."""
    ta, tb = type(a), type(b)
    if ta is str and tb is str:
        return min(len(a), len(b))
    if ta is int and tb is int:
        return min(words(a), words(b))
    if isinstance(a, SIZED) and isinstance(b, SIZED):
        small, large = (a, b) if len(a) <= len(b) else (b, a)
        first = cost_of(small)
        cost.meter.charge(first)  # before the second walk, which may be as long
        return cost_of(large, first)
    return 0


def _contains(item: Any, box: Any) -> int:
    """``item in box``: a scan of a string or list, a hash for a map or set."""
    if isinstance(box, (str, bytes)):
        return len(box) + (len(item) if isinstance(item, (str, bytes)) else 0)
    if isinstance(box, (dict, set, frozenset, VIEWS[0])):
        return cost_of(item)
    if isinstance(box, SIZED):
        per_member = cost_of(item) + 1
        return len(box) * ITEM_COST + cost_of(box, len(box) * per_member)
    return 0


def _unary(a: Any) -> int:
    return shallow(a) if type(a) is int else 0


def _metered(fn: Callable[..., Any], price: Callable[..., int]) -> Callable[..., Any]:
    """``fn`` charged ``price(*args)`` before it runs."""

    def op(*args: Any) -> Any:
        cost.meter.charge(price(*args))
        return fn(*args)

    return op


def _safe_power(a: Any, b: Any) -> Any:
    if isinstance(b, (int, float)) and abs(b) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {b} is too large (limit {MAX_EXPONENT})")
    if isinstance(a, int) and isinstance(b, int) and b > 0:
        bits = a.bit_length() * b
        if bits > MAX_POWER_BITS:
            raise ExpressionError(f"{a} ** {b} would be too large a number")
        n = bits >> 5  # 32-bit words of the result
        cost.meter.charge(n * n // 32 + n)
    return operator.pow(a, b)


def _safe_mult(a: Any, b: Any) -> Any:
    """simpleeval's checks on repeating strings and lists, plus a bound on integer size:
    repeated squaring (``[c*c for c in [b*b for b in [9**9999]]]``) doubles the digits
    each time and would block the daemon for minutes."""
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() > MAX_POWER_BITS:
            raise ExpressionError("a multiplication would give too large a number")
        cost.meter.charge(words(a) * words(b) // 32 + words(a) + words(b))
        return a * b
    for seq, times in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, list, tuple)) and isinstance(times, int):
            length = len(seq) * max(times, 0)
            if length > MAX_STRING:
                raise ExpressionError(
                    f"repeating that would build a value that is too large"
                    f" ({length:,} items, limit {MAX_STRING:,})"
                )
            cost.meter.charge(length if isinstance(seq, (str, bytes)) else length * ITEM_COST)
    return simpleeval.safe_mult(a, b)


def _division(a: Any, b: Any) -> int:
    """``//`` and ``%`` of big integers are quadratic in their words."""
    if isinstance(a, int) and isinstance(b, int):
        return words(a) * words(b) // 8 + words(a) + words(b)
    return 0


def _safe_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        raise ExpressionError("'%' formatting of strings is not allowed; use a {template}")
    cost.meter.charge(_division(a, b))
    return operator.mod(a, b)


OPERATORS: dict[type, Any] = dict(simpleeval.DEFAULT_OPERATORS)
for _node in (ast.Add, ast.Sub, ast.Div, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift,
              ast.RShift):  # fmt: skip
    OPERATORS[_node] = _metered(OPERATORS[_node], _linear)
for _node in (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE):
    OPERATORS[_node] = _metered(OPERATORS[_node], _compare)
for _node in (ast.USub, ast.UAdd, ast.Invert):
    OPERATORS[_node] = _metered(OPERATORS[_node], _unary)
OPERATORS[ast.In] = _metered(lambda x, y: x in y, _contains)
OPERATORS[ast.NotIn] = _metered(lambda x, y: x not in y, _contains)
OPERATORS[ast.FloorDiv] = _metered(operator.floordiv, _division)
OPERATORS[ast.Pow] = _safe_power
OPERATORS[ast.Mod] = _safe_mod
OPERATORS[ast.Mult] = _safe_mult
