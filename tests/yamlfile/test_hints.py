"""hints.diagnose: a YAML syntax error names the line to fix and says how (one check per kind)."""

from __future__ import annotations

import pytest
import yaml

from tmy.yamlfile.hints import diagnose, message


def found(text: str) -> tuple[int | None, str, str]:
    for loader in (yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        try:
            yaml.load(text, Loader=loader)
        except yaml.MarkedYAMLError as exc:
            return diagnose(text, exc)
    raise AssertionError(f"{text!r} parsed")


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("a: 1\n\tb: 2\n", 2, "a tab character"),
        ('a: "x\nb: 2\n', 1, "unclosed quote"),
        ('a: "\\q"\n', 1, "in a double-quoted string"),
        ("a: [1, 2\nb: 3\n", 1, "unclosed '['"),
        ("a: **bold**\n", 1, "reads as an alias"),
        ("a: @x\n", 1, "a plain value cannot start with '@'"),
        ("a: b: c\n", 1, "a second ': ' on one line"),
        ("a:1\n  b: 2\n", 1, "a key without a space after ':'"),
        ("steps:\n  - plugin ADJUST\n    input: x\n", 2, "a list item that is neither"),
        ("a:\n  b: 1\n c: 2\n", 3, "inconsistent indentation"),
        ("a:\n  - x\n  y: 1\n", 3, "a mapping where a list item was expected"),
        ("a: 'x'y\n", 1, "unexpected text at column"),
    ],
)
def test_the_line_to_fix_and_what_is_wrong(text: str, line: int, what: str) -> None:
    at, said, hint = found(text)
    assert at == line and what in said, (at, said)
    assert hint


def test_message_puts_the_hint_on_its_own_line_with_its_place() -> None:
    assert message("bad", "fix it", "f.yaml:3") == "YAML syntax error: bad\nf.yaml:3: hint: fix it"
