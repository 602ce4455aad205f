"""``top("points", 3)`` and ``rank_of("points")``: leaderboards in ``?=`` expressions.

The compile side (:func:`boards_in`) finds the leaderboards an expression reads
— the first argument must be the variable's name as a quoted string — so the
engine can fetch them before evaluating (``Expression.boards``). The
evaluation side asks the run's scope: ``scope.leaderboard(name)`` returns
``(top, rank)``, ``top`` the best :data:`TOP_MAX` entries
(``{"user", "name", "value"}``, highest first) and ``rank`` the sender's
1-based rank (``None`` before their first value). A scope without
``leaderboard`` (a plain dict) has no run to ask.

The scope is the evaluating expression's (:func:`enter`/:func:`leave`, set by
:func:`tmy.values.expressions.evaluate`): evaluation is synchronous, like the
cost model's meter.
"""

from __future__ import annotations

import ast
from typing import Any

from tmy.errors import EvalError, ExpressionError

TOP_MAX = 100  # entries top() may return; the engine fetches this many per board

USAGE = {
    "top": 'top() takes the variable\'s name as a quoted string, e.g. top("points", 3)',
    "rank_of": 'rank_of() takes the variable\'s name as a quoted string, e.g. rank_of("points")',
}
_ARITY = {"top": 2, "rank_of": 1}

_scope: Any = None  # the scope of the expression being evaluated


def enter(scope: Any) -> Any:
    """The evaluation of an expression over ``scope`` begins; returns the outer scope."""
    global _scope
    outer, _scope = _scope, scope
    return outer


def leave(outer: Any) -> None:
    """The evaluation begun by :func:`enter` is over."""
    global _scope
    _scope = outer


def boards_in(tree: ast.AST) -> frozenset[str]:
    """The leaderboard names ``top(…)``/``rank_of(…)`` calls in ``tree`` read.

    ExpressionError (at load) when the name is not a string literal, the call
    has the wrong number of arguments, or the function is used without a call.
    """
    boards: set[str] = set()
    called: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = node.func.id
            if fn not in _ARITY:
                continue
            called.add(id(node.func))
            if node.keywords or len(node.args) != _ARITY[fn]:
                raise ExpressionError(USAGE[fn])
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                raise ExpressionError(USAGE[fn])
            count = node.args[-1] if fn == "top" else None
            if isinstance(count, ast.Constant) and type(count.value) is int:
                _check_count(count.value)  # a literal count is checked at load
            boards.add(first.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _ARITY and id(node) not in called:
            raise ExpressionError(USAGE[node.id])
    return frozenset(boards)


def _leaderboard(fn: str, name: Any) -> tuple[list[dict[str, Any]], int | None]:
    if not isinstance(name, str):
        raise ExpressionError(USAGE[fn])
    ask = getattr(_scope, "leaderboard", None)
    if ask is None:
        raise EvalError(f"{fn}() needs a rule's run")
    board, rank = ask(name)
    return board, rank


def _check_count(n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ExpressionError(f"top()'s count must be a whole number 0-{TOP_MAX}, got {n!r}")
    if n > TOP_MAX:
        raise ExpressionError(f"top() returns at most {TOP_MAX}, not {n}")


def top(name: Any, n: Any) -> list[dict[str, Any]]:
    """``top("points", n)``: the ``n`` highest entries, highest first."""
    _check_count(n)
    board, _ = _leaderboard("top", name)
    return [dict(entry) for entry in board[:n]]


def rank_of(name: Any) -> int | None:
    """``rank_of("points")``: the sender's rank (1 = highest; ties share), None if unranked."""
    _, rank = _leaderboard("rank_of", name)
    return rank
