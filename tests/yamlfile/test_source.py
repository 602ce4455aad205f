"""source.read_yaml: values that remember their lines; duplicates, depth and alias bombs refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.errors import RuleError
from tmy.yamlfile.source import MAX_DEPTH, LineDict, LineList, read_yaml


def read(text: str) -> object:
    return read_yaml(Path("r.yaml"), text)


def test_mappings_and_lists_know_their_lines() -> None:
    data = read("a: 1\nb:\n  - x\n  - {c: true, d: 2.5}\n")
    assert isinstance(data, LineDict) and data == {"a": 1, "b": ["x", {"c": True, "d": 2.5}]}
    assert data.line_of("a") == 1 and data.line_of("b") == 2
    items = data["b"]
    assert isinstance(items, LineList) and items.line_of(1) == 4 and items.line_of(9) == items.line


def test_scalars_resolve_as_safe_loader_does() -> None:
    assert read("a: yes\nb: '1'\nc: 0x10\nd: ~\ne: 2001-12-14\n") == {
        "a": True, "b": "1", "c": 16, "d": None, "e": read("e: 2001-12-14\n")["e"],  # type: ignore[index]
    }  # fmt: skip


def test_anchors_aliases_and_merge_keys() -> None:
    data = read("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nsame: *b\n")
    assert data["use"] == {"x": 1, "y": 3} and data["same"] is data["base"]  # type: ignore[index]
    assert data["use"].line_of("x") == 3  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("a: 1\na: 2\n", 2, "duplicate key 'a' (first on line 1)"),
        ("a: 1\n---\nb: 2\n", 2, "one YAML document"),
        ("a: *nope\n", 1, "undefined alias 'nope'"),
        ("a: &x [1, *x]\n", 1, "inside the collection it names"),
        ("a: [1\n", 1, "YAML syntax error: unclosed"),
    ],
)
def test_refusals_name_file_and_line(text: str, line: int, says: str) -> None:
    with pytest.raises(RuleError) as caught:
        read(text)
    assert (caught.value.file, caught.value.line) == ("r.yaml", line)
    assert says in str(caught.value)


def test_nesting_and_alias_repetition_are_bounded() -> None:
    with pytest.raises(RuleError, match="nested more than"):
        read("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n")
    bomb = (
        "l0: &l0 ["
        + ", ".join(["xxxxxxxxxx"] * 10)
        + "]\n"
        + "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 8))
    )
    with pytest.raises(RuleError, match="aliases repeat more than"):
        read(bomb)


def test_an_unreadable_file_is_a_rule_error(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="cannot read"):
        read_yaml(tmp_path / "missing.yaml")


def test_a_number_past_pythons_conversion_limit_is_a_line_error() -> None:
    with pytest.raises(RuleError) as err:
        read("a: 1\nb: " + "9" * 5000 + "\n")
    assert err.value.line == 2 and "quote it to keep it as text" in str(err.value)
