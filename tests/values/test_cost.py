"""The expression cost model (tmy.values.cost), without a server.

Every attack the hardening issues (7 and its review) posted to a running daemon
is evaluated here directly: each must end with an error naming its expression
— "too costly" (the work budget) or "too large" (a size bound) — and never by
the wall-clock backstop, which these tests switch off. What the cost model
stops here it stops inside a daemon too (evaluation is the same call on the
event loop); tests/e2e/test_attacks.py keeps a few of them end to end to show
that the pings around them stay answered.

No test measures time: a work bound is shown by the error the meter raises,
and pytest-timeout bounds each test in case one ever runs away.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

from tmy.errors import EvalError, ExpressionError
from tmy.values import cost, expressions
from tmy.values.compiled import compile_value

pytestmark = pytest.mark.timeout(30)

HASH_MODULUS = 2**61 - 1  # hash(k * HASH_MODULUS) == 0 for every int k


@pytest.fixture(autouse=True)
def _no_backstop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the cost model may end an attack here, never the wall clock."""
    monkeypatch.setattr(cost, "MAX_EVAL_SECONDS", 3600.0)


def _refusal(source: str, scope: dict[str, Any] | None = None) -> str:
    """Evaluate ``?= source``; the ExpressionError it must end with, as text."""
    with pytest.raises(ExpressionError) as info:
        compile_value("?= " + source).evaluate(scope or {})
    message = str(info.value)
    assert "ran longer than" not in message, message  # the meter ended it, not the clock
    return message


# -- the attacks once posted to a running daemon (issue 7, defect 4) ------------------------
# (expression, the message argument QUESTION): each held the event loop for seconds before
# the cost model. The same list is in tests/e2e/test_attacks.py.
ATTACKS: list[tuple[str, str]] = [
    ("round(5, -int(QUESTION))", "20000000"),
    ("[len(sorted(QUESTION * 5)) for c in QUESTION]", "ab" * 5000),
    ("[len(sorted(QUESTION, key=QUESTION.count)) for c in QUESTION]", "x" * 3000),
    ("[len(sorted(QUESTION, key=str)) for c in QUESTION]", "x" * 3000),
    ("[len('.'.join(QUESTION * 5)) for c in QUESTION]", "x" * 10000),
    ("[len(str(10 ** 4000)) for c in QUESTION]", "x" * 10000),
    ("[str(int(QUESTION)) + str(int(QUESTION)) for c in QUESTION][0][:5]", "7" * 4000),
    ("[max(QUESTION * 10) for c in QUESTION]", "x" * 10000),
    ("[len((QUESTION * 10).replace('x', 'yz')) for c in QUESTION]", "x" * 5000),
    (
        "[n in h for n in ['a' * 49999 + 'b'] for h in [QUESTION * 10] for c in QUESTION]",
        "a" * 9990,
    ),
    ("[len(json_loads('[' + '1,' * 49998 + '1]')) for c in QUESTION]", "x" * 5000),
    ("[(2 ** 9999) ** 10 // ((2 ** 9999) ** 5 - 1) > 0 for c in QUESTION]", "x" * 5000),
    ("[sum([(2 ** 9999) ** 10] * 9999) > 0 for c in QUESTION]", "x" * 300),
    ("[len(str(list(QUESTION * 10))) for c in QUESTION]", "x" * 3000),
    ("[len(json_dumps(list(QUESTION * 10))) for c in QUESTION]", "x" * 3000),
    ("[len(set(QUESTION.split(' ') * 10)) for c in QUESTION]", "a " * 2000),
    (
        "[x == y for x in [[[1] * 1000 for i in QUESTION]] "
        "for y in [[[1] * 1000 for i in QUESTION]] for c in QUESTION * 7]",
        "x" * 1000,
    ),
    ("[len((QUESTION * 10).splitlines()) for c in QUESTION]", "a\n" * 4999),
    ("[(QUESTION * 10).split('x').count('') for c in QUESTION]", "x" * 5000),
    ("[len((QUESTION * 10).title()) for c in QUESTION]", "x" * 9999),
]


@pytest.mark.parametrize(("expr", "question"), ATTACKS, ids=lambda v: str(v)[:40])
def test_each_daemon_attack_is_ended_by_the_cost_model(expr: str, question: str) -> None:
    message = _refusal(expr, {"QUESTION": question})
    assert expr in message, message
    assert "too costly" in message or "too large" in message, message


def test_a_set_of_integers_sharing_one_hash_is_refused_before_it_is_built() -> None:
    """The upstream's 40,000 integers that all hash alike (tests/e2e/test_attacks.py): set()
    of them was one quadratic C call (~6 s) no budget check could interrupt."""
    colliding = [k * HASH_MODULUS for k in range(1, 40_001)]
    message = _refusal("len(set(STEP_RESULT))", {"STEP_RESULT": colliding})
    assert "too costly" in message and "share one hash" in message
    fewer = colliding[:5000]  # simpleeval bounds a comprehension at 10,000 elements
    message = _refusal("len({k: 1 for k in L})", {"L": fewer})
    assert "a map comprehension" in message
    message = _refusal("len(dict([[k, 1] for k in L]))", {"L": fewer})
    assert "dict()" in message


# -- the other shapes of attack: powers, repeats, nesting, huge strings ----------------------


@pytest.mark.parametrize(
    "source",
    [
        "2 ** 99999",  # an exponent past MAX_EXPONENT
        "9 ** 9999 ** 2",
        "(2 ** 9999) ** 20",  # a result past MAX_POWER_BITS
        "[c*c for c in [b*b for b in [a*a for a in [9**9999]]]][0] > 0",  # repeated squaring
        "(10 ** 10000) * (10 ** 10000) * (10 ** 10000) * (10 ** 10000) * (10 ** 10000)",
    ],
)
def test_big_powers_and_products_are_refused(source: str) -> None:
    message = _refusal(source)
    assert "too large" in message or "too costly" in message, message


@pytest.mark.parametrize(
    "source",
    [
        "'x' * 10 ** 9",
        "[1] * 10 ** 9",
        "('ab' * 50000) * 3",
        "'-'.join(['x' * 50000] * 3)",
        "('x' * 50000).replace('x', 'yyy')",
        "[[1] * 10000] * 10000",  # small to build, huge once serialised
        "{'k': [[1] * 1000] * 1000}",
        "json_loads('[' + '[1,1,1,1,1,1,1,1,1,1],' * 9999 + '1]') * 20",
    ],
)
def test_repeats_and_huge_strings_are_refused_before_they_are_built(source: str) -> None:
    assert "too large" in _refusal(source)


@pytest.mark.parametrize(
    "source",
    [
        "[[[a + b + c for c in X] for b in X] for a in X]",  # nested comprehensions
        "[sorted(X) for a in X for b in X]",
        "len([1 for a in X for b in X for c in X])",
        "any([x in Y for x in Y])",
    ],
)
def test_nested_comprehensions_run_out_of_budget(source: str) -> None:
    """Stopped by the budget, or first by simpleeval's own bound on a comprehension."""
    scope = {"X": list(range(300)), "Y": list(range(20000))}
    message = _refusal(source, scope)
    assert re.search("too costly|too large|too many elements", message), message


@pytest.mark.parametrize(
    "source",
    ["-" * 9000 + "1", "not " * 2000 + "1", "(" * 300 + "1" + ")" * 300, "x" * 10_001],
)
def test_deep_nesting_and_long_source_are_errors_not_crashes(source: str) -> None:
    with pytest.raises(ExpressionError, match=r"nested too deeply|syntax error|characters long"):
        expressions.evaluate(expressions.parse_expression(source), source, {}, {})


@pytest.mark.parametrize(
    "source",
    [
        "'x'.center(10**8)",
        "'x'.ljust(10**8)",
        "'x'.zfill(10**8)",
        "'{:>99999999}'.format(1)",
        "format(1, '>99999999')",
        "f'{1:>99999999}'",
        "'%99999999d' % 1",
        "'x'.translate({120: 'y' * 99999})",
        "round(5, -10**9)",
    ],
)
def test_widths_from_the_expression_are_unreachable_or_bounded(source: str) -> None:
    with pytest.raises(ExpressionError):
        compile_value("?= " + source).evaluate({})


def test_ordinary_work_stays_well_inside_the_budget() -> None:
    scope = {"nums": list(range(9999)), "words": [f"w{i}" for i in range(5000)]}
    value = compile_value("?= [len(sorted(words)), sum(nums), len(set(words)), 2 ** 9999 % 7]")
    assert value.evaluate(scope) == [5000, sum(range(9999)), 5000, 2**9999 % 7]


# -- the model's parts --------------------------------------------------------------------


def test_measure_counts_members_and_characters_as_serialised() -> None:
    assert cost.measure("abc")[0] == 3
    assert cost.measure([1, 2, 3])[0] == 1 + 3  # the list, its members
    assert cost.measure({"a": "xy"})[0] == 1 + 2 + 1 + 2  # the map, key and value, 'a', 'xy'
    shared = ["x" * 10] * 10
    assert cost.measure([shared, shared])[0] == 1 + 2 + 2 * (1 + 10 + 100)  # counted each time


def test_measure_stops_once_past_its_limits() -> None:
    huge = [[1] * 10_000] * 10_000
    size, _ = cost.measure(huge, size_limit=50_000)
    assert 50_000 < size < 100_000  # stopped a list or two past the limit, not at 10**8
    _, spent = cost.measure(huge, cost_limit=1_000_000)
    assert 1_000_000 < spent < 2_000_000


def test_check_size_refuses_past_the_result_bound_and_names_the_source() -> None:
    cost.check_size([1] * 1000, "small")
    with pytest.raises(ExpressionError, match=r"expression 'big' .*too large"):
        cost.check_size([[1] * 2000] * 1000, "big")
    with pytest.raises(ExpressionError, match=r"^json_loads\(\) produced"):
        cost.check_size("x" * (cost.MAX_RESULT_UNITS + 1), "json_loads()")


def test_a_meter_raises_once_its_budget_is_spent() -> None:
    meter = cost.Meter("work", budget=1000, seconds=3600)
    meter.charge(999)
    meter.tick()
    with pytest.raises(ExpressionError, match="'work' is too costly: it needs more than"):
        meter.charge(2)


def test_a_late_meter_stops_whatever_runs_next() -> None:
    meter = cost.Meter("slow", seconds=-1.0)  # its deadline has passed
    with pytest.raises(ExpressionError, match="ran longer than"):
        meter.tick()
    assert meter.left < 0  # the next charge raises too, even a small one
    with pytest.raises(ExpressionError, match="too costly"):
        meter.charge(1)


def test_the_wall_clock_backstop_ends_what_the_budget_would_allow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cost, "MAX_EVAL_SECONDS", 0.0)
    with pytest.raises(ExpressionError, match="ran longer than"):
        compile_value("?= [c for c in 'x' * 1000]").evaluate({})


def test_each_evaluation_has_its_own_meter_and_restores_the_idle_one() -> None:
    assert cost.meter is cost.IDLE
    with pytest.raises(ExpressionError):
        compile_value("?= len(sorted('ab' * 50000 * 2))").evaluate({})
    assert cost.meter is cost.IDLE  # restored after a failure too
    assert compile_value("?= len(sorted(x))").evaluate({"x": "ab" * 40000}) == 80000
    assert cost.meter is cost.IDLE and cost.IDLE.left > sys.maxsize // 2


def test_begin_and_end_nest() -> None:
    outer = cost.begin("outer")
    first = cost.meter
    inner = cost.begin("inner")
    assert inner is first and cost.meter.source == "inner"
    cost.end(inner)
    assert cost.meter is first
    cost.end(outer)
    assert cost.meter is cost.IDLE


def test_hash_flooding_counts_distinct_values_per_hash() -> None:
    assert cost.hash_flooding([1, 2, 3], "set()") == 3
    assert cost.hash_flooding(["a"] * 1000, "set()") == 0  # strings hash randomly: skipped
    repeats = [HASH_MODULUS] * 10_000  # one value many times: no flooding
    assert cost.hash_flooding(repeats, "set()") == 10_000 * cost.MAX_SHARED_HASH
    flood = [k * HASH_MODULUS for k in range(1, cost.MAX_SHARED_HASH + 2)]
    with pytest.raises(ExpressionError, match="share one hash"):
        cost.hash_flooding(flood, "set()")


def test_undefined_names_are_eval_errors_not_cost_errors() -> None:
    with pytest.raises(EvalError, match="undefined variable 'nope'"):
        compile_value("?= nope + 1").evaluate({})
