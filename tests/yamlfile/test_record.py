"""read_record: a whole rule of the commonest shape in one match, or None (read line by line).
What it builds is held to libyaml's reading by test_fast_against_libyaml.py; here, when it
applies and what it gives."""

from __future__ import annotations

from tmy.yamlfile.lines import LineDict
from tmy.yamlfile.record import read_record

RULE = "  - id: r1\n    triggers: ['kw1*']\n    steps:\n      - plugin: ADJUST\n        input: ok\n"
PLAIN_FIRST = frozenset("abcdefghijklmrsuvwxz")  # as the reader's: no resolver starts so


def resolve(text: str) -> object:
    return {"yes": True, "12": 12}.get(text, text)


def test_a_rule_is_read_whole_with_its_lines() -> None:
    found = read_record(RULE + "  - id: r2\n", 0, 2, resolve, PLAIN_FIRST)
    assert found is not None
    rule, end = found
    assert end == len(RULE)
    assert rule == {
        "id": "r1",
        "triggers": ["kw1*"],
        "steps": [{"plugin": "ADJUST", "input": "ok"}],
    }
    assert (rule.line, rule.key_lines) == (2, {"id": 2, "triggers": 3, "steps": 4})
    assert (rule["triggers"].line, rule["triggers"].item_lines) == (3, [3])
    assert (rule["steps"].line, rule["steps"].item_lines) == (5, [5])
    step = rule["steps"][0]
    assert isinstance(step, LineDict) and (step.line, step.key_lines) == (
        5,
        {"plugin": 5, "input": 6},
    )


def test_plain_scalars_are_resolved() -> None:
    text = RULE.replace("r1", "12").replace("input: ok", "input: yes")
    rule, _ = read_record(text, 0, 1, resolve, PLAIN_FIRST)  # type: ignore[misc]
    assert rule["id"] == 12 and rule["steps"][0]["input"] is True


def test_anything_after_the_rule_but_the_next_rule_or_the_lists_end_reads_line_by_line() -> None:
    for after in ("    priority: 1\n", "\n", "  # c\n", "      - plugin: B\n"):
        assert read_record(RULE + after, 0, 1, resolve, PLAIN_FIRST) is None, after
    for after in ("", "  - id: r2\n", "tests:\n"):
        assert read_record(RULE + after, 0, 1, resolve, PLAIN_FIRST) is not None, after


def test_an_input_a_plain_scalar_cannot_be_read_alone_reads_line_by_line() -> None:
    for given in ("a: b", "a #b", "x:", "'q'", "[a]", "{a: 1}", "- x", "ok ", "*x", "|"):
        text = RULE.replace("input: ok", f"input: {given}")
        assert read_record(text, 0, 1, resolve, PLAIN_FIRST) is None, given
