"""The built-in functions and methods ``?=`` expressions may call, each charged to the cost model.

A built-in is charged before it runs for what it will walk and after for what
it built (:mod:`tmy.values.cost`); ``sum`` adds numbers only, ``round`` has a
digit bound, ``set``/``dict`` refuse hash flooding. Only non-mutating methods
of str/list/dict are callable (:data:`ALLOWED_ATTRS`), so an expression cannot
change a variable behind the engine's back; ``str.replace``/``str.join`` check
their output size first, and padding and formatting methods (``ljust``,
``zfill``, ``format`` …) are not callable at all: their width comes from the
expression and could allocate gigabytes.

``sorted`` also takes ``by="field"`` (maps sorted by one of their fields, the
way to write a leaderboard without a lambda); the random functions are in
:mod:`tmy.values.draws`, ``top``/``rank_of`` in :mod:`tmy.values.ranks`.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import Any

from tmy.errors import ExpressionError
from tmy.values import cost, draws, ranks
from tmy.values.cost import (
    CALL_COST,
    DRAW_COST,
    ITEM_COST,
    MAX_RESULT_UNITS,
    MAX_ROUND_DIGITS,
    MAX_STRING,
    SIZED,
    SORT_COST,
    VIEWS,
    built,
    check_size,
    cost_of,
    hash_flooding,
    shallow,
    sized_cost,
    words,
)

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


# -- functions ---------------------------------------------------------------------------


def _free(*args: Any, **kwargs: Any) -> int:
    return 0


def _flat(*args: Any, **kwargs: Any) -> int:
    return sum(map(shallow, args))


def _walking(name: str) -> Callable[..., int]:
    """Cost of a built-in that walks its arguments (``sorted``, ``str([...])``…).

    Arguments are bounded like results (``MAX_RESULT_UNITS``); a string consumed
    as an iterable costs a member per character, since each becomes an object.
    """
    where = f"{name}()"

    def units(*args: Any, **kwargs: Any) -> int:
        total = 0
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, (str, bytes)):
                total += len(arg) * (ITEM_COST if name != "str" else 1)
                if len(arg) > MAX_RESULT_UNITS:
                    sized_cost(arg, where)
            elif isinstance(arg, SIZED):
                total += sized_cost(arg, where)
            else:
                total += shallow(arg)
        return total

    return units


def _sorting(*args: Any, **kwargs: Any) -> int:
    total = _SORTED_WALK(*args, **kwargs)
    if args and hasattr(args[0], "__len__"):
        n = len(args[0])
        total += n * max(n.bit_length(), 1) * SORT_COST
    return total


_SORTED_WALK = _walking("sorted")
_STR_WALK = _walking("str")


def _draws(count: Callable[..., int], walk: Callable[..., int] | None = None) -> Callable[..., int]:
    """Cost of a random function: ``DRAW_COST`` per draw it makes (``count`` of its
    arguments), plus the walk of its input (``sample``/``shuffled`` copy the list)."""

    def units(*args: Any, **kwargs: Any) -> int:
        try:
            draws = max(count(*args, **kwargs), 1)
        except (TypeError, ValueError):  # wrong arguments: the function itself says so
            draws = 1
        return draws * DRAW_COST + (walk(*args, **kwargs) if walk is not None else 0)

    return units


def _one(*args: Any, **kwargs: Any) -> int:
    return 1


def _conversion(value: Any) -> int:
    """int <-> decimal text is quadratic in the number of digits."""
    if isinstance(value, (str, bytes)):
        n = len(value) // 9 + 1  # 32-bit words of the number
        return len(value) + n * n // 2
    if type(value) is int:
        n = words(value)
        return n + n * n // 2
    return 0


def _int_cost(*args: Any, **kwargs: Any) -> int:
    return _conversion(args[0]) if args else 0


def _str_cost(*args: Any, **kwargs: Any) -> int:
    if not args:
        return 0
    if isinstance(args[0], SIZED):
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
        n = max(words(args[0]), -digits // 9) + 1
        return n * n // 8
    return 0


def _set_cost(*args: Any, **kwargs: Any) -> int:
    units = _SET_WALK(*args, **kwargs)
    if args and isinstance(args[0], (list, tuple, set, frozenset, *VIEWS)):
        units += hash_flooding(args[0], "set()")
    return units


def _dict_cost(*args: Any, **kwargs: Any) -> int:
    units = _DICT_WALK(*args, **kwargs)
    if args and isinstance(args[0], (list, tuple)):
        pairs = [p for p in args[0] if isinstance(p, (list, tuple)) and len(p) == 2]
        units += hash_flooding((p[0] for p in pairs), "dict()")
    return units


_SET_WALK = _walking("set")
_DICT_WALK = _walking("dict")


def _json_loads(text: Any) -> Any:
    cost.meter.charge(2 * shallow(text))
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


def _sorted(seq: Any, *, key: Any = None, by: Any = None, reverse: Any = False) -> list[Any]:
    """``sorted(seq, by="field", reverse=True)``: maps sorted by one field, no lambda needed.

    Without ``by`` it is Python's ``sorted``. Ties keep their order (the sort is stable).
    """
    if not isinstance(reverse, bool):
        raise ExpressionError(f"sorted()'s reverse= is true or false, got {reverse!r}")
    if by is None:
        return sorted(seq, key=key, reverse=reverse)
    if key is not None:
        raise ExpressionError("sorted() takes by= or key=, not both")
    if not isinstance(by, str):
        raise ExpressionError(
            "sorted(by=…) names a field of the maps as a quoted string,"
            f' e.g. by="score"; got {by!r}'
        )
    items = list(seq)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ExpressionError(
                f"sorted(by={by!r}) sorts maps; member {i} is {type(item).__name__} {item!r:.60}"
            )
        if by not in item:
            keys = ", ".join(map(str, list(item)[:5]))
            raise ExpressionError(
                f"sorted(by={by!r}): member {i} has no key {by!r} (its keys: {keys or 'none'})"
            )
    try:
        return sorted(items, key=operator.itemgetter(by), reverse=reverse)
    except TypeError:
        kinds = sorted({type(item[by]).__name__ for item in items})
        raise ExpressionError(
            f"sorted(by={by!r}): the {by!r} values cannot be compared ({' and '.join(kinds)});"
            " make them all numbers or all texts"
        ) from None


def _enumerate(items: Any, start: Any = 0) -> list[tuple[int, Any]]:
    """``enumerate(xs, 1)`` as a list of (number, member) pairs: a numbered top three
    (``[str(n) + '. ' + e['name'] for n, e in enumerate(top('points', 3), 1)]``)."""
    if isinstance(start, bool) or not isinstance(start, int):
        raise ExpressionError(f"enumerate()'s start must be a whole number, got {start!r}")
    return list(enumerate(items, start))


def _function(name: str, fn: Callable[..., Any], price: Callable[..., int]) -> Any:
    """A built-in as expressions see it: charged before it runs and for what it built."""

    def call(*args: Any, **kwargs: Any) -> Any:
        meter = cost.meter
        meter.charge(CALL_COST + price(*args, **kwargs))
        result = fn(*args, **kwargs)
        meter.charge(built(result))
        return result

    call.__name__ = call.__qualname__ = name
    return call


_COSTS: dict[str, tuple[Callable[..., Any], Callable[..., int]]] = {
    "len": (len, _free), "bool": (bool, _free), "abs": (abs, _flat), "float": (float, _flat),
    "int": (int, _int_cost), "round": (round, _round_cost), "str": (str, _str_cost),
    "sorted": (_sorted, _sorting), "json_loads": (_json_loads, _free),
    "random": (draws.random_, _draws(_one)), "randint": (draws.randint, _draws(_one, _flat)),
    "choice": (draws.choice, _draws(_one)),
    "sample": (draws.sample, _draws(lambda seq, k: min(int(k), len(seq)), _walking("sample"))),
    "shuffled": (draws.shuffled, _draws(len, _walking("shuffled"))),
    "top": (ranks.top, _free), "rank_of": (ranks.rank_of, _free),
    "enumerate": (_enumerate, _walking("enumerate")),
    "set": (set, _set_cost), "dict": (dict, _dict_cost),
    **{name: (fn, _walking(name)) for name, fn in {
        "min": min, "max": max, "any": any, "all": all, "list": list,
        "tuple": tuple, "sum": _sum, "json_dumps": _json_dumps}.items()},
}  # fmt: skip
FUNCTIONS: dict[str, Any] = {name: _function(name, *pair) for name, pair in _COSTS.items()}


def call_hint(name: str) -> str | None:
    """For a function's name read as a value (``random``, ``{random}``): how to call it
    (``random is a function: call it, random()``); None for any other name."""
    if name not in FUNCTIONS:
        return None
    return f"{name} is a function: {ranks.USAGE.get(name, f'call it, {name}()')}"


# -- methods -----------------------------------------------------------------------------


class BoundMethod:
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
        meter = cost.meter
        owner, name = self.owner, self.name
        if isinstance(owner, str) and name in ("join", "replace"):
            if kwargs:
                raise ExpressionError(f".{name}() takes no keyword arguments here")
            args = _check_amplification(owner, name, list(args))
        else:
            meter.charge(CALL_COST + _method_cost(owner, name, args, kwargs))
        result = self.fn(*args, **kwargs)
        meter.charge(built(result))
        return result


def _method_cost(owner: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if isinstance(owner, (str, bytes)):
        return len(owner) + sum(map(shallow, args)) + sum(map(shallow, kwargs.values()))
    if isinstance(owner, (list, tuple)):
        if name in ("count", "index"):  # compares members: as deep as the list
            return cost_of(owner) + (cost_of(args[0]) if args else 0)
        return len(owner) * ITEM_COST
    if isinstance(owner, dict):
        if name == "copy":
            return len(owner) * ITEM_COST
        return cost_of(args[0]) if name == "get" and args else 0
    return 0


def _check_amplification(owner: str, method: str, args: list[Any]) -> tuple[Any, ...]:
    """Size (and charge) ``.join``/``.replace`` before they build anything."""
    cost.meter.charge(CALL_COST + len(owner))
    size = 0
    if method == "join" and args:
        parts = list(args[0]) if not isinstance(args[0], (str, list, tuple)) else args[0]
        args[0] = parts
        cost.meter.charge(len(parts) * ITEM_COST)
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
    cost.meter.charge(size)
    return tuple(args)


# -- the evaluator -----------------------------------------------------------------------
