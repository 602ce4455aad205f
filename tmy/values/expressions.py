"""``?=`` expressions: simpleeval, hardened so that rule text can never hang or crash the daemon.

References written ``{path}`` / ``{path!r}`` inside an expression are *bound* as
values (``{path!s}`` binds ``str(value)``), never pasted into the source: a
user's message that contains quotes or code stays data.

Defences on top of simpleeval's (no dunder access, no imports, bounded string
repetition and comprehensions):

* a work budget per evaluation (``MAX_COST`` units, about 0.1 s of CPU). Every
  evaluated node costs ``NODE_COST``; every built-in, method and operator is
  charged *before it runs* for the size of what it touches (characters, list
  and map members, digits of integers, comparisons of a sort) and after for
  what it built. Evaluation runs on the event loop, where no timeout can
  interrupt it, so this is what keeps one message from stalling every chat:
  over budget is an error naming the expression. A wall-clock backstop
  (``MAX_EVAL_SECONDS``) ends anything the cost model underrates;
* ``**`` refuses exponents and results that would be huge, ``round`` more than
  ``MAX_ROUND_DIGITS`` digits;
* ``%`` on strings, f-strings, ``format`` and padding methods (``ljust``,
  ``zfill``…) are refused because their width comes from the expression and
  could allocate gigabytes; ``str.replace``/``str.join`` check their output size
  first; results (and arguments of walking built-ins) are bounded by
  ``MAX_RESULT_UNITS``;
* only non-mutating methods of str/list/dict are callable, so an expression
  cannot change a variable behind the engine's back.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import sys
import time
import types
from collections.abc import Callable, Mapping
from typing import Any

import simpleeval

from tmy.errors import EvalError, ExpressionError

MAX_SOURCE = 10_000
MAX_STRING = simpleeval.MAX_STRING_LENGTH  # 100,000 characters
MAX_EXPONENT = 10_000
MAX_POWER_BITS = 100_000
MAX_ROUND_DIGITS = 1_000  # round(x, n) with |n| above this is refused (10**n is costly)
MAX_RESULT_UNITS = 1_000_000  # list members + map entries + characters, counted as serialised
MAX_SHARED_HASH = 64  # distinct set members / map keys with one hash value (hash flooding)

# -- the work budget ---------------------------------------------------------------------
# One unit is about 4 ns here: touching one character in C. The constants were
# measured on a 2-core server so that the worst thing an expression can do with
# the whole budget takes about 0.1 s (see tests/test_hardening_values.py).
MAX_COST = 25_000_000  # units one evaluation may spend
NODE_COST = 150  # each evaluated syntax node (simpleeval walks the tree in Python)
CALL_COST = 300  # each call of a built-in or method (the metering wrapper itself)
ITEM_COST = 16  # each list/map member a built-in walks, compares, hashes or builds
CONTAINER_COST = 200  # each nested list/map a walk enters
MIXED_COST = 15  # more per member of a list that mixes kinds (measured one by one)
FLOAT_COST = 75  # a float written as text (its shortest repr)
SORT_COST = 3  # per member and comparison level of a sort (n * log2 n)
MAX_EVAL_SECONDS = 0.25  # wall-clock backstop, checked between nodes and calls

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


# -- measuring ---------------------------------------------------------------------------

_FLAT = frozenset({bool, type(None)})
_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_SIZED = (dict, list, tuple, set, frozenset, *_VIEWS)
_SIZED_TYPES = frozenset(_SIZED)


def _words(n: int) -> int:
    """32-bit words of an integer: what arithmetic on it costs."""
    return n.bit_length() >> 5


def _shallow(value: Any) -> int:
    """Units to touch ``value`` once: its characters, its members, its words."""
    t = type(value)
    if t is str or t is bytes:
        return len(value)
    if t is int:
        return value.bit_length() >> 5
    if t in _SIZED_TYPES:
        return len(value) * ITEM_COST
    return 0


def _built(value: Any) -> int:
    """Units for what a call built: a view of a map is free, a new list is not."""
    return 0 if type(value) in _VIEWS else _shallow(value)


def _int_units(n: int) -> int:
    """Units to turn an integer into decimal text (quadratic in its words)."""
    words = n.bit_length() >> 5
    return words + words * words // 2 if words > 2 else 0


def measure(
    value: Any, size_limit: int = MAX_RESULT_UNITS, cost_limit: int = sys.maxsize
) -> tuple[int, int]:
    """``(size, cost)`` of ``value``: size is members + characters (+1 per list or
    map) as serialised, shared references counted each time they appear; cost is
    the work units a built-in walking it (``str``, ``json_dumps``, ``==``, a sort)
    may spend, priced for the dearest of those (writing numbers as text).

    The walk stops as soon as either passes its limit (the numbers returned are
    then above it), so measuring is never dearer than the budget it guards.
    Lists of one plain kind are measured in C (``map``), not member by member.
    """
    size = cost = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            size += len(item)
            cost += len(item)
            continue
        if isinstance(item, float):
            cost += FLOAT_COST
            continue
        if isinstance(item, int):
            cost += _int_units(item)
            continue
        if not isinstance(item, _SIZED):
            continue
        n = len(item)
        members = 2 * n if isinstance(item, dict) else n  # a map's keys and values
        size += 1 + members
        cost += CONTAINER_COST + members * ITEM_COST
        if size > size_limit or cost > cost_limit:
            break
        for part in (item, item.values()) if isinstance(item, dict) else (item,):
            kinds = set(map(type, part))
            if kinds <= _FLAT:
                continue
            if len(kinds) == 1:
                kind = next(iter(kinds))
                if kind is str:
                    chars = sum(map(len, part))
                    size += chars
                    cost += chars
                    continue
                if kind is float:
                    cost += len(part) * FLOAT_COST
                    continue
                if kind is int:
                    if max(map(int.bit_length, part)) > 96:
                        cost += sum(map(_int_units, part))
                    continue
            cost += len(part) * MIXED_COST
            for member in part:
                kind = type(member)
                if kind is str:
                    size += len(member)
                    cost += len(member)
                elif kind is float:
                    cost += FLOAT_COST
                elif kind is int:
                    cost += _int_units(member)
                elif kind not in _FLAT:
                    stack.append(member)
        if size > size_limit or cost > cost_limit:
            break
    return size, cost


def check_size(value: Any, source: str, budget: int = MAX_RESULT_UNITS) -> None:
    """Refuse values that would be huge once serialised (``[[1]*10000]*10000``);
    the walk is charged to the running evaluation."""
    kind = type(value)
    if kind in _FLAT or kind is float or (kind is int and value.bit_length() < 97):
        return  # the common results: nothing to walk
    _meter.charge(_sized_cost(value, source, budget))


def _sized_cost(value: Any, source: str, budget: int = MAX_RESULT_UNITS) -> int:
    """The cost of walking ``value``; an error when its size passes ``budget``."""
    size, cost = measure(value, budget, max(_meter.left, 0) + 1)
    if size > budget:
        what = source if source.endswith("()") else f"expression {source!r}"
        raise ExpressionError(
            f"{what} produced or got a value that is too large"
            f" (more than {budget:,} members and characters)"
        )
    return cost


# -- the meter ---------------------------------------------------------------------------

_TICKS = 64  # nodes between two looks at the clock


class _Meter:
    """The work one evaluation may still do; raises once it is spent or too late."""

    __slots__ = ("deadline", "left", "source", "ticks")

    def __init__(self, source: str, budget: int | None = None, seconds: float | None = None):
        self.source = source
        self.left = MAX_COST if budget is None else budget
        self.deadline = time.perf_counter() + (MAX_EVAL_SECONDS if seconds is None else seconds)
        self.ticks = _TICKS

    def charge(self, units: int) -> None:
        self.left -= units
        self.ticks -= 1
        if self.left < 0 or not self.ticks or units > 10_000:
            self.tick()

    def tick(self) -> None:
        """Every few nodes and calls, and before anything big: the budget, then the clock."""
        if self.left < 0:
            raise self.spent()
        self.ticks = _TICKS
        if time.perf_counter() > self.deadline:
            raise self.late()

    def spent(self) -> ExpressionError:
        return ExpressionError(
            f"expression {self.source!r} is too costly: it needs more than {MAX_COST:,} units"
            " of work (about 0.1 s); use smaller values or a simpler expression"
        )

    def late(self) -> ExpressionError:
        self.left = -1  # whatever runs next in this evaluation stops too
        return ExpressionError(
            f"expression {self.source!r} is too costly: it ran longer than {MAX_EVAL_SECONDS:g} s"
        )


_IDLE = _Meter("", sys.maxsize, math.inf)  # outside any evaluation: nothing to bound
_meter = _IDLE  # the running evaluation's meter (evaluation is synchronous)


def _cost_of(value: Any, limit: int | None = None) -> int:
    """Cost of walking ``value``, stopping past ``limit`` or what is left of the budget."""
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value)
    if kind not in _SIZED_TYPES:
        return _int_units(value) if kind is int else FLOAT_COST if kind is float else 0
    left = max(_meter.left, 0) + 1  # walking further than the budget is never needed
    return measure(value, sys.maxsize, left if limit is None else min(limit, left))[1]


# -- operators ---------------------------------------------------------------------------


def _linear(a: Any, b: Any) -> int:
    return _shallow(a) + _shallow(b)


def _compare(a: Any, b: Any) -> int:
    """``==``/``<``…: up to the first difference, so at most the smaller side's walk."""
    ta, tb = type(a), type(b)
    if ta is str and tb is str:
        return min(len(a), len(b))
    if ta is int and tb is int:
        return min(_words(a), _words(b))
    if isinstance(a, _SIZED) and isinstance(b, _SIZED):
        small, large = (a, b) if len(a) <= len(b) else (b, a)
        first = _cost_of(small)
        _meter.charge(first)  # before the second walk, which may be as long
        return _cost_of(large, first)
    return 0


def _contains(item: Any, box: Any) -> int:
    """``item in box``: a scan of a string or list, a hash for a map or set."""
    if isinstance(box, (str, bytes)):
        return len(box) + (len(item) if isinstance(item, (str, bytes)) else 0)
    if isinstance(box, (dict, set, frozenset, _VIEWS[0])):
        return _cost_of(item)
    if isinstance(box, _SIZED):
        per_member = _cost_of(item) + 1
        return len(box) * ITEM_COST + _cost_of(box, len(box) * per_member)
    return 0


def _unary(a: Any) -> int:
    return _shallow(a) if type(a) is int else 0


def _metered(fn: Callable[..., Any], cost: Callable[..., int]) -> Callable[..., Any]:
    def op(*args: Any) -> Any:
        _meter.charge(cost(*args))
        return fn(*args)

    return op


def _safe_power(a: Any, b: Any) -> Any:
    if isinstance(b, (int, float)) and abs(b) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {b} is too large (limit {MAX_EXPONENT})")
    if isinstance(a, int) and isinstance(b, int) and b > 0:
        bits = a.bit_length() * b
        if bits > MAX_POWER_BITS:
            raise ExpressionError(f"{a} ** {b} would be too large a number")
        words = bits >> 5
        _meter.charge(words * words // 32 + words)
    return operator.pow(a, b)


def _safe_mult(a: Any, b: Any) -> Any:
    """simpleeval's checks on repeating strings and lists, plus a bound on integer size:
    repeated squaring (``[c*c for c in [b*b for b in [9**9999]]]``) doubles the digits
    each time and would block the daemon for minutes."""
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() > MAX_POWER_BITS:
            raise ExpressionError("a multiplication would give too large a number")
        _meter.charge(_words(a) * _words(b) // 32 + _words(a) + _words(b))
        return a * b
    for seq, times in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, list, tuple)) and isinstance(times, int):
            length = len(seq) * max(times, 0)
            if length > MAX_STRING:
                raise ExpressionError(
                    f"repeating that would build a value that is too large"
                    f" ({length:,} items, limit {MAX_STRING:,})"
                )
            _meter.charge(length if isinstance(seq, (str, bytes)) else length * ITEM_COST)
    return simpleeval.safe_mult(a, b)


def _division(a: Any, b: Any) -> int:
    """``//`` and ``%`` of big integers are quadratic in their words."""
    if isinstance(a, int) and isinstance(b, int):
        return _words(a) * _words(b) // 8 + _words(a) + _words(b)
    return 0


def _safe_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        raise ExpressionError("'%' formatting of strings is not allowed; use a {template}")
    _meter.charge(_division(a, b))
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
NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


# -- functions ---------------------------------------------------------------------------


def _free(*args: Any, **kwargs: Any) -> int:
    return 0


def _flat(*args: Any, **kwargs: Any) -> int:
    return sum(map(_shallow, args))


def _walking(name: str) -> Callable[..., int]:
    """Cost of a built-in that walks its arguments (``sorted``, ``str([...])``…).

    Arguments are bounded like results (``MAX_RESULT_UNITS``); a string consumed
    as an iterable costs a member per character, since each becomes an object.
    """
    where = f"{name}()"

    def cost(*args: Any, **kwargs: Any) -> int:
        total = 0
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, (str, bytes)):
                total += len(arg) * (ITEM_COST if name != "str" else 1)
                if len(arg) > MAX_RESULT_UNITS:
                    _sized_cost(arg, where)
            elif isinstance(arg, _SIZED):
                total += _sized_cost(arg, where)
            else:
                total += _shallow(arg)
        return total

    return cost


def _sorting(*args: Any, **kwargs: Any) -> int:
    total = _SORTED_WALK(*args, **kwargs)
    if args and hasattr(args[0], "__len__"):
        n = len(args[0])
        total += n * max(n.bit_length(), 1) * SORT_COST
    return total


_SORTED_WALK = _walking("sorted")
_STR_WALK = _walking("str")


def _conversion(value: Any) -> int:
    """int <-> decimal text is quadratic in the number of digits."""
    if isinstance(value, (str, bytes)):
        words = len(value) // 9 + 1
        return len(value) + words * words // 2
    if type(value) is int:
        words = _words(value)
        return words + words * words // 2
    return 0


def _int_cost(*args: Any, **kwargs: Any) -> int:
    return _conversion(args[0]) if args else 0


def _str_cost(*args: Any, **kwargs: Any) -> int:
    if not args:
        return 0
    if isinstance(args[0], _SIZED):
        return _STR_WALK(*args)
    if isinstance(args[0], (str, bytes)):
        return len(args[0])
    return _conversion(args[0]) if type(args[0]) is int else 0


def _round_cost(*args: Any, **kwargs: Any) -> int:
    """``round(5, -20000000)`` computes 10**20000000: refuse digits beyond a bound."""
    digits = args[1] if len(args) > 1 else kwargs.get("ndigits")
    if not isinstance(digits, int):
        return 0
    if abs(digits) > MAX_ROUND_DIGITS:
        raise ExpressionError(
            f"round() to {digits} digits is too costly (limit {MAX_ROUND_DIGITS:,} either way)"
        )
    if args and type(args[0]) is int and digits < 0:
        words = max(_words(args[0]), -digits // 9) + 1
        return words * words // 8
    return 0


def _hash_flooding(keys: Any, where: str) -> int:
    """Refuse set members or map keys crafted to share one hash, else charge the check.

    Integers (and floats, and tuples of them) hash predictably: the multiples
    of 2**61 - 1 all hash to 0. ``set()`` of 40,000 of them is one quadratic C
    call that no budget check can interrupt once started, so it is looked at
    before: more than :data:`MAX_SHARED_HASH` *different* values with one hash
    never happen by chance. Strings hash randomly per process and are skipped.
    """
    members = [k for k in keys if type(k) not in (str, bytes)]
    counts: dict[int, int] = {}
    try:
        for k in members:
            h = hash(k)
            counts[h] = counts.get(h, 0) + 1
    except TypeError:
        return 0  # unhashable: the call itself refuses it
    crowded = {h: [] for h, n in counts.items() if n > MAX_SHARED_HASH}
    if not crowded:
        return len(members)
    for k in members:
        seen = crowded.get(hash(k))
        if seen is not None and k not in seen:  # ``in`` on a short list: C, == per member
            seen.append(k)
            if len(seen) > MAX_SHARED_HASH:
                raise ExpressionError(
                    f"{where} is too costly: more than {MAX_SHARED_HASH} different values"
                    " share one hash (hash flooding)"
                )
    return len(members) * MAX_SHARED_HASH


def _set_cost(*args: Any, **kwargs: Any) -> int:
    cost = _SET_WALK(*args, **kwargs)
    if args and isinstance(args[0], (list, tuple, set, frozenset, *_VIEWS)):
        cost += _hash_flooding(args[0], "set()")
    return cost


def _dict_cost(*args: Any, **kwargs: Any) -> int:
    cost = _DICT_WALK(*args, **kwargs)
    if args and isinstance(args[0], (list, tuple)):
        pairs = [p for p in args[0] if isinstance(p, (list, tuple)) and len(p) == 2]
        cost += _hash_flooding((p[0] for p in pairs), "dict()")
    return cost


_SET_WALK = _walking("set")
_DICT_WALK = _walking("dict")


def _json_loads(text: Any) -> Any:
    _meter.charge(2 * _shallow(text))
    value = json.loads(text)
    check_size(value, "json_loads()")
    return value


def _json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _sum(items: Any, start: Any = 0) -> Any:
    """sum() of numbers only: summing lists or strings is quadratic (a hang, not an error)."""
    if not isinstance(start, (int, float)):
        raise ExpressionError("sum() adds numbers only; build lists with a comprehension")
    return sum(items, start)


def _function(name: str, fn: Callable[..., Any], cost: Callable[..., int]) -> Any:
    """A built-in as expressions see it: charged before it runs and for what it built."""

    def call(*args: Any, **kwargs: Any) -> Any:
        meter = _meter
        meter.charge(CALL_COST + cost(*args, **kwargs))
        result = fn(*args, **kwargs)
        meter.charge(_built(result))
        return result

    call.__name__ = call.__qualname__ = name
    return call


_COSTS: dict[str, tuple[Callable[..., Any], Callable[..., int]]] = {
    "len": (len, _free), "bool": (bool, _free), "abs": (abs, _flat), "float": (float, _flat),
    "int": (int, _int_cost), "round": (round, _round_cost), "str": (str, _str_cost),
    "sorted": (sorted, _sorting), "json_loads": (_json_loads, _free),
    "set": (set, _set_cost), "dict": (dict, _dict_cost),
    **{name: (fn, _walking(name)) for name, fn in {
        "min": min, "max": max, "any": any, "all": all, "list": list,
        "tuple": tuple, "sum": _sum, "json_dumps": _json_dumps}.items()},
}  # fmt: skip
FUNCTIONS: dict[str, Any] = {name: _function(name, *pair) for name, pair in _COSTS.items()}


# -- methods -----------------------------------------------------------------------------


class _Method:
    """A method of a value (``'a,b'.split``), charged like the built-ins.

    It is what an attribute access gives, so a method passed along
    (``sorted(xs, key=text.count)``) is charged on every call too.
    """

    __slots__ = ("fn", "name", "owner")

    def __init__(self, owner: Any, name: str, fn: Callable[..., Any]) -> None:
        self.owner = owner
        self.name = name
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        meter = _meter
        owner, name = self.owner, self.name
        if isinstance(owner, str) and name in ("join", "replace"):
            if kwargs:
                raise ExpressionError(f".{name}() takes no keyword arguments here")
            args = _check_amplification(owner, name, list(args))
        else:
            meter.charge(CALL_COST + _method_cost(owner, name, args, kwargs))
        result = self.fn(*args, **kwargs)
        meter.charge(_built(result))
        return result


def _method_cost(owner: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if isinstance(owner, (str, bytes)):
        return len(owner) + sum(map(_shallow, args)) + sum(map(_shallow, kwargs.values()))
    if isinstance(owner, (list, tuple)):
        if name in ("count", "index"):  # compares members: as deep as the list
            return _cost_of(owner) + (_cost_of(args[0]) if args else 0)
        return len(owner) * ITEM_COST
    if isinstance(owner, dict):
        if name == "copy":
            return len(owner) * ITEM_COST
        return _cost_of(args[0]) if name == "get" and args else 0
    return 0


def _check_amplification(owner: str, method: str, args: list[Any]) -> tuple[Any, ...]:
    """Size (and charge) ``.join``/``.replace`` before they build anything."""
    _meter.charge(CALL_COST + len(owner))
    size = 0
    if method == "join" and args:
        parts = list(args[0]) if not isinstance(args[0], (str, list, tuple)) else args[0]
        args[0] = parts
        _meter.charge(len(parts) * ITEM_COST)
        try:
            chars = len(parts) if isinstance(parts, str) else sum(map(len, parts))
        except TypeError:  # not all strings: join itself says so
            chars = 0
        size = chars + len(owner) * max(len(parts) - 1, 0)
    elif method == "replace" and len(args) >= 2 and isinstance(args[0], str):
        old, new = args[0], args[1]
        hits = owner.count(old) if old else len(owner) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            hits = min(hits, args[2])
        size = len(owner) + hits * (len(new) - len(old)) if isinstance(new, str) else 0
    if size > MAX_STRING:
        raise ExpressionError(
            f".{method}() would build a string that is too large"
            f" ({size:,} characters, limit {MAX_STRING:,})"
        )
    _meter.charge(size)
    return tuple(args)


# -- the evaluator -----------------------------------------------------------------------


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
        meter = _meter
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
            return _Method(item.__self__, node.attr, item)
        return item

    def _eval_subscript(self, node: ast.Subscript) -> Any:
        container = self._eval(node.value)
        key = self._eval(node.slice)
        if type(key) is slice:
            result = container[key]
            _meter.charge(_built(result))
            return result
        if type(key) is not int:
            _meter.charge(_cost_of(key))  # hashing a key reads all of it
        return container[key]

    def _eval_list(self, node: ast.List) -> Any:
        result = super()._eval_list(node)  # [*xs] copies xs
        _meter.charge(len(result) * ITEM_COST)
        return result

    def _eval_dictcomp(self, node: ast.DictComp) -> Any:
        """``{k: v for …}`` as pairs first, so keys sharing one hash are refused before
        the map is built (each insertion would compare against all of them)."""
        pairs_node = ast.ListComp(
            elt=ast.Tuple(elts=[node.key, node.value], ctx=ast.Load()), generators=node.generators
        )
        pairs = self._eval_comprehension(pairs_node)
        _meter.charge(_hash_flooding((k for k, _ in pairs), "a map comprehension"))
        return dict(pairs)

    def _eval_dict(self, node: ast.Dict) -> Any:
        result = super()._eval_dict(node)  # {**m} copies m
        _meter.charge(len(result) * ITEM_COST)
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
    # a function's name always means the function, called or passed (sorted(xs, key=str))
    return loaded - bound - called - set(NAMES) - set(FUNCTIONS)


def evaluate(tree: ast.expr, source: str, scope: Mapping[str, Any], bound: dict[str, Any]) -> Any:
    """Evaluate a parsed expression against ``scope``; every failure is an EvalError."""
    global _meter
    ev = _EVALUATOR
    saved = ev.names, _meter, ev._max_count
    ev.names = _Names(scope, bound)
    _meter = _Meter(source)
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
        ev.names, _meter, ev._max_count = saved
