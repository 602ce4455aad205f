"""read_yaml's sink: each rule of the top-level ``rules:`` handed over as soon as it is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.errors import RuleError
from tmy.yamlfile.source import HANDED_OVER, LineDict, read_yaml

RULES = (
    "rules:\n  - id: a\n    triggers: ['a']\n"
    "  - id: b\n    nested:\n      rules:\n        - id: x\n"
)
SHAPES = {
    "line reader": RULES,
    "libyaml": RULES + "anchored: &z [1]\n",
    "line reader, then libyaml": RULES + "later: |\n  a block scalar\n",
}


def read(text: str) -> tuple[object, list[object]]:
    calls: list[object] = []
    doc = read_yaml(Path("r.yaml"), text, calls.append)
    return doc, calls


@pytest.mark.parametrize("text", list(SHAPES.values()), ids=list(SHAPES))
def test_top_level_rules_are_handed_over_in_order(text: str) -> None:
    doc, calls = read(text)
    if None in calls:  # the line reader gave up midway: start again
        calls = calls[len(calls) - calls[::-1].index(None) :]
    assert [c["id"] for c in calls] == ["a", "b"]  # type: ignore[index]
    assert all(isinstance(c, LineDict) for c in calls)
    assert [c.line for c in calls] == [2, 4]  # type: ignore[union-attr]
    assert calls[1]["nested"]["rules"][0] == {"id": "x"}  # type: ignore[index]  # not top-level
    rules = doc["rules"]  # type: ignore[index]
    assert list(rules) == [HANDED_OVER, HANDED_OVER] and rules.item_lines == [2, 4]


def test_the_line_reader_restarts_the_sink_when_it_gives_up() -> None:
    _, calls = read(SHAPES["line reader, then libyaml"])
    assert calls[:2] != [None, None] and calls.count(None) == 1


def test_without_a_sink_rules_stay_in_the_document() -> None:
    doc = read_yaml(Path("r.yaml"), RULES)
    assert [r["id"] for r in doc["rules"]] == ["a", "b"]


def test_a_syntax_error_after_handed_rules_is_still_an_error() -> None:
    calls: list[object] = []
    with pytest.raises(RuleError) as err:
        read_yaml(Path("r.yaml"), RULES + "bad: [1\n", calls.append)
    assert err.value.line == 8
