"""``?=`` expressions: simpleeval, hardened so that rule text can never hang or crash the daemon.

References written ``{path}`` / ``{path!r}`` inside an expression are *bound* as
values (``{path!s}`` binds ``str(value)``), never pasted into the source: a
user's message that contains quotes or code stays data.

Defences on top of simpleeval's (no dunder access, no imports, bounded string
repetition and comprehensions), each in its own module:

* :mod:`tmy.values.cost` — the cost model: a work budget per evaluation
  (``MAX_COST`` units, about 0.1 s of CPU) charged for every node, built-in,
  method and operator before it runs, a wall-clock backstop
  (``MAX_EVAL_SECONDS``), and size bounds on results (``MAX_RESULT_UNITS``);
* :mod:`tmy.values.operators` — ``**`` refuses exponents and results that would
  be huge, ``%`` on strings is refused, the rest is charged by size;
* :mod:`tmy.values.functions` — the built-ins and methods an expression may
  call: ``round`` has a digit bound, ``format`` and padding methods are
  unreachable, ``str.replace``/``str.join`` check their output size first, and
  only non-mutating methods of str/list/dict are callable, so an expression
  cannot change a variable behind the engine's back;
* here — the evaluator: f-strings, lambdas and walrus refused at parse time,
  every node charged, map comprehensions checked for hash flooding before the
  map is built.
"""

from __future__ import annotations

import ast
import types
from collections.abc import Mapping
from typing import Any

import simpleeval

from tmy.errors import EvalError, ExpressionError
from tmy.values import cost, ranks
from tmy.values.cost import (
    ITEM_COST,
    MAX_SOURCE,
    NODE_COST,
    built,
    check_size,
    cost_of,
    hash_flooding,
)
from tmy.values.functions import ALLOWED_ATTRS, FUNCTIONS, BoundMethod, call_hint
from tmy.values.operators import OPERATORS

NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


class _Evaluator(simpleeval.EvalWithCompoundTypes):
    """simpleeval with a work budget and size checks on amplifying calls."""

    def __init__(self) -> None:
        super().__init__(
            operators=OPERATORS, functions=dict(FUNCTIONS), allowed_attrs=ALLOWED_ATTRS
        )
        self.functions.update(FUNCTIONS)  # the base class put raw list/dict/tuple/set back
        self.nodes[ast.DictComp] = self._eval_dictcomp
        for node_type in (ast.JoinedStr, ast.FormattedValue):
            self.nodes.pop(node_type, None)

    def _eval(self, node: ast.AST) -> Any:
        meter = cost.meter
        meter.left -= NODE_COST
        meter.ticks -= 1
        if meter.left < 0 or not meter.ticks:
            meter.tick()
        return super()._eval(node)

    def _check_disallowed_items(self, item: Any) -> None:
        # simpleeval walks every container result recursively (seconds for a
        # shared 10k x 10k list). Our names hold JSON data and FUNCTIONS only,
        # so a shallow check is enough; size is bounded by check_size.
        if callable(item) and item in simpleeval.DISALLOW_FUNCTIONS:
            raise ExpressionError("this function is forbidden")

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        item = super()._eval_attribute(node)
        if type(item) is types.BuiltinMethodType:  # a method bound to a value
            return BoundMethod(item.__self__, node.attr, item)
        return item

    def _eval_subscript(self, node: ast.Subscript) -> Any:
        container = self._eval(node.value)
        key = self._eval(node.slice)
        if type(key) is slice:
            result = container[key]
            cost.meter.charge(built(result))
            return result
        if type(key) is not int:
            cost.meter.charge(cost_of(key))  # hashing a key reads all of it
        return container[key]

    def _eval_list(self, node: ast.List) -> Any:
        result = super()._eval_list(node)  # [*xs] copies xs
        cost.meter.charge(len(result) * ITEM_COST)
        return result

    def _eval_dictcomp(self, node: ast.DictComp) -> Any:
        """``{k: v for …}`` as pairs first, so keys sharing one hash are refused before
        the map is built (each insertion would compare against all of them)."""
        pairs_node = ast.ListComp(
            elt=ast.Tuple(elts=[node.key, node.value], ctx=ast.Load()), generators=node.generators
        )
        pairs = self._eval_comprehension(pairs_node)
        cost.meter.charge(hash_flooding((k for k, _ in pairs), "a map comprehension"))
        return dict(pairs)

    def _eval_dict(self, node: ast.Dict) -> Any:
        result = super()._eval_dict(node)  # {**m} copies m
        cost.meter.charge(len(result) * ITEM_COST)
        return result


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
        if name in FUNCTIONS:  # the function, even where a variable has its name
            raise KeyError(name)
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
    passed = _passed_functions(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            raise ExpressionError(
                "lambdas are not allowed in expressions; to sort maps by a field write"
                ' sorted(seq, by="field") (reverse=True for the highest first)'
            )
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in FUNCTIONS
            and id(node) not in passed
        ):
            raise ExpressionError(call_hint(node.id) or node.id)
        if isinstance(node, (ast.JoinedStr, ast.NamedExpr, ast.Await, ast.Yield)):
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


def _passed_functions(tree: ast.AST) -> set[int]:
    """Name nodes where a function's name may stand: called, or handed to a call
    (``sorted(xs, key=len)``). Anywhere else (``random < 0.5``) it was meant to be called."""
    ok: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            ok.add(id(node.func))
            ok.update(id(arg) for arg in node.args)
            ok.update(id(kw.value) for kw in node.keywords)
    return ok


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
    # a function's name always means the function, called or passed (sorted(xs, key=str))
    return loaded - bound - called - set(NAMES) - set(FUNCTIONS)


def evaluate(tree: ast.expr, source: str, scope: Mapping[str, Any], bound: dict[str, Any]) -> Any:
    """Evaluate a parsed expression against ``scope``; every failure is an EvalError."""
    ev = _EVALUATOR
    saved = ev.names, ev._max_count
    ev.names = _Names(scope, bound)
    outer = cost.begin(source)
    outer_scope = ranks.enter(scope)
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
    except EvalError as exc:
        if f"expression {source!r}" in str(exc):
            raise
        raise type(exc)(f"expression {source!r} refused: {exc}") from None
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
    except MemoryError:
        raise ExpressionError(f"expression {source!r} ran out of memory") from None
    except Exception as exc:
        raise ExpressionError(
            f"expression {source!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        ev.names, ev._max_count = saved
        ranks.leave(outer_scope)
        cost.end(outer)
