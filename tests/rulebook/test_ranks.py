"""``rank: true`` declarations, top()/rank_of() names, and seed 004's INPUT expression
written without ``?=``: refused at load time with the file, the line and the fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.rulebook.test_loader import assert_at, only_error
from tests.support.processes import rules_file, run_tmy
from tmy.errors import RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rulebook
from tmy.testing import Bot


def load(text: str) -> Rulebook:
    return load_sources([(Path("ok.yaml"), textwrap.dedent(text))], default_registry())


def test_rank_true_on_a_user_scoped_number_is_kept() -> None:
    book = load("""
        variables:
          points: {scope: user, default: 0, rank: true}
          coins: {scope: user, rank: true}
          plain: {scope: user, default: 0}
    """)
    assert book.variables["points"].rank is True
    assert book.variables["coins"].rank is True
    assert book.variables["plain"].rank is False


@pytest.mark.parametrize("scope", ["global", "chat"])
def test_rank_true_needs_scope_user(scope: str) -> None:
    text = f"""
        variables:
          points:
            scope: {scope}
            default: 0
            rank: true
    """
    error = only_error(text)
    assert_at(error, text, f"scope: {scope}", "'points'", "rank: true", "scope: user")


def test_rank_true_without_a_scope_names_the_rank_line() -> None:
    text = """
        variables:
          points:
            default: 0
            rank: true
    """
    assert_at(only_error(text), text, "rank: true", "scope: user", "it is global")


@pytest.mark.parametrize("default", ['"0"', "true", "[]", "{a: 1}"])
def test_rank_true_needs_a_numeric_default(default: str) -> None:
    text = f"""
        variables:
          points:
            scope: user
            default: {default}
            rank: true
    """
    assert_at(only_error(text), text, "default:", "'points'", "needs a number", "default: 0")


def test_rank_must_be_a_boolean() -> None:
    text = """
        variables:
          points:
            scope: user
            rank: "yes"
    """
    assert_at(only_error(text), text, "rank:", "'rank' must be true or false")


def test_declared_again_with_another_rank_is_refused() -> None:
    first = "variables:\n  points: {scope: user, default: 0, rank: true}\n"
    again = "variables:\n  points: {scope: user, default: 0}\n"
    with pytest.raises(RuleErrors) as info:
        load_sources([(Path("a.yaml"), first), (Path("b.yaml"), again)], default_registry())
    assert [str(e) for e in info.value.errors] == [
        "b.yaml:2: variable 'points' is declared again differently (first at a.yaml:2)"
    ]


def test_top_of_a_variable_that_is_not_ranked_is_a_load_error() -> None:
    text = """
        variables:
          points: {scope: user, default: 0}
        rules:
          - id: board
            triggers: [top]
            steps:
              - plugin: ADJUST
                input: "?= top('points', 3)"
    """
    error = only_error(text)
    assert_at(error, text, "input:", "'points'", "not a leaderboard", "rank: true")
    assert "declared at bad.yaml:3" in str(error)


def test_rank_of_an_undeclared_name_suggests_the_ranked_one() -> None:
    text = """
        variables:
          points: {scope: user, default: 0, rank: true}
        rules:
          - id: board
            triggers: [me]
            steps:
              - plugin: ADJUST
                input: "?= rank_of('pionts')"
    """
    assert_at(only_error(text), text, "input:", "'pionts'", "points", "rank: true")


def test_top_in_a_cooldown_reply_is_checked_too() -> None:
    text = """
        rules:
          - id: board
            triggers: [top]
            cooldown: {seconds: 5, reply: "?= top('nope', 1)"}
            steps:
              - plugin: ADJUST
                input: hi
    """
    assert_at(only_error(text), text, "cooldown:", "'nope'", "rank: true")


# -- seed 004: INPUT computed by an expression --------------------------------------------

SEED_INPUT = "'words[list][0]' if {words[list_size]!r} else 'EMPTY_STR'"

SEED_RULES = """
variables:
  words: {scope: global, default: {list: [alpha, beta], list_size: 2}}
rules:
  - id: first-word
    triggers: [first]
    steps:
      - plugin: ADJUST
        INPUT: "%s"
"""


def test_seed_004_input_expression_without_the_prefix_says_to_add_it() -> None:
    text = SEED_RULES % SEED_INPUT
    error = only_error(text)
    fixed = f'INPUT: "?= {SEED_INPUT}"'
    assert_at(error, text, "INPUT:", "reads as an expression", "start it with ?=", fixed)


def test_a_save_expression_without_the_prefix_says_so_too() -> None:
    text = """
        rules:
          - id: a
            triggers: [x]
            steps:
              - plugin: ADJUST
                save: "'a' if QUESTION else 'b'"
    """
    assert_at(only_error(text), text, "save:", """save: "?= 'a' if QUESTION else 'b'\"""")


def test_a_broken_position_that_is_no_expression_gets_no_prefix_hint() -> None:
    text = """
        rules:
          - id: a
            triggers: [x]
            steps:
              - plugin: ADJUST
                save: "a b["
    """
    error = only_error(text)
    assert "?=" not in str(error), str(error)


async def test_seed_004_input_expression_with_the_prefix_works_as_the_seed_says() -> None:
    rules = SEED_RULES % SEED_INPUT.replace("'words", "?= 'words", 1)
    async with Bot({"seed.yaml": rules}) as bot:
        assert await bot.say("first") == "alpha"


@pytest.mark.slow
def test_check_prints_the_fix_for_the_seed_example(tmp_path: Path) -> None:
    path = rules_file(tmp_path, "seed.yaml", SEED_RULES % SEED_INPUT)
    done = run_tmy(tmp_path, "--rules", str(path), "check")
    assert done["rc"] == 1
    said = done["out"] + done["err"]
    assert f"{path}:9: rule 'first-word' step 0: 'INPUT'" in said
    assert f'start it with ?= — INPUT: "?= {SEED_INPUT}"' in said
