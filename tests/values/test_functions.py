"""Built-ins of expressions (tmy/values/functions.py): ``sorted(seq, by=…)`` for lists of
maps, and the hints for a lambda or a function's bare name."""

from __future__ import annotations

from typing import Any

import pytest

from tmy.errors import EvalError, ExpressionError
from tmy.values.compiled import compile_value

PEOPLE = [
    {"name": "ann", "score": 12},
    {"name": "bob", "score": 30},
    {"name": "carol", "score": 12},
    {"name": "dave", "score": 7},
]


def ev(source: str, **scope: Any) -> Any:
    return compile_value("?= " + source).evaluate(scope)


def test_sorted_by_a_field_ascending_and_reversed_ties_keep_their_order() -> None:
    names = "[p['name'] for p in sorted(people, by='score'{})]"
    assert ev(names.format(""), people=PEOPLE) == ["dave", "ann", "carol", "bob"]
    assert ev(names.format(", reverse=True"), people=PEOPLE) == ["bob", "ann", "carol", "dave"]
    assert ev("sorted(people, by='name', reverse=False)[0]", people=PEOPLE) == PEOPLE[0]
    assert ev("sorted(people, by='score')[:2]", people=PEOPLE) == [PEOPLE[3], PEOPLE[0]]
    assert PEOPLE[1]["name"] == "bob"  # the input list is not changed
    assert ev("sorted(m.values(), by='n')", m={"x": {"n": 2}, "y": {"n": 1}}) == [
        {"n": 1},
        {"n": 2},
    ]


def test_plain_sorted_and_its_other_arguments_still_work() -> None:
    assert ev("sorted([3, 1, 2])") == [1, 2, 3]
    assert ev("sorted([3, 1, 2], reverse=True)") == [3, 2, 1]
    assert ev("sorted(['bb', 'a', 'ccc'], key=len)") == ["a", "bb", "ccc"]
    assert ev("sorted('cab')") == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("sorted(people + [{'name': 'eve'}], by='score')",
         "sorted(by='score'): member 4 has no key 'score' (its keys: name)"),
        ("sorted([{}], by='score')", "member 0 has no key 'score' (its keys: none)"),
        ("sorted([{'score': 1}, 3], by='score')",
         "sorted(by='score') sorts maps; member 1 is int 3"),
        ("sorted([{'s': 1}, {'s': 'x'}], by='s')",
         "the 's' values cannot be compared (int and str); make them all numbers or all texts"),
        ("sorted(people, by=score)", "undefined variable 'score'"),
        ("sorted(people, by=1)", 'names a field of the maps as a quoted string, e.g. by="score"'),
        ("sorted(people, by='score', key=len)", "sorted() takes by= or key=, not both"),
        ("sorted(people, by='score', reverse='yes')",
         "sorted()'s reverse= is true or false, got 'yes'"),
    ],
)  # fmt: skip
def test_sorted_by_misuse_is_a_clear_error(source: str, message: str) -> None:
    with pytest.raises(EvalError) as caught:
        ev(source, people=PEOPLE)
    assert message in str(caught.value)


def test_a_lambda_is_refused_with_a_hint_to_sorted_by() -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_value("?= sorted(people, key=lambda p: p['score'], reverse=True)")
    assert str(caught.value) == (
        "lambdas are not allowed in expressions; to sort maps by a field write"
        ' sorted(seq, by="field") (reverse=True for the highest first)'
    )


@pytest.mark.parametrize(
    ("source", "hint"),
    [
        ("random", "random is a function: call it, random()"),
        ("random < 0.5", "random is a function: call it, random()"),
        ("{'x': choice}", "choice is a function: call it, choice()"),
        ("len + 1", "len is a function: call it, len()"),
        ("top", "top is a function: top() takes the variable's name as a quoted string,"
                ' e.g. top("points", 3)'),
    ],
)  # fmt: skip
def test_a_function_used_as_a_value_says_to_call_it_at_load(source: str, hint: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_value("?= " + source)
    assert str(caught.value) == hint


def test_a_function_handed_to_another_is_still_allowed() -> None:
    assert ev("sorted(['bb', 'a'], key=len)") == ["a", "bb"]
    assert ev("max(['bb', 'a', 'ccc'], key=len)") == "ccc"


def test_new_function_names_are_not_variable_names_in_expressions() -> None:
    """``names`` (what the engine fetches, what the loader checks) leaves them out."""
    expr = compile_value("?= [random(), randint(1, 6), choice(xs), sample(xs, 1), shuffled(xs)]")
    assert expr.names == frozenset({"xs"})


def test_call_hint_is_what_the_loader_says_for_a_function_s_name_in_a_template() -> None:
    """``input: "{random}"`` reads a variable named random; the rulebook asks call_hint."""
    from tmy.values.functions import call_hint

    assert call_hint("random") == "random is a function: call it, random()"
    assert call_hint("shuffled") == "shuffled is a function: call it, shuffled()"
    assert call_hint("rank_of") == (
        "rank_of is a function: rank_of() takes the variable's name as a quoted string,"
        ' e.g. rank_of("points")'
    )
    assert call_hint("points") is None


def test_enumerate_numbers_a_list_and_is_charged_for_its_walk() -> None:
    numbered = compile_value("?= [str(n) + '. ' + x for n, x in enumerate(xs, 1)]")
    assert numbered.evaluate({"xs": ["ann", "bob"]}) == ["1. ann", "2. bob"]
    assert compile_value("?= enumerate(xs)").evaluate({"xs": ["a"]}) == [(0, "a")]
    with pytest.raises(ExpressionError, match="start must be a whole number"):
        compile_value("?= enumerate(xs, 'a')").evaluate({"xs": []})
    with pytest.raises(ExpressionError):  # a walk past the cost budget is refused
        compile_value("?= enumerate(xs)").evaluate({"xs": list(range(3_000_000))})
