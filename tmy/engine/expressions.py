"""``?=`` expressions: simpleeval, hardened so that rule text can never hang or crash the daemon.

References written ``{path}`` / ``{path!r}`` inside an expression are *bound* as
values (``{path!s}`` binds ``str(value)``), never pasted into the source: a
user's message that contains quotes or code stays data.

Defences on top of simpleeval's (no dunder access, no imports, bounded string
repetition and comprehensions):

* a node budget per evaluation (``MAX_NODES``) so nested comprehensions and
  long chains end with an error instead of running for minutes;
* ``**`` refuses exponents and results that would be huge;
* ``%`` on strings, f-strings and padding methods (``ljust``, ``zfill``…) are
  refused because their width comes from the expression and could allocate
  gigabytes; ``str.replace``/``str.join`` check their output size first;
* only non-mutating methods of str/list/dict are callable, so an expression
  cannot change a variable behind the engine's back.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Mapping
from typing import Any

import simpleeval

from tmy.errors import EvalError, ExpressionError

MAX_SOURCE = 10_000
MAX_NODES = 50_000
MAX_STRING = simpleeval.MAX_STRING_LENGTH  # 100,000 characters
MAX_EXPONENT = 10_000
MAX_POWER_BITS = 100_000
MAX_RESULT_UNITS = 1_000_000  # list members + map entries + characters, counted as serialised

_STR_METHODS = {
    "lower",
    "upper",
    "strip",
    "lstrip",
    "rstrip",
    "split",
    "rsplit",
    "startswith",
    "endswith",
    "find",
    "rfind",
    "count",
    "title",
    "capitalize",
    "casefold",
    "isdigit",
    "isalpha",
    "isalnum",
    "isspace",
    "islower",
    "isupper",
    "isnumeric",
    "isdecimal",
    "splitlines",
    "index",
    "rindex",
    "partition",
    "rpartition",
    "removeprefix",
    "removesuffix",
    "replace",
    "join",
    "swapcase",
}
_LIST_METHODS = {"count", "index", "copy"}
_DICT_METHODS = {"get", "keys", "values", "items", "copy"}
ALLOWED_ATTRS: dict[type, set[str]] = {
    str: _STR_METHODS,
    list: _LIST_METHODS,
    tuple: {"count", "index"},
    dict: _DICT_METHODS,
    int: {"bit_length", "real", "imag"},
    float: {"is_integer", "real", "imag"},
}


def _safe_power(a: Any, b: Any) -> Any:
    if isinstance(b, (int, float)) and abs(b) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {b} is too large (limit {MAX_EXPONENT})")
    if isinstance(a, int) and isinstance(b, int) and b > 0 and a.bit_length() * b > MAX_POWER_BITS:
        raise ExpressionError(f"{a} ** {b} would be too large a number")
    return operator.pow(a, b)


def _safe_mult(a: Any, b: Any) -> Any:
    """simpleeval's checks on repeating strings and lists, plus a bound on integer size:
    repeated squaring (``[c*c for c in [b*b for b in [9**9999]]]``) doubles the digits
    each time and would block the daemon for minutes."""
    if (
        isinstance(a, int)
        and isinstance(b, int)
        and a.bit_length() + b.bit_length() > MAX_POWER_BITS
    ):
        raise ExpressionError("a multiplication would give too large a number")
    return simpleeval.safe_mult(a, b)


def _safe_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        raise ExpressionError("'%' formatting of strings is not allowed; use a {template}")
    return operator.mod(a, b)


def _json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _sum(items: Any, start: Any = 0) -> Any:
    """sum() of numbers only: summing lists or strings is quadratic (a hang, not an error)."""
    if not isinstance(start, (int, float)):
        raise ExpressionError("sum() adds numbers only; build lists with a comprehension")
    return sum(items, start)


def _sized(fn: Any, name: str) -> Any:
    """Refuse arguments that would be huge once walked (``str([[1]*9999]*999)``)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, (list, tuple, dict, set, str)):
                check_size(arg, f"{name}()")
        return fn(*args, **kwargs)

    call.__name__ = name
    return call


_WALKING = {
    "str": str, "min": min, "max": max, "sorted": sorted, "any": any, "all": all,
    "list": list, "dict": dict, "tuple": tuple, "set": set, "sum": _sum,
    "json_dumps": _json_dumps, "json_loads": json.loads,
}  # fmt: skip
FUNCTIONS: dict[str, Any] = {
    "len": len, "int": int, "float": float, "bool": bool, "abs": abs, "round": round,
    **{name: _sized(fn, name) for name, fn in _WALKING.items()},
}  # fmt: skip

OPERATORS = dict(simpleeval.DEFAULT_OPERATORS)
OPERATORS[ast.Pow] = _safe_power
OPERATORS[ast.Mod] = _safe_mod
OPERATORS[ast.Mult] = _safe_mult
NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


class _Evaluator(simpleeval.EvalWithCompoundTypes):
    """simpleeval with a node budget and size checks on amplifying calls."""

    def __init__(self) -> None:
        super().__init__(
            operators=OPERATORS, functions=dict(FUNCTIONS), allowed_attrs=ALLOWED_ATTRS
        )
        self.functions.update(FUNCTIONS)  # the base class put raw list/dict/tuple/set back
        for node_type in (ast.JoinedStr, ast.FormattedValue):
            self.nodes.pop(node_type, None)
        self.budget = MAX_NODES

    def _eval(self, node: ast.AST) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise ExpressionError(f"expression is too costly (more than {MAX_NODES} steps)")
        return super()._eval(node)

    def _check_disallowed_items(self, item: Any) -> None:
        # simpleeval walks every container result recursively (seconds for a
        # shared 10k x 10k list). Our names hold JSON data and FUNCTIONS only,
        # so a shallow check is enough; size is bounded by check_size.
        if callable(item) and item in simpleeval.DISALLOW_FUNCTIONS:
            raise ExpressionError("this function is forbidden")

    def _eval_call(self, node: ast.Call) -> Any:
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("replace", "join"):
            owner = self._eval(node.func.value)
            args = [self._eval(a) for a in node.args]
            if node.keywords:
                raise ExpressionError(f".{node.func.attr}() takes no keyword arguments here")
            if isinstance(owner, str):
                _check_amplification(owner, node.func.attr, args)
            return getattr(owner, node.func.attr)(*args)
        return super()._eval_call(node)


def _check_amplification(owner: str, method: str, args: list[Any]) -> None:
    if method == "join" and args:
        parts = list(args[0]) if not isinstance(args[0], (str, list, tuple)) else args[0]
        args[0] = parts
        size = sum(len(p) for p in parts if isinstance(p, str)) + len(owner) * max(
            len(parts) - 1, 0
        )
    elif method == "replace" and len(args) >= 2 and isinstance(args[0], str):
        old, new = args[0], args[1]
        hits = owner.count(old) if old else len(owner) + 1
        size = len(owner) + hits * (len(new) - len(old)) if isinstance(new, str) else 0
    else:
        return
    if size > MAX_STRING:
        raise ExpressionError(f".{method}() would build a string of {size} characters")


_EVALUATOR = _Evaluator()


class _Names(Mapping[str, Any]):
    """The names an expression sees: bound references first, then the run's variables."""

    __slots__ = ("bound", "scope")

    def __init__(self, scope: Mapping[str, Any], bound: dict[str, Any]) -> None:
        self.scope = scope
        self.bound = bound

    def __getitem__(self, name: str) -> Any:
        if name in self.bound:
            return self.bound[name]
        if name in NAMES:
            return NAMES[name]
        return self.scope[name]

    def __iter__(self):  # pragma: no cover - simpleeval never iterates names
        return iter(self.bound)

    def __len__(self) -> int:  # pragma: no cover
        return len(self.bound)


def parse_expression(source: str) -> ast.expr:
    """Parse (and size-check) expression source; ExpressionError on any syntax problem."""
    if len(source) > MAX_SOURCE:
        raise ExpressionError(f"expression is {len(source)} characters long (limit {MAX_SOURCE})")
    if not source.strip():
        raise ExpressionError("empty expression after '?='")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"syntax error in expression {source.strip()!r}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExpressionError("expression is nested too deeply") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.JoinedStr, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield)):
            kind = {ast.JoinedStr: "f-strings"}.get(type(node), type(node).__name__)
            raise ExpressionError(f"{kind} are not allowed in expressions; use a {{template}}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise ExpressionError(f"access to attribute {node.attr!r} is not allowed")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id not in FUNCTIONS
        ):
            raise ExpressionError(
                f"unknown function {node.func.id!r} in expression {source.strip()!r}"
                f" (available: {', '.join(sorted(FUNCTIONS))})"
            )
    return tree.body


def names_in(tree: ast.expr) -> set[str]:
    """Root variable names an expression reads (comprehension targets and functions excluded)."""
    loaded: set[str] = set()
    bound: set[str] = set()
    called: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
    return loaded - bound - called - set(NAMES) - {n for n in called if n in FUNCTIONS}


def evaluate(tree: ast.expr, source: str, scope: Mapping[str, Any], bound: dict[str, Any]) -> Any:
    """Evaluate a parsed expression against ``scope``; every failure is an EvalError."""
    ev = _EVALUATOR
    saved_names, saved_budget = ev.names, ev.budget
    ev.names = _Names(scope, bound)
    ev.budget = MAX_NODES
    ev._max_count = 0
    ev.expr = source
    try:
        result = ev._eval(tree)
        if callable(result):
            raise ExpressionError(
                f"expression {source!r} gives a function, not a value: call it, e.g. name()"
            )
        check_size(result, source)
        return result
    except EvalError:
        raise
    except simpleeval.NameNotDefined as exc:
        raise EvalError(f"undefined variable {exc.name!r} in expression {source!r}") from None
    except simpleeval.FunctionNotDefined as exc:
        raise ExpressionError(
            f"unknown function {exc.func_name!r} in expression {source!r}"
            f" (available: {', '.join(sorted(FUNCTIONS))})"
        ) from None
    except simpleeval.InvalidExpression as exc:
        raise ExpressionError(f"expression {source!r} refused: {exc}") from None
    except RecursionError:
        raise ExpressionError(f"expression {source!r} is nested too deeply") from None
    except Exception as exc:
        raise ExpressionError(
            f"expression {source!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        ev.names, ev.budget = saved_names, saved_budget


def check_size(value: Any, source: str, budget: int = MAX_RESULT_UNITS) -> None:
    """Refuse results that would be huge once serialised (``[[1]*10000]*10000``).

    Shared references count each time they appear, as they would in JSON; the
    walk stops as soon as the budget is spent, so the check itself is cheap.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            members = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set)):
            members = item
        elif isinstance(item, str):
            budget -= len(item)
            members = ()
        else:
            members = ()
        budget -= len(members)
        for member in members:
            if budget < 0:
                break
            if isinstance(member, str):
                budget -= len(member)
            elif isinstance(member, (list, tuple, set, dict)):
                stack.append(member)
        if budget < 0:
            what = source if source.endswith("()") else f"expression {source!r}"
            raise ExpressionError(f"{what} produced or got a value that is too large")
