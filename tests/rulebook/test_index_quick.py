"""TriggerIndex.quick (the engine's direct call of the index's first way) and the Match
:meth:`Side.best` builds field by field: the same answers and objects as
:meth:`TriggerIndex.match` and Match's own ``__init__``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tmy.executors import default_registry
from tmy.rulebook.index import TriggerIndex
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rulebook
from tmy.rulebook.triggers import Match, question_after

PLAIN = """
rules:
  - id: exact
    triggers: ["hours", "Opening Hours"]
    steps: [{plugin: ADJUST, input: a}]
  - id: word
    triggers: ["kw *", "kw5 *"]
    steps: [{plugin: ADJUST, input: b}]
  - id: long
    triggers: ["when open*", "when*"]
    steps: [{plugin: ADJUST, input: c}]
  - id: top
    priority: 5
    triggers: ["wh*"]
    steps: [{plugin: ADJUST, input: d}]
"""


def load(text: str) -> Rulebook:
    return load_sources([(Path("rules.yaml"), text)], default_registry())


@pytest.mark.parametrize(
    "extra",
    [
        '["re:^x+$"]',
        '["*inside*"]',
        '["*tail"]',
        '["*"]',
    ],
)
def test_quick_is_none_unless_every_trigger_is_a_folded_exact_or_prefix(extra: str) -> None:
    assert load(PLAIN).index.quick is not None
    more = (
        PLAIN + f"  - id: rare\n    triggers: {extra}\n    steps: [{{plugin: ADJUST, input: e}}]\n"
    )
    assert load(more).index.quick is None
    sensitive = (
        PLAIN
        + '  - id: cs\n    case_sensitive: true\n    triggers: ["ABC"]\n'
        + "    steps: [{plugin: ADJUST, input: f}]\n"
    )
    assert load(sensitive).index.quick is None


@pytest.mark.parametrize(
    "text",
    [
        "hours",
        "  HOURS  ",
        "opening hours",
        "kw hello there",
        "kw5  x",
        "kw5",
        "when open now?",
        "WHEN open",
        "whenever",
        "wh",
        "nothing",
        "",
        " ",
    ],
)
def test_quick_is_match_and_its_match_a_whole_one(text: str) -> None:
    index: TriggerIndex = load(PLAIN).index
    quick = index.quick
    assert quick is not None
    shown = text.strip()
    want = index.match(text)
    entry = quick(shown.casefold())
    if want is None:
        assert entry is None
        return
    assert entry is not None and (entry[1], entry[2]) == (want.rule, want.trigger)
    assert question_after(entry[2], shown.casefold(), shown) == want.question
    got = index.folded.best(shown.casefold(), shown)  # the Match of that entry, as made
    assert got == want
    built = Match(got.rule, got.trigger, got.magic, got.question, {})
    assert got == built and repr(got) == repr(built)
    assert got.magic == got.trigger.magic
    assert dataclasses.replace(got) == got
    assert [f.name for f in dataclasses.fields(got)] == [f.name for f in dataclasses.fields(built)]
    again = index.folded.best(shown.casefold(), shown)
    assert again is not got and again.groups is not got.groups  # a fresh dict per match
