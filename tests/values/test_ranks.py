"""``top()`` and ``rank_of()`` (tmy/values/ranks.py): the compile side finds the boards an
expression reads, the evaluation side asks the scope's ``leaderboard`` (CONTRACTS.md).

:class:`Run` is the contract's other side written plainly: a scope that serves
fetched boards the way the engine's ``Variables.leaderboard`` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tmy.errors import EvalError, ExpressionError
from tmy.values.compiled import Expression, compile_path, compile_value
from tmy.values.ranks import TOP_MAX

POINTS = [
    {"user": "carol", "name": "Carol", "value": 30},
    {"user": "ann", "name": "Ann", "value": 12},
    {"user": "bob", "name": None, "value": 12},
    {"user": "dave", "name": "Dave", "value": 2.5},
]


class Run(Mapping[str, Any]):
    """A run's scope with leaderboards: ``(top, rank)`` per ranked variable."""

    def __init__(self, boards: dict[str, tuple[list[dict[str, Any]], int | None]], **names: Any):
        self.boards = boards
        self.names = names
        self.asked: list[str] = []

    def leaderboard(self, name: str) -> tuple[list[dict[str, Any]], int | None]:
        self.asked.append(name)
        if name not in self.boards:
            raise EvalError(f"{name!r} is not a leaderboard: declare it with rank: true")
        return self.boards[name]

    def __getitem__(self, name: str) -> Any:
        return self.names[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def ev(source: str, scope: Any) -> Any:
    return compile_value("?= " + source).evaluate(scope)


def test_top_returns_the_first_n_entries_highest_first() -> None:
    run = Run({"points": (POINTS, 2)})
    assert ev('top("points", 3)', run) == POINTS[:3]
    assert ev('top("points", 0)', run) == []
    assert ev('top("points", 100)', run) == POINTS
    assert ev('[e["user"] for e in top("points", 2)]', run) == ["carol", "ann"]
    assert ev("rank_of('points')", run) == 2
    assert run.asked == ["points"] * 5


def test_rank_of_is_none_before_the_first_value() -> None:
    assert ev('rank_of("points")', Run({"points": ([], None)})) is None
    assert ev('rank_of("points") or "unranked"', Run({"points": (POINTS, None)})) == "unranked"


def test_top_gives_copies_the_expression_cannot_change_the_fetched_board() -> None:
    run = Run({"points": (POINTS, 1)})
    first = ev('top("points", 1)', run)
    first[0]["value"] = 999
    assert POINTS[0]["value"] == 30


def test_a_leaderboard_table_in_one_expression() -> None:
    run = Run({"points": (POINTS, 3)})
    rows = ev("[(e['name'] or e['user']) + ' ' + str(e['value']) for e in top('points', 3)]", run)
    assert rows == ["Carol 30", "Ann 12", "bob 12"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('top("points", 101)', f"top() returns at most {TOP_MAX}"),
        ('top("points", -1)', "top()'s count must be a whole number 0-100, got -1"),
        ('top("points", 2.5)', "top()'s count must be a whole number 0-100, got 2.5"),
        ('top("points", True)', "got True"),
        ('top("coins", 3)', "'coins' is not a leaderboard"),
        ('rank_of("coins")', "'coins' is not a leaderboard"),
    ],
)
def test_misuse_at_evaluation(source: str, message: str) -> None:
    with pytest.raises(EvalError) as caught:
        ev(source, Run({"points": (POINTS, 1)}))
    assert message in str(caught.value)


def test_a_scope_without_leaderboards_has_no_run_to_ask() -> None:
    with pytest.raises(EvalError, match=r"top\(\) needs a rule's run"):
        ev('top("points", 3)', {})
    with pytest.raises(EvalError, match=r"rank_of\(\) needs a rule's run"):
        ev('rank_of("points")', {"points": 3})


@pytest.mark.parametrize(
    "source",
    [
        "top(points, 3)",
        "top({name}, 3)",
        "top('points')",
        "top('points', 3, 4)",
        "top(name='points', n=3)",
        "rank_of(points)",
        "rank_of()",
        "[top][0]('points', 1)",
        "rank_of",
    ],
)
def test_the_name_must_be_a_quoted_string_at_load(source: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_value("?= " + source)
    text = str(caught.value)
    assert "takes the variable's name as a quoted string, e.g." in text


def test_boards_are_the_names_an_expression_reads_and_add_up_in_lists_maps_and_paths() -> None:
    expr = compile_value("?= [top('points', 3), rank_of('coins'), rank_of('points')]")
    assert isinstance(expr, Expression)
    assert expr.boards == frozenset({"points", "coins"})
    assert expr.names == frozenset()  # the board names are no variables read
    assert compile_value("?= len(xs)").boards == frozenset()
    for plain in ("hi", "{x}", "hi {x}", 3, [1, 2], {"a": 1}):
        assert compile_value(plain).boards == frozenset()
    nested = compile_value(
        {"a": ["?= top('points', 1)", "{x}"], "b": {"c": "?= rank_of('stars')"}, "d": 1}
    )
    assert nested.boards == frozenset({"points", "stars"})
    assert nested.names == frozenset({"x"})
    assert compile_path("?= 'best[' + top('points', 1)[0]['user'] + ']'").boards == {"points"}
    assert compile_path("scores[{USER}]").boards == frozenset()
    assert compile_path("scores[a]").boards == frozenset()


def test_a_literal_count_past_the_maximum_is_refused_when_the_rule_loads() -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_value("?= top('points', 1000)")  # no run needed: the count is written out
    assert f"top() returns at most {TOP_MAX}, not 1000" in str(caught.value)
