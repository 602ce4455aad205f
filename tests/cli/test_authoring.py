"""Authoring from the command line: YAML syntax errors that name the line to fix,
``vars set`` type checks, ``--user-name``, ``--help`` for every command, and
config paths relative to the config file.

Real files, real stores; ``cli.main`` in-process (capsys) or ``run.py`` as a
subprocess where the working directory matters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

import pytest
import yaml

from tmy import cli, logs
from tmy.config import load_settings
from tmy.testing import Bot
from tmy.yamlfile.hints import diagnose

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    """Run as from the repository, without a developer's TMY_* / LLM environment."""
    monkeypatch.chdir(REPO)
    for name in list(os.environ):
        if name.startswith("TMY_") or name.startswith("OPENAI_"):
            monkeypatch.delenv(name)
    yield
    # main() pointed the log at this test's captured stderr: point it back while that is
    # still open (capsys, asked for above, closes after this), or a pending repeats
    # report is written to a closed stream
    logs.configure("warning")


def main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def run_py(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- YAML syntax errors: the line to fix and a hint ---------------------------------------------

GOOD_HEAD = """\
rules:
  - id: a
    triggers: [x]
    steps:
      - plugin: ADJUST
        input: one
"""

# name -> (file text, the line that is wrong, words the message must hold)
BROKEN = {
    "tab": (
        "rules:\n  - id: a\n\ttriggers: [x]\n",
        3,
        ["tab", "YAML forbids tabs for indentation; use spaces"],
    ),
    "tab_deeper": (
        GOOD_HEAD + "\t  save: x\n",
        7,
        ["YAML forbids tabs for indentation; use spaces"],
    ),
    "missing_dash_between_steps": (
        GOOD_HEAD + "      plugin: ADJUST\n        input: two\n",
        7,
        ["a mapping where a list item was expected", "missing '-'?", "'- plugin: ADJUST'"],
    ),
    "missing_dash_between_rules": (
        GOOD_HEAD + "\n  # the second rule\n  id: b\n    triggers: [y]\n",
        9,
        ["a mapping where a list item was expected", "missing '-'?"],
    ),
    "missing_dash_on_the_first_step": (
        "rules:\n  - id: a\n    triggers: [x]\n    steps:\n      plugin: ADJUST\n"
        "      input: one\n      - plugin: ADJUST\n",
        5,
        ["a mapping where a list item was expected", "missing '-'?", "like line 7"],
    ),
    "key_indented_too_far": (
        "rules:\n  - id: a\n    triggers: [x]\n     steps: []\n",
        4,
        ["inconsistent indentation", "indented 5 spaces", "at 4"],
    ),
    "key_indented_too_far_after_a_value": (
        "rules:\n  - id: a\n    description: hello\n      steps: []\n",
        4,
        ["inconsistent indentation", "continuation of that line's value"],
    ),
    "step_option_one_space_off": (
        GOOD_HEAD + "       save: x\n",
        7,
        ["inconsistent indentation", "indented 7 spaces"],
    ),
    "unclosed_double_quote": (
        'rules:\n  - id: a\n    triggers: ["x]\n    steps: []\n  - id: b\n',
        3,
        ["unclosed quote", 'close the string with "'],
    ),
    "unclosed_quote_swallowing_lines": (
        'rules:\n  - id: a\n    input: "hello\n    steps: []\n  - id: b\n    input: "x"\n',
        3,
        ["unclosed quote", 'close the string with "'],
    ),
    "unclosed_single_quote": (
        "rules:\n  - id: 'a\n    triggers: [x]\n",
        2,
        ["unclosed quote", "close the string with '"],
    ),
    "unclosed_bracket": (
        "rules:\n  - id: a\n    triggers: [x, y\n    steps: []\n",
        3,
        ["unclosed '['", "close it with ']'"],
    ),
    "unclosed_brace": (
        "rules:\n  - id: a\n    steps:\n      - {plugin: ADJUST, input: x\n  - id: b\n",
        4,
        ["unclosed '{'", "close it with '}'"],
    ),
    "missing_colon": (
        "rules:\n  - id: a\n    triggers [x]\n\n    # steps follow\n    steps: []\n",
        3,
        ["missing ':'?"],
    ),
    "no_space_after_colon": (
        "rules:\n  - id:a\n    triggers: [x]\n",
        2,
        ["a space after the colon"],
    ),
    "second_colon_in_a_value": (
        "rules:\n  - id: a\n    input: note: this\n",
        3,
        ["a second ': '", "quote the value"],
    ),
    "a_star_trigger": (
        "rules:\n  - id: a\n    triggers: [*weather*]\n",
        3,
        ["alias", "quote a value that starts with '*'"],
    ),
    "a_star_list_item": (
        "rules:\n  - id: a\n    triggers:\n      - *weather\n",
        4,
        ["undefined alias 'weather'", "quote a value that starts with it"],
    ),
    "a_backslash_in_double_quotes": (
        'rules:\n  - id: a\n    triggers: ["re:^\\d+"]\n',
        3,
        ["escape", "single quotes"],
    ),
    "a_value_starting_with_at": (
        "rules:\n  - id: a\n    input: @everyone hi\n",
        3,
        ["cannot start with '@'", "quote the value"],
    ),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_check_points_at_the_line_to_fix_with_a_hint(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, line, words = BROKEN[name]
    path = tmp_path / "rules" / f"{name}.yaml"
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    code, out, err = main(capsys, "check", str(path.parent))
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"{path}:{line}: YAML"), err
    for word in words:
        assert word in err, (word, err)
    if name != "a_star_list_item":  # (an alias error of the composer: one line, hint inside)
        assert len(lines) == 2 and lines[1].startswith(f"{path}:{line}: hint: "), err


@pytest.mark.parametrize("name", [n for n in BROKEN if not n.startswith("a_star_list")])
@pytest.mark.parametrize("loader", [yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)])
def test_the_same_line_with_either_yaml_parser(name: str, loader: type) -> None:
    """libyaml and pure-Python PyYAML word their errors differently; the line is the same."""
    text, line, _ = BROKEN[name]
    with pytest.raises(yaml.MarkedYAMLError) as raised:
        yaml.load(text, Loader=loader)
    found, what, hint = diagnose(text, raised.value)
    assert found == line, what
    assert what and hint and "\n" not in what + hint


@pytest.mark.slow  # run.py processes
def test_check_as_a_process_prints_file_line_and_hint(tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    bad = folder / "steps.yaml"
    bad.write_text(GOOD_HEAD + "      plugin: ADJUST\n        input: two\n", encoding="utf-8")
    done = run_py("check", str(folder), cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"{bad}:7: YAML syntax error: a mapping where a list item was expected: this line is "
        "at the indentation of the list items above (line 5) but has no '-'",
        f"{bad}:7: hint: missing '-'? start the item with '- ' ('- plugin: ADJUST')",
    ]


# -- vars set: the declared type ----------------------------------------------------------------

TYPED = """\
variables:
  counter: {scope: user, default: 0}
  price: {scope: global, default: 1.5}
  greeting: {scope: global, default: "hi"}
  jokes: {scope: global, default: ["a", "b"]}
  profile: {scope: user, default: {name: ""}}
  enabled: {scope: global, default: true}
  anything: {scope: global, default: null}
rules:
  - id: hello
    triggers: [hello]
    steps:
      - {plugin: ADJUST, input: "Hello {USER_NAME}, you are {USER}."}
"""


@pytest.fixture
def typed(tmp_path: Path) -> tuple[str, ...]:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "typed.yaml").write_text(TYPED, encoding="utf-8")
    return ("--rules", str(folder), "--store", f"sqlite:///{tmp_path / 'v.db'}", "--user", "ann")


@pytest.mark.parametrize(
    ("name", "value", "stored"),
    [
        ("counter", "41", 41),
        ("price", "3", 3),  # an int where a float is declared
        ("price", "2.25", 2.25),
        ("greeting", "hello there", "hello there"),
        ("greeting", "42", "42"),  # a string variable takes the text, not the number
        ("greeting", '"quoted"', "quoted"),
        ("jokes", '["x", "y"]', ["x", "y"]),
        ("profile", '{"name": "Ann"}', {"name": "Ann"}),
        ("enabled", "false", False),
        ("anything", '{"free": 1}', {"free": 1}),  # a null default takes any type
    ],
)
def test_vars_set_accepts_the_declared_type(
    name: str, value: str, stored: object, typed: tuple[str, ...], capsys: pytest.CaptureFixture
) -> None:
    code, out, err = main(capsys, "vars", "set", name, value, *typed)
    assert (code, err) == (0, "")
    assert json.loads(out) == stored
    code, out, _ = main(capsys, "vars", "get", name, *typed)
    assert json.loads(out) == stored and type(json.loads(out)) is type(stored)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("counter", "abc", "counter is declared as int (default 0), but 'abc' is a str"),
        ("counter", "2.5", "but '2.5' is a float: give a whole number"),
        ("counter", "true", "but 'true' is a bool"),
        ("price", '"cheap"', "price is declared as float (default 1.5)"),
        ("jokes", "one joke", 'declared as list (default ["a", "b"])'),
        ("profile", "[1]", "but '[1]' is a list: give a JSON object"),
        ("enabled", "1", "but '1' is an int: give true or false"),
    ],
)
def test_vars_set_refuses_another_type(
    name: str, value: str, words: str, typed: tuple[str, ...], capsys: pytest.CaptureFixture
) -> None:
    code, out, err = main(capsys, "vars", "set", name, value, *typed)
    assert code == 2 and out == ""
    assert words in err and "--force" in err
    code, out, _ = main(capsys, "vars", "list", *typed)
    assert f"{name}\t" in out and "(default)" in out.split(f"{name}\t", 1)[1].split("\n", 1)[0]


def test_vars_set_force_stores_any_type(typed: tuple[str, ...], capsys) -> None:
    code, out, err = main(capsys, "vars", "set", "counter", "abc", "--force", *typed)
    assert (code, json.loads(out), err) == (0, "abc", "")
    code, out, _ = main(capsys, "vars", "set", "jokes", '{"not": "a list"}', *typed, "--force")
    assert json.loads(out) == {"not": "a list"}


def test_vars_set_of_one_position_is_not_checked_against_the_default(
    typed: tuple[str, ...], capsys
) -> None:
    code, out, _ = main(capsys, "vars", "set", "profile[age]", "33", *typed)
    assert code == 0 and json.loads(out) == {"name": "", "age": 33}


async def test_admin_vars_set_is_checked_too_and_takes_a_trailing_force() -> None:
    async with Bot({"typed.yaml": TYPED}, admins=frozenset({"test:root"})) as bot:
        refused = await bot.say(".tmy vars set counter lots", user="root")
        assert refused.startswith("error: counter is declared as int (default 0)")
        assert "--force" in refused
        assert await bot.var("counter", user="root") == 0
        assert await bot.say(".tmy vars set counter 7", user="root") == "7"
        assert await bot.say(".tmy vars set counter lots --force", user="root") == '"lots"'
        assert await bot.var("counter", user="root") == "lots"
        forced = await bot.say(".tmy vars set greeting [1, 2] --force", user="root")
        assert json.loads(forced) == [1, 2]


# -- --user-name ---------------------------------------------------------------------------------


def test_ask_with_user_name_and_its_env_twin(
    typed: tuple[str, ...], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = main(capsys, "ask", "hello", *typed, "--user-name", "Ann Lee")
    assert (code, out) == (0, "Hello Ann Lee, you are ann.\n")
    monkeypatch.setenv("TMY_USER_NAME", "Annie")
    assert main(capsys, "ask", "hello", *typed)[1] == "Hello Annie, you are ann.\n"
    monkeypatch.delenv("TMY_USER_NAME")
    assert main(capsys, "ask", "hello", *typed)[1] == "Hello ann, you are ann.\n"


def test_explain_takes_the_user_name(typed: tuple[str, ...], capsys) -> None:
    code, out, _ = main(capsys, "explain", "hello", *typed, "--user-name", "Ann Lee")
    assert code == 0 and "Hello Ann Lee, you are ann." in out


# -- --help --------------------------------------------------------------------------------------


def _help_lines(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # argparse wraps at the terminal width


def test_help_shows_the_common_options_with_their_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every subcommand's help line: tests/cli/test_commands.py (built from the registry)."""
    assert "--user-name" in _help_lines(capsys)
    assert "(default: $USER, else console)" in _help_lines(capsys)


# -- paths in a config file ----------------------------------------------------------------------


@pytest.mark.slow  # run.py processes
def test_paths_in_a_config_file_are_relative_to_its_directory(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "typed.yaml").write_text(TYPED, encoding="utf-8")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "tmy.yaml").write_text(
        dedent("""\
            rules: ../rules
            plugins: ../plugins
            store: sqlite:///../data/bot.db
            log: {file: ../logs/tmy.jsonl}
        """),
        encoding="utf-8",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_py("--config", str(conf / "tmy.yaml"), "ask", "hello", "--user", "ann",
                  cwd=elsewhere)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello ann, you are ann.\n"
    assert (tmp_path / "data" / "bot.db").exists()
    assert (tmp_path / "logs" / "tmy.jsonl").exists()
    assert list(elsewhere.iterdir()) == []  # nothing landed in the working directory
    # the same file named by TMY_CONFIG, from yet another directory
    done = run_py("vars", "get", "counter", "--user", "ann", cwd=conf,
                  env={"TMY_CONFIG": "tmy.yaml"})  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "0"), done.stderr


def test_environment_and_command_line_paths_stay_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "tmy.yaml").write_text("rules: ../rules\nstore: sqlite:///x.db\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    from_file = load_settings(conf / "tmy.yaml", env={})
    assert from_file.rules == Path("rules")  # tmp_path/rules, shown relative to the cwd
    assert from_file.store == "sqlite:///conf/x.db"
    env = {"TMY_RULES": "my-rules", "TMY_STORE": "sqlite:///here.db"}
    from_env = load_settings(conf / "tmy.yaml", env=env)
    assert (from_env.rules, from_env.store) == (Path("my-rules"), "sqlite:///here.db")
    flags = load_settings(conf / "tmy.yaml", env={}, rules="cli-rules", store="sqlite:///c.db")
    assert (flags.rules, flags.store) == (Path("cli-rules"), "sqlite:///c.db")
    (conf / "tmy.yaml").write_text(
        "store: sqlite:////abs/tmy.db\nlog: {file: ''}\n", encoding="utf-8"
    )
    absolute = load_settings(conf / "tmy.yaml", env={})
    assert (absolute.store, absolute.log_file) == ("sqlite:////abs/tmy.db", "")
    (conf / "tmy.yaml").write_text("store: 'sqlite:///:memory:'\n", encoding="utf-8")
    assert load_settings(conf / "tmy.yaml", env={}).store == "sqlite:///:memory:"


def test_a_config_file_syntax_error_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "tmy.yaml"
    conf.write_text("rules: rules\nlog:\n  level: info\n\tfile: x.log\n", encoding="utf-8")
    code, out, err = main(capsys, "--config", str(conf), "check")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {conf}:4: YAML syntax error: a tab character")
    assert f"\n{conf}:4: hint: YAML forbids tabs for indentation; use spaces" in err


def test_the_shipped_config_finds_the_checkout_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(env={})
    assert settings.source == str(REPO / "config" / "tmy.yaml")
    assert settings.rules == REPO / "rules" and settings.plugins == REPO / "plugins"
    assert settings.store == f"sqlite:///{REPO / 'data' / 'tmy.db'}"
    monkeypatch.chdir(REPO)
    settings = load_settings(env={})
    assert (settings.rules, settings.store) == (Path("rules"), "sqlite:///data/tmy.db")


@pytest.mark.slow  # run.py processes
def test_check_from_another_directory_checks_the_checkout_rules(tmp_path: Path) -> None:
    here = run_py("check", cwd=REPO)
    there = run_py("check", cwd=tmp_path)
    assert here.returncode == there.returncode == 0, there.stderr
    assert there.stdout.splitlines()[0] == here.stdout.splitlines()[0]
    assert not here.stdout.startswith("ok: 0 rules")
    assert list(tmp_path.iterdir()) == []


# -- check: atomic spans -------------------------------------------------------------------------


def test_check_lists_the_rules_that_hold_variables_across_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "bank.yaml").write_text(
        dedent("""\
            variables:
              balance: {scope: user, default: 0}
            rules:
              - id: deposit
                triggers: ["deposit *"]
                steps:
                  - {plugin: ADJUST, input: "?= balance + int(QUESTION)"}
                  - {plugin: ADJUST, save: balance}
        """),
        encoding="utf-8",
    )
    code, out, _ = main(capsys, "check", str(folder))
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("ok: 1 rules")
    assert len(lines) == 2 and lines[1].startswith(f"atomic: {folder / 'bank.yaml'}:4: ")
    assert "rule 'deposit' holds balance" in lines[1]


def test_a_list_item_missing_its_colon_is_named_with_the_fix(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        'rules:\n  - id: a\n    triggers: ["a"]\n    steps:\n'
        "      - plugin ADJUST\n        input: x\n"
    )
    import contextlib
    import io

    from tmy.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["check", str(rules)])
    assert code == 1
    text = err.getvalue()
    assert "r.yaml:5: YAML syntax error: a list item" in text
    assert "'- plugin: ADJUST'" in text and "deeper than" not in text
