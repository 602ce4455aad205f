"""The cost model of ``?=`` expressions: the size and time bounds that make every evaluation safe.

Evaluation runs on the event loop, where no timeout can interrupt it, so this
is what keeps one message from stalling every chat:

* a work budget per evaluation (:data:`MAX_COST` units, about 0.1 s of CPU),
  held by the running evaluation's :class:`Meter` (:data:`meter`). Every
  evaluated node costs :data:`NODE_COST`; every built-in, method and operator
  (:mod:`tmy.values.functions`, :mod:`tmy.values.operators`) is charged
  *before it runs* for the size of what it touches (characters, list and map
  members, digits of integers, comparisons of a sort) and after for what it
  built. Over budget is an error naming the expression;
* a wall-clock backstop (:data:`MAX_EVAL_SECONDS`) ends anything the cost model
  underrates;
* size bounds: results (and the arguments of walking built-ins) are bounded by
  :data:`MAX_RESULT_UNITS` as serialised (:func:`measure`, :func:`check_size`),
  strings and repetitions by :data:`MAX_STRING`, powers by :data:`MAX_EXPONENT`
  and :data:`MAX_POWER_BITS`, ``round`` by :data:`MAX_ROUND_DIGITS`, sets and
  maps by :data:`MAX_SHARED_HASH` values per hash (:func:`hash_flooding`).

tests/values/test_cost.py drives the attacks these bounds stop, without a server.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import simpleeval

from tmy.errors import ExpressionError

MAX_SOURCE = 10_000  # characters of one expression's source
MAX_STRING = simpleeval.MAX_STRING_LENGTH  # 100,000 characters
MAX_EXPONENT = 10_000
MAX_POWER_BITS = 100_000
MAX_ROUND_DIGITS = 1_000  # round(x, n) with |n| above this is refused (10**n is costly)
MAX_RESULT_UNITS = 1_000_000  # list members + map entries + characters, counted as serialised
MAX_SHARED_HASH = 64  # distinct set members / map keys with one hash value (hash flooding)

# -- the work budget ---------------------------------------------------------------------
# One unit is about 4 ns here: touching one character in C. The constants were
# measured on a 2-core server so that the worst thing an expression can do with
# the whole budget takes about 0.1 s (see tests/values/test_cost.py).
MAX_COST = 25_000_000  # units one evaluation may spend
NODE_COST = 150  # each evaluated syntax node (simpleeval walks the tree in Python)
CALL_COST = 300  # each call of a built-in or method (the metering wrapper itself)
ITEM_COST = 16  # each list/map member a built-in walks, compares, hashes or builds
CONTAINER_COST = 200  # each nested list/map a walk enters
MIXED_COST = 15  # more per member of a list that mixes kinds (measured one by one)
FLOAT_COST = 75  # a float written as text (its shortest repr)
SORT_COST = 3  # per member and comparison level of a sort (n * log2 n)
DRAW_COST = 750  # one random draw: about 3 µs from the system generator (os.urandom)
MAX_EVAL_SECONDS = 0.25  # wall-clock backstop, checked between nodes and calls


# -- measuring ---------------------------------------------------------------------------

FLAT = frozenset({bool, type(None)})
VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
SIZED = (dict, list, tuple, set, frozenset, *VIEWS)
SIZED_TYPES = frozenset(SIZED)


def words(n: int) -> int:
    """32-bit words of an integer: what arithmetic on it costs."""
    return n.bit_length() >> 5


def shallow(value: Any) -> int:
    """Units to touch ``value`` once: its characters, its members, its words."""
    t = type(value)
    if t is str or t is bytes:
        return len(value)
    if t is int:
        return value.bit_length() >> 5
    if t in SIZED_TYPES:
        return len(value) * ITEM_COST
    return 0


def built(value: Any) -> int:
    """Units for what a call built: a view of a map is free, a new list is not."""
    return 0 if type(value) in VIEWS else shallow(value)


def int_units(n: int) -> int:
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
            cost += int_units(item)
            continue
        if not isinstance(item, SIZED):
            continue
        n = len(item)
        members = 2 * n if isinstance(item, dict) else n  # a map's keys and values
        size += 1 + members
        cost += CONTAINER_COST + members * ITEM_COST
        if size > size_limit or cost > cost_limit:
            break
        for part in (item, item.values()) if isinstance(item, dict) else (item,):
            kinds = set(map(type, part))
            if kinds <= FLAT:
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
                        cost += sum(map(int_units, part))
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
                    cost += int_units(member)
                elif kind not in FLAT:
                    stack.append(member)
        if size > size_limit or cost > cost_limit:
            break
    return size, cost


def check_size(value: Any, source: str, budget: int = MAX_RESULT_UNITS) -> None:
    """Refuse values that would be huge once serialised (``[[1]*10000]*10000``);
    the walk is charged to the running evaluation."""
    kind = type(value)
    if kind in FLAT or kind is float or (kind is int and value.bit_length() < 97):
        return  # the common results: nothing to walk
    meter.charge(sized_cost(value, source, budget))


def sized_cost(value: Any, source: str, budget: int = MAX_RESULT_UNITS) -> int:
    """The cost of walking ``value``; an error when its size passes ``budget``."""
    size, cost = measure(value, budget, max(meter.left, 0) + 1)
    if size > budget:
        what = source if source.endswith("()") else f"expression {source!r}"
        raise ExpressionError(
            f"{what} produced or got a value that is too large"
            f" (more than {budget:,} members and characters)"
        )
    return cost


# -- the meter ---------------------------------------------------------------------------

_TICKS = 64  # nodes between two looks at the clock


class Meter:
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


IDLE = Meter("", sys.maxsize, math.inf)  # outside any evaluation: nothing to bound
meter = IDLE  # the running evaluation's meter (evaluation is synchronous)


def cost_of(value: Any, limit: int | None = None) -> int:
    """Cost of walking ``value``, stopping past ``limit`` or what is left of the budget."""
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value)
    if kind not in SIZED_TYPES:
        return int_units(value) if kind is int else FLOAT_COST if kind is float else 0
    left = max(meter.left, 0) + 1  # walking further than the budget is never needed
    return measure(value, sys.maxsize, left if limit is None else min(limit, left))[1]


def hash_flooding(keys: Any, where: str) -> int:
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


def begin(source: str) -> Meter:
    """Meter a new evaluation of ``source``; returns the meter to restore with :func:`end`."""
    global meter
    outer, meter = meter, Meter(source)
    return outer


def end(outer: Meter) -> None:
    """The evaluation begun with :func:`begin` is over: ``outer`` meters again."""
    global meter
    meter = outer
