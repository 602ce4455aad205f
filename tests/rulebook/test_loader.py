"""Bad rule files: every error names its file and line, and all of them are reported at once."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.processes import rules_file, run_tmy
from tmy.errors import RuleError, RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.loader import load_rulebook, load_sources
from tmy.testing import Bot


def line_of(text: str, marker: str) -> int:
    """1-based line of the first line containing ``marker``."""
    for number, line in enumerate(text.splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} not in text")


def errors(text: str, name: str = "bad.yaml") -> list[RuleError]:
    with pytest.raises(RuleErrors) as info:
        load_sources([(Path(name), textwrap.dedent(text))], default_registry())
    return info.value.errors


def only_error(text: str, name: str = "bad.yaml") -> RuleError:
    found = errors(text, name)
    assert len(found) == 1, [str(e) for e in found]
    return found[0]


def assert_at(
    error: RuleError, text: str, marker: str, *words: str, name: str = "bad.yaml"
) -> None:
    line = line_of(textwrap.dedent(text), marker)
    assert (error.file, error.line) == (name, line), str(error)
    assert str(error).startswith(f"{name}:{line}: ")
    for word in words:
        assert word in str(error), str(error)


RULE_HEAD = """
rules:
  - id: a
    triggers: [x]
    steps:
"""


# -- YAML itself ----------------------------------------------------------------------


def test_yaml_syntax_error() -> None:
    text = "rules:\n  - id: a\n    triggers: [x, y\n    steps: []\n"
    error = only_error(text)
    assert error.file == "bad.yaml" and error.line in (3, 4, 5)
    assert "YAML syntax error" in str(error)


def test_tab_indentation() -> None:
    error = only_error("rules:\n  - id: a\n\ttriggers: [x]\n")
    assert (error.file, error.line) == ("bad.yaml", 3)


def test_duplicate_keys_are_not_silently_collapsed() -> None:
    text = RULE_HEAD + "      - plugin: ADJUST\n        input: one\n        input: two\n"
    error = only_error(text)
    assert_at(error, text, "input: two", "duplicate key 'input'", f"line {line_of(text, 'one')}")


def test_a_file_that_is_not_a_mapping() -> None:
    error = only_error("- just\n- a list\n")
    assert (error.file, error.line) == ("bad.yaml", 1)


def test_empty_file_is_fine() -> None:
    rulebook = load_sources([(Path("empty.yaml"), "")], default_registry())
    assert rulebook.rules == ()


# -- unknown keys and plugins ---------------------------------------------------------


def test_unknown_top_level_key() -> None:
    text = "variabels:\n  x: {}\n"
    assert_at(only_error(text), text, "variabels", "did you mean 'variables'")


def test_unknown_rule_key_suggests_the_right_one() -> None:
    text = "rules:\n  - id: a\n    trigers: [x]\n    triggers: [x]\n    steps: [{plugin: ADJUST}]\n"
    assert_at(only_error(text), text, "trigers", "unknown rule key 'trigers'", "'triggers'")


def test_unknown_step_key() -> None:
    text = RULE_HEAD + "      - plugin: ADJUST\n        inptu: hello\n"
    assert_at(only_error(text), text, "inptu", "'inptu'", "did you mean 'input'")


def test_unknown_option_of_a_plugin_with_options() -> None:
    text = RULE_HEAD + "      - plugin: HTTP\n        url: http://x\n        urll: http://y\n"
    assert_at(only_error(text), text, "urll", "plugin HTTP", "'urll'")


def test_option_of_the_wrong_type() -> None:
    text = RULE_HEAD + "      - plugin: HTTP\n        url: http://x\n        method: 5\n"
    assert_at(only_error(text), text, "method: 5", "'method' must be str")


def test_missing_required_option() -> None:
    text = RULE_HEAD + "      - plugin: HTTP\n        method: GET\n"
    assert_at(only_error(text), text, "plugin: HTTP", "needs 'url:'")


def test_unknown_plugin_with_suggestion() -> None:
    text = RULE_HEAD + "      - plugin: ADJUS\n"
    assert_at(only_error(text), text, "ADJUS", "unknown plugin 'ADJUS'", "did you mean 'ADJUST'")


def test_variable_declaration_errors() -> None:
    text = """
    variables:
      a: {scope: planet}
      STEP_RESULT: {default: 1}
      b: {scope: user, colour: red}
      9lives: {}
    """
    found = errors(text)
    assert_at(found[0], text, "planet", "scope 'planet'")
    assert_at(found[1], text, "STEP_RESULT", "built-in")
    assert_at(found[2], text, "colour", "'colour'")
    assert_at(found[3], text, "9lives", "identifier")


def test_variable_declared_twice_differently() -> None:
    first = "variables:\n  n: {scope: user, default: 0}\n"
    second = "\nvariables:\n  n: {scope: global, default: 0}\n"
    with pytest.raises(RuleErrors) as info:
        load_sources([(Path("a.yaml"), first), (Path("b.yaml"), second)], default_registry())
    assert [str(e) for e in info.value.errors] == [
        "b.yaml:3: variable 'n' is declared again differently (first at a.yaml:2)"
    ]


# -- rule-level checks ----------------------------------------------------------------


def test_duplicate_rule_ids_across_files_name_both_places() -> None:
    one = "rules:\n  - {id: dup, triggers: [x], steps: [{plugin: ADJUST}]}\n"
    two = "# second\n\nrules:\n  - {id: dup, triggers: [y], steps: [{plugin: ADJUST}]}\n"
    with pytest.raises(RuleErrors) as info:
        load_sources([(Path("one.yaml"), one), (Path("two.yaml"), two)], default_registry())
    assert [str(e) for e in info.value.errors] == [
        "two.yaml:4: duplicate rule id 'dup' (first at one.yaml:2)"
    ]


def test_malformed_triggers_each_on_its_own_line() -> None:
    text = """
    rules:
      - id: a
        triggers:
          - "a*b"
          - "re:("
          - ""
        steps: [{plugin: ADJUST}]
    """
    found = errors(text)
    assert_at(found[0], text, '"a*b"', "'*' may only stand")
    assert_at(found[1], text, '"re:("', "invalid regular expression")
    assert_at(found[2], text, '""', "non-empty")


def test_rule_field_types() -> None:
    text = """
    rules:
      - id: "bad id"
        triggers: [x]
        priority: high
        session: -5
        steps: []
    """
    messages = [str(e) for e in errors(text)]
    assert messages[0].startswith(f"bad.yaml:{line_of(textwrap.dedent(text), 'bad id')}: ")
    assert any(m.startswith("bad.yaml:5: 'priority' must be int") for m in messages)
    assert any(m.startswith("bad.yaml:6: 'session:'") for m in messages)
    assert any(m.startswith("bad.yaml:7: ") and "non-empty list" in m for m in messages)


def test_step_field_values() -> None:
    text = RULE_HEAD + "      - plugin: ADJUST\n        on_error: ignore\n        timeout: 0\n"
    found = errors(text)
    assert_at(found[0], text, "ignore", "'stop' or 'continue'")
    assert_at(found[1], text, "timeout: 0", "timeout")


def test_list_mode_without_input_position() -> None:
    text = RULE_HEAD + "      - plugin: ADJUST\n        input: SHIFT\n"
    assert_at(only_error(text), text, "SHIFT", "INPUT")


# -- paths, templates, expressions ----------------------------------------------------


@pytest.mark.parametrize(
    ("line", "hint"),
    [
        ("save: 'a[b'", "not closed"),
        ("save: 'a.b'", "unexpected '.'"),
        ("INPUT: '1abc'", "variable name"),
        ("save: 5", "variable position"),
        ("save: '{USER}'", "variable name"),
    ],
)
def test_bad_paths(line: str, hint: str) -> None:
    text = RULE_HEAD + f"      - plugin: ADJUST\n        {line}\n"
    assert_at(only_error(text), text, line, hint)


@pytest.mark.parametrize(
    "path", ["scores[{USER}", "scores{USER}", "scores[{USER}]]", "scores[{USER}][]"]
)
def test_bad_paths_built_from_templates_are_load_errors(path: str) -> None:
    text = (
        "variables:\n  scores: {default: {}}\n"
        + RULE_HEAD
        + f"      - plugin: ADJUST\n        save: '{path}'\n"
    )
    assert_at(only_error(text), text, "save:", "path")


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("'?= 1 +'", "syntax error"),
        ("'?= f\"{QUESTION}\"'", "f-strings"),
        ("'?= QUESTION.__class__'", "'__class__'"),
        ("'?= {nope[}'", "syntax error"),
    ],
)
def test_expression_syntax_errors(value: str, hint: str) -> None:
    text = RULE_HEAD + f"      - plugin: ADJUST\n        input: {value}\n"
    assert_at(only_error(text), text, "input:", hint)


def test_references_to_never_set_variables() -> None:
    text = RULE_HEAD + textwrap.indent(
        textwrap.dedent(
            """\
            - plugin: ADJUST
              input: "{QUESTON} and {STEP_RESULT}"
            - plugin: ADJUST
              when: "?= later > 1"
            - plugin: ADJUST
              input: "{totals[{nobody}]}"
            - plugin: ADJUST
              save: later
            """
        ),
        "      ",
    )
    found = errors("variables:\n  totals: {}\n" + text)
    full = "variables:\n  totals: {}\n" + text
    assert_at(found[0], full, "QUESTON", "'QUESTON'", "never set", "did you mean 'QUESTION'")
    assert_at(found[1], full, "later > 1", "'later'")  # saved only by a later step
    assert_at(found[2], full, "nobody", "'nobody'")


def test_input_reference_needs_input_on_the_same_step() -> None:
    text = RULE_HEAD + "      - plugin: ADJUST\n        input: 'got {INPUT}'\n"
    assert_at(only_error(text), text, "got {INPUT}", "'INPUT'")


def test_names_that_are_known_load_fine() -> None:
    declared = "variables:\n  jokes: {scope: global, default: [a]}\n"
    rules = """
    rules:
      - id: ok
        triggers: ["re:(?P<city>\\\\w+) weather"]
        steps:
          - plugin: ADJUST
            input: "{city} {MAGIC} {QUESTION} {USER} {USER_NAME} {CHAT} {PLATFORM} {NOW} {TEXT}"
            save: mine
          - plugin: ADJUST
            input: "{mine} {jokes[0]} {{not a ref}} {\\"json\\": true}"
            INPUT: jokes
            when: "?= len(INPUT) > 0"
    """
    rulebook = load_sources(
        [(Path("v.yaml"), declared), (Path("r.yaml"), textwrap.dedent(rules))], default_registry()
    )
    assert [r.id for r in rulebook.rules] == ["ok"]


# -- many errors at once, whole directories -------------------------------------------


def test_every_error_in_every_file_is_reported_at_once(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(
        "rules:\n  - {id: good, triggers: [g], steps: [{plugin: ADJUST}]}\n", encoding="utf-8"
    )
    (tmp_path / "one.yaml").write_text(
        RULE_HEAD + "      - plugin: NOPE\n      - plugin: ADJUST\n        bogus: 1\n",
        encoding="utf-8",
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "two.yml").write_text("rules: [\n", encoding="utf-8")
    with pytest.raises(RuleErrors) as info:
        load_rulebook(tmp_path, default_registry())
    found = {(Path(e.file).relative_to(tmp_path).as_posix(), e.line) for e in info.value.errors}
    assert ("one.yaml", 6) in found
    assert ("one.yaml", 8) in found
    assert any(name == "sub/two.yml" and line is not None for name, line in found)
    for line in str(info.value).splitlines():
        assert line.startswith(str(tmp_path)), line  # every line says where


def test_missing_rules_directory() -> None:
    with pytest.raises(RuleError, match="does not exist"):
        load_rulebook(Path("/nonexistent/tmy-rules"), default_registry())


def test_disabled_rule_is_loaded_but_never_fires() -> None:
    text = "rules:\n  - {id: disabled, enabled: false, triggers: [x], steps: [{plugin: ADJUST}]}\n"
    rulebook = load_sources([(Path("d.yaml"), text)], default_registry())
    assert rulebook.rules == ()


async def test_bot_refuses_to_start_on_a_broken_rulebook() -> None:
    with pytest.raises(RuleErrors, match=r"x\.yaml:\d+: .*unknown plugin"):
        async with Bot({"x.yaml": RULE_HEAD + "      - plugin: MISSING\n"}):
            pass  # pragma: no cover - never entered


# -- from test_audit_issue2.py (issue 2 audit: each failed before its fix)


def test_a_yaml_alias_bomb_is_a_rule_error_with_file_and_line() -> None:
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcde", "bcdef", strict=True):  # 9**6 = 531,441 strings when expanded
        levels.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    text = "variables:\n  x:\n    default:\n" + "".join(f"      {v}\n" for v in levels)
    with pytest.raises(RuleErrors, match=r"bomb\.yaml:\d+"):
        load_sources([(Path("bomb.yaml"), text)], default_registry())


# -- from test_bughunt.py (a bug hunt: each failed before its fix)


async def test_a_default_json_cannot_hold_is_a_load_time_error() -> None:
    from tmy.errors import RuleError

    rules = """
    variables:
      days: {scope: global, default: [2024-01-01, 2024-01-02]}
    rules:
      - id: next
        triggers: ["next"]
        steps:
          - {plugin: ADJUST, input: LOOPBACK, INPUT: days}
    """
    with pytest.raises(RuleError, match="days"):
        async with Bot({"d.yaml": textwrap.dedent(rules)}) as bot:
            await bot.ask("next")


# -- from test_hardening_values.py (issue 7 hardening, defects 4, 7, 10: expression cost,
#    amplification, deep YAML)


def _chained_anchors() -> str:
    """Eight anchors, each 150 levels deep around an alias of the previous one."""
    lines, inner = [], "1"
    for i in range(8):
        lines.append(f"      k{i}: &a{i} " + "[" * 150 + inner + "]" * 150)
        inner = f"*a{i}"
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nested", "line", "hint"),
    [
        ("[" * 50_000 + "]" * 50_000, 3, "nested"),  # flow sequences
        ("{a: " * 50_000 + "1" + "}" * 50_000, 3, "nested"),  # flow mappings
        ("\n      " + "- " * 50_000 + "x", 4, "nested"),  # block sequences on one line
        ("\n" + _chained_anchors(), 5, "nested"),  # 1,200 deep through aliases
        ("&loop [1, *loop]", 3, "cycle"),  # a list that holds itself
    ],
    ids=["flow-list", "flow-map", "block-list", "aliases", "cycle"],
)
def test_yaml_nested_50000_deep_is_an_error_with_file_and_line(
    tmp_path: Path, nested: str, line: int, hint: str
) -> None:
    path = rules_file(tmp_path, "deep.yaml", "variables:\n  x:\n    default: " + nested + "\n")
    got = run_tmy(tmp_path, "check", str(path), timeout=50)
    assert got["rc"] == 1, got
    assert f"{path}:{line}:" in got["err"], got["err"]
    assert hint in got["err"] and "Traceback" not in got["err"], got["err"]


def test_a_variable_default_must_fit_the_configured_value_limit() -> None:
    """``limits.max_value_bytes`` bounds a declared default as it bounds every stored value."""
    text = textwrap.dedent(
        """\
        variables:
          big: {default: "%s"}
        rules: []
        """
    ) % ("x" * 2000)
    source = [(Path("limits.yaml"), text)]
    assert load_sources(source, default_registry()).variables["big"].default == "x" * 2000
    with pytest.raises(RuleErrors) as caught:
        load_sources(source, default_registry(), max_value_bytes=1000)
    assert "limits.yaml:2:" in str(caught.value)
    assert "variable 'big': the default cannot be stored" in str(caught.value)


@pytest.mark.parametrize(("kind", "key"), [("rule_keys", "priority"), ("step_keys", "when")])
def test_an_extension_may_not_take_over_a_key_of_tmys_own(kind: str, key: str) -> None:
    from tmy.errors import ConfigError
    from tmy.extension import Extension, RuleKey, StepKey

    claim = RuleKey(str) if kind == "rule_keys" else StepKey(str)
    registry = default_registry()
    registry.install(Extension("grabby", **{kind: {key: claim}}), None)
    with pytest.raises(
        ConfigError, match=f"claims the (rule|step) key '{key}', which is tmy's own"
    ):
        load_sources([(Path("r.yaml"), "rules: []\n")], registry)


def test_yaml_in_the_rules_media_directory_is_media_not_rules(tmp_path: Path) -> None:
    from tmy.rulebook.loader import rule_files

    (tmp_path / "media" / "deep").mkdir(parents=True)
    (tmp_path / "media" / "deep" / "sample.yaml").write_text("not: rules\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yaml").write_text("rules: []\n", encoding="utf-8")
    (tmp_path / "a.yml").write_text("rules: []\n", encoding="utf-8")
    assert [p.relative_to(tmp_path).as_posix() for p in rule_files(tmp_path)] == [
        "a.yml",
        "sub/b.yaml",
    ]
