"""A function's name read as a variable in a template (``{random}``): the load error says to
call it in a ``?=`` expression, not to declare it."""

from __future__ import annotations

import pytest

from tests.rulebook.test_loader import assert_at, only_error


@pytest.mark.parametrize(
    ("ref", "call"),
    [
        ("random", "random is a function: call it, random()"),
        ("shuffled", "shuffled is a function: call it, shuffled()"),
        ("top", 'top() takes the variable\'s name as a quoted string, e.g. top("points", 3)'),
    ],
)
def test_a_function_read_in_a_template_says_to_call_it(ref: str, call: str) -> None:
    text = f"""
        rules:
          - id: roll
            triggers: [roll]
            steps:
              - plugin: ADJUST
                input: "you rolled {{{ref}}}"
    """
    error = only_error(text)
    assert_at(error, text, "input:", f"reads {ref!r}", call, "inside a ?= expression")
    assert "declare it" not in str(error)


def test_an_unset_variable_still_says_to_declare_it() -> None:
    text = """
        rules:
          - id: roll
            triggers: [roll]
            steps:
              - plugin: ADJUST
                input: "you rolled {rolled}"
    """
    assert_at(only_error(text), text, "input:", "'rolled'", "declare it under 'variables:'")
