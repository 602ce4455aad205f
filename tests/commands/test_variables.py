"""``vars`` (tmy.commands.variables) from the command line, in-process through ``tmy.cli.main``.

The same runs as ``python run.py vars …`` without a process each (tests/cli/test_run_py.py
keeps one real-process smoke test of ``vars``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tmy import cli, logs

RULES = """
variables:
  counter: {scope: user, default: 0}
  notes: {scope: global, default: {}}
  scores: {scope: global, default: {}}
  points: {scope: user, default: 0, rank: true}
rules:
  - id: count
    triggers: [count]
    steps:
      - {id: add, plugin: ADJUST, input: "?= counter + 1", save: counter}
      - {plugin: ADJUST, input: "count={counter}"}
  - id: board
    triggers: [board]
    steps:
      - {plugin: ADJUST, input: "?= [e['user'] for e in top('points', 3)]"}
"""


@pytest.fixture
def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str]]]:
    """``run(*argv)``: ``run.py *argv --rules … --store …`` in-process; (exit code, stdout)."""
    for name in [k for k in os.environ if k.startswith("TMY_")]:
        monkeypatch.delenv(name)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "cli.yaml").write_text(RULES, encoding="utf-8")
    common = ["--rules", str(rules), "--store", f"sqlite:///{tmp_path / 'cli.db'}"]

    def run(*argv: str, user: str = "ann") -> tuple[int, str]:
        capsys.readouterr()
        code = cli.main([*argv, *common, "--user", user])
        out, err = capsys.readouterr()
        return code, out + err

    yield run
    logs.configure("warning")  # main() pointed the log at capsys's stderr, still open here


def test_vars_set_get_list_del(run: Callable[..., tuple[int, str]]) -> None:
    assert run("vars", "set", "counter", "41")[0] == 0
    assert run("vars", "set", "notes[bob]", '{"x": [1, 2]}')[0] == 0
    assert run("vars", "get", "notes[bob][x][1]") == (0, "2\n")
    code, out = run("ask", "count", "--json")
    assert code == 0 and json.loads(out)["answer"] == "count=42"
    code, listed = run("vars", "list")
    assert code == 0
    assert "counter\tuser\t42" in listed
    assert 'notes\tglobal\t{"bob": {"x": [1, 2]}}' in listed
    assert "counter\tuser\t(default) 0" in run("vars", "list", user="bob")[1]
    assert run("vars", "del", "counter")[0] == 0
    code, out = run("vars", "get", "counter")
    assert code == 0 and json.loads(out) == 0


def test_vars_del_with_a_path_does_not_wipe_the_whole_variable(
    run: Callable[..., tuple[int, str]],
) -> None:
    """From the bug hunt (test_bughunt.py): ``vars del scores[bob]`` once deleted ``scores``."""
    assert run("vars", "set", "scores[ann]", "5")[0] == 0
    assert run("vars", "set", "scores[bob]", "7")[0] == 0
    deleted = run("vars", "del", "scores[bob]")
    code, out = run("vars", "get", "scores")
    # either refuse the path, or delete only bob's entry; never lose ann's score
    assert code == 0 and json.loads(out).get("ann") == 5, f"del gave {deleted}"


def test_vars_refuses_undeclared_names(run: Callable[..., tuple[int, str]]) -> None:
    code, said = run("vars", "get", "nope")
    assert code == 2
    assert "'nope' is not a declared variable" in said


def test_vars_set_and_del_keep_a_rank_true_variable_s_leaderboard(
    run: Callable[..., tuple[int, str]],
) -> None:
    assert run("vars", "set", "points", "5")[0] == 0
    assert run("vars", "set", "points", "9", user="bob")[0] == 0
    assert json.loads(run("ask", "board", "--json")[1])["answer"] == '["bob", "ann"]'
    assert run("vars", "del", "points", user="bob")[0] == 0  # back to its default: off the board
    assert json.loads(run("ask", "board", "--json")[1])["answer"] == '["ann"]'
