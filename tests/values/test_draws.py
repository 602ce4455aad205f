"""The random functions of expressions (tmy/values/draws.py): each draw comes from
``randomness.current()``, so a seed pins it; misuse is a clear ExpressionError.

Expected values are computed with ``random.Random(seed)`` directly: under
``seeded(seed)`` an expression draws exactly what that generator draws.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tmy.errors import EvalError, ExpressionError
from tmy.values import randomness
from tmy.values.compiled import compile_value


def ev(source: str, scope: dict[str, Any] | None = None, seed: int | None = 42) -> Any:
    with randomness.seeded(seed):
        return compile_value("?= " + source).evaluate(scope or {})


def test_each_function_draws_what_the_seeded_generator_draws() -> None:
    rng = random.Random(42)
    xs = ["a", "b", "c", "d", "e"]
    order = list(xs)
    want_random = rng.random()
    want_randint = rng.randint(1, 6)
    want_choice = rng.choice(xs)
    want_sample = rng.sample(xs, 3)
    rng.shuffle(order)
    got = ev("[random(), randint(1, 6), choice(xs), sample(xs, 3), shuffled(xs)]", {"xs": xs})
    assert got == [want_random, want_randint, want_choice, want_sample, order]
    assert xs == ["a", "b", "c", "d", "e"]  # shuffled returns a new list; xs is unchanged


def test_the_same_seed_draws_the_same_and_another_seed_differs() -> None:
    source = "[randint(1, 1000000) for x in [1, 2, 3, 4, 5]]"
    first = ev(source, seed=42)
    assert ev(source, seed=42) == first
    assert ev(source, seed=43) != first
    assert len(first) == 5 and all(1 <= n <= 1_000_000 for n in first)


def test_without_a_seed_the_system_generator_draws() -> None:
    assert randomness.current() is randomness._SYSTEM
    drawn = {ev("randint(1, 10**12)", seed=None) for _ in range(5)}
    assert len(drawn) > 1  # five 40-bit draws alike: once in 2**160


def test_draw_ranges() -> None:
    with randomness.seeded(1):
        expr = compile_value("?= [randint(3, 5), random(), choice('xyz'), sample([1, 2], 2)]")
        for _ in range(200):
            n, r, c, s = expr.evaluate({})
            assert 3 <= n <= 5 and 0 <= r < 1 and c in "xyz" and sorted(s) == [1, 2]
    assert ev("randint(7, 7)") == 7
    assert ev("sample([1, 2, 3], 0)") == []
    assert ev("shuffled([])") == []
    assert ev("choice((1,))") == 1


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("choice([])", "choice() of an empty list: check it first"),
        ("choice('')", "choice() of an empty list"),
        ("choice({'a': 1})", "choice() takes a list, got a map: draw from list(m)"),
        ("choice({1, 2})", "choice() takes a list, got a set: draw from sorted(s)"),
        ("choice(5)", "choice() takes a list (or a text), got int"),
        ("sample([1, 2, 3], 4)", "sample() of 4 from 3 members: the count must be between 0"),
        ("sample([1, 2, 3], -1)", "sample() of -1 from 3 members"),
        ("sample([1], 1.5)", "sample()'s count must be a whole number, got 1.5"),
        ("randint(6, 1)", "randint(6, 1): the first bound must not exceed the second"),
        ("randint(1, 'x')", "randint()'s second bound must be a whole number, got 'x'"),
        ("randint(True, 3)", "randint()'s first bound must be a whole number, got True"),
        ("shuffled(3)", "shuffled() takes a list (or a text), got int"),
    ],
)
def test_misuse_is_a_clear_error(source: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ev(source)


def test_sample_and_shuffled_are_charged_for_walking_their_input() -> None:
    """They walk the whole list: a list past the size bound is refused like sorted's."""
    with pytest.raises(EvalError, match="too large"):
        ev("shuffled(xs)", {"xs": list(range(1_100_000))})
    with pytest.raises(EvalError, match="too large"):
        ev("sample(xs, 1)", {"xs": list(range(1_100_000))})
    with pytest.raises(EvalError, match="too costly"):  # 3,000 shuffles of 10,000: over budget
        ev("[len(shuffled(xs)) for i in ns]", {"xs": list(range(10_000)), "ns": [0] * 3000})


def test_each_draw_is_charged_what_a_draw_from_the_system_generator_costs() -> None:
    """About 3 µs each (os.urandom): the budget allows some 30,000 draws, not millions."""
    from tmy.values.cost import DRAW_COST, MAX_COST

    allowed = MAX_COST // DRAW_COST
    assert 10_000 < allowed < 50_000
    assert len(ev("shuffled(xs)", {"xs": list(range(allowed // 2))})) == allowed // 2
    for source in ("shuffled(xs)", "sample(xs, len(xs))"):
        with pytest.raises(EvalError, match="too costly"):
            ev(source, {"xs": list(range(allowed + 1000))})
    assert len(ev("sample(xs, 3)", {"xs": list(range(allowed * 2))})) == 3  # 3 draws, one copy
    with pytest.raises(ExpressionError, match="sample\\(\\) of 1000000000 from 3 members"):
        ev("sample([1, 2, 3], 10**9)")  # a huge count is the clear error, not "too costly"


def test_every_draw_is_noted_for_explain() -> None:
    heard: list[tuple[str, Any]] = []
    with randomness.recording(lambda call, value: heard.append((call, value))):
        got = ev("[randint(1, 6), choice(['a', 'b']), sample(xs, 2), shuffled(xs)]", {"xs": [1, 2]})
    assert heard == [
        ("randint(1, 6)", got[0]),
        ("choice(['a', 'b'])", got[1]),
        ("sample([1, 2], 2)", got[2]),
        ("shuffled([1, 2])", got[3]),
    ]
    heard.clear()
    ev("choice(xs)", {"xs": list(range(100))})  # outside the recording: nothing heard
    assert heard == []
    with randomness.recording(lambda call, value: heard.append((call, value))):
        ev("choice(xs)", {"xs": list(range(100))})
    assert heard[0][0] == "choice(<a list of 100>)"  # a long argument is described, not shown


def test_a_draw_from_a_huge_list_is_described_without_walking_it() -> None:
    """The description explain shows is bounded work: a stored list of 800,000 members, or
    a short list of huge members, is named by its size, never repr()'d whole."""
    from tmy.values.draws import _brief

    assert _brief(list(range(800_000))) == "<a list of 800000>"
    assert _brief("x" * 1_000_000) == "<a text of 1000000 characters>"
    nested = [["y" * 1_000_000] * 3, {"k": "z" * 1_000_000}]
    assert len(_brief(nested)) <= 60
    heard: list[str] = []
    with randomness.seeded(1), randomness.recording(lambda call, value: heard.append(call)):
        compile_value("?= choice(xs)").evaluate({"xs": list(range(800_000))})
    assert heard == ["choice(<a list of 800000>)"]
