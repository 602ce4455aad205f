"""Rules compiled as their file hands them over: the same rulebook as compiling them at the end.

The loader compiles each rule as soon as the reader has it (so its raw form is
freed before the next one is read) and keeps the raw form only when a variable
declared later could change the result (:func:`tmy.rulebook.closed.closed`).
Whatever the order of ``variables:`` and ``rules:``, in one file or across
files, the compiled rules, their errors and the order of those errors are what
compiling everything at the end gave.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tmy.errors import RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.closed import closed
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rulebook

VARIABLES = """
variables:
  hits: {scope: user, default: 0}
  seen: {scope: chat, default: []}
"""
RULES = """
rules:
  - id: count
    triggers: [count]
    steps:
      - plugin: ADJUST
        input: "?= hits + 1"
        save: hits
  - id: twice
    triggers: [twice]
    steps:
      - plugin: ADJUST
        input: "?= hits"
      - plugin: ADJUST
        input: "?= STEP_RESULT + 1"
        save: hits
  - id: remember
    triggers: ['remember *']
    steps:
      - plugin: ADJUST
        input: "{QUESTION}"
        save: last
      - plugin: ADJUST
        input: "?= seen + [last]"
        save: seen
  - id: plain
    triggers: [hello]
    steps:
      - plugin: ADJUST
        input: hi there
"""


def load(*files: tuple[str, str]) -> Rulebook:
    return load_sources(
        [(Path(name), textwrap.dedent(text)) for name, text in files], default_registry()
    )


def summary(rulebook: Rulebook) -> list[tuple]:
    """What the variables decide about each rule: locks, spans, prefetch, atomic updates."""
    return [
        (
            r.id,
            r.atomic_vars,
            r.atomic_span,
            r.prefetch,
            [(s.uri, s.lock_roots, s.atomic_update, s.constant is not None) for s in r.steps],
        )
        for r in rulebook.rules
    ] + [sorted(rulebook.locked_variables)]


@pytest.mark.parametrize(
    "files",
    [
        [("a.yaml", RULES + VARIABLES)],  # declared after the rules, in the same file
        [("a.yaml", RULES), ("b.yaml", VARIABLES)],  # in a later file
        [("a.yaml", RULES.replace("rules:", "rules: &all", 1) + VARIABLES)],  # libyaml's path
    ],
    ids=["same file", "later file", "libyaml"],
)
def test_a_rule_read_before_its_variables_compiles_as_if_they_came_first(
    files: list[tuple[str, str]],
) -> None:
    first = load(("a.yaml", VARIABLES + RULES))
    assert summary(load(*files)) == summary(first)
    assert summary(first)[0][1] == ()  # count: one step reads and saves hits: its own lock
    assert summary(first)[0][4][0][1] == ("hits",)


def test_a_yaml_error_after_rules_were_handed_over_is_the_files_only_error() -> None:
    text = RULES.replace("plugin: ADJUST", "plugin: ADJUSTT", 1) + "tests: [x, y\n"
    with pytest.raises(RuleErrors) as info:
        load(("bad.yaml", text))
    assert len(info.value.errors) == 1, [str(e) for e in info.value.errors]
    assert "YAML syntax error" in str(info.value.errors[0])


def test_errors_come_in_file_order_whatever_was_compiled_early() -> None:
    text = """
    rules:
      - id: a
        triggers: [a]
        steps:
          - plugin: ADJUST
            input: "{later}"
      - id: b
        triggers: [b]
        steps:
          - plugin: ADJUSTT
      - id: c
        triggers: [c]
        steps:
          - plugin: ADJUST
            input: "{nothing}"
    variables:
      later: {default: 1}
    """
    with pytest.raises(RuleErrors) as info:
        load(("x.yaml", text))
    found = [(e.line, e.message.split(":")[0]) for e in info.value.errors]
    assert [line for line, _ in found] == sorted(line for line, _ in found)
    assert len(found) == 2  # 'later' is declared, below the rules: no error for rule a
    assert "nothing" in str(info.value.errors[1])


def test_a_duplicate_id_names_the_line_of_its_id() -> None:
    text = """
    rules:
      - id: a
        triggers: [a]
        steps: [{plugin: ADJUST, input: x}]
      - triggers: [b]
        enabled: false
        id: a
        steps:
          - plugin: ADJUST
            input: y
    """
    with pytest.raises(RuleErrors) as info:
        load(("d.yaml", text))
    (error,) = info.value.errors
    assert error.line == 8 and "duplicate rule id 'a' (first at d.yaml:3)" in str(error)


def test_a_file_the_line_reader_leaves_midway_loads_each_rule_once() -> None:
    text = RULES + "\nvariables: {hits: {scope: user, default: 0}, seen: {default: []}}\n"
    rulebook = load(("m.yaml", text))
    assert [r.id for r in rulebook.rules] == ["count", "twice", "remember", "plain"]
    assert rulebook.by_id["count"].steps[0].lock_roots == ("hits",)


def test_closed_rules_name_no_variable() -> None:
    rulebook = load(("a.yaml", VARIABLES + RULES))
    assert [closed(r) for r in rulebook.rules] == [False, False, False, True]
    (on_error,) = load(("b.yaml", """
        rules:
          - id: e
            triggers: [e]
            on_error: "failed for {USER_NAME}"
            steps: [{plugin: ADJUST, input: "{QUESTION}"}]
        """)).rules  # fmt: skip
    assert closed(on_error)  # run locals only: no declaration can change them
