"""``python run.py …`` as a user runs it: real processes, real stores, exact stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

RULES = """
variables:
  counter: {scope: user, default: 0}
  notes: {scope: global, default: {}}
rules:
  - id: count
    triggers: [count]
    steps:
      - {id: add, plugin: ADJUST, input: "?= counter + 1", save: counter}
      - {plugin: ADJUST, input: "count={counter}"}
  - id: note
    triggers: ["note *"]
    steps:
      - {plugin: ADJUST, save: "notes[{USER}]"}
  - id: read
    triggers: [read]
    steps:
      - {plugin: ADJUST, input: "{counter}|{notes}"}
  - id: broken
    triggers: [broken]
    on_error: "no: {STEP_ERROR}"
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0"}
"""


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    done = subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "cli.yaml").write_text(RULES, encoding="utf-8")
    return folder


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def ask(rules_dir: Path, store: str, text: str, *extra: str, check: bool = True):
    return run("ask", text, "--json", "--rules", str(rules_dir), "--store", store, "--user", "ann",
               *extra, check=check)  # fmt: skip


# -- ask --json -----------------------------------------------------------------------


def test_ask_json_prints_exactly_one_object_and_nothing_else(rules_dir: Path, sqlite_url: str):
    done = ask(rules_dir, sqlite_url, "count", "--log-level", "debug")
    out = json.loads(done.stdout)  # raises on any extra output
    assert set(out) >= {"rule", "answer", "error", "trace_id", "steps"}
    assert (out["rule"], out["answer"], out["error"]) == ("count", "count=1", None)
    assert isinstance(out["trace_id"], str) and out["trace_id"]
    assert [s["uri"] for s in out["steps"]] == ["count/add", "count/1"]
    for step in out["steps"]:
        assert set(step) >= {"uri", "plugin", "input", "result", "error", "ms"}
        assert step["plugin"] == "ADJUST"
        assert isinstance(step["ms"], (int, float))
    assert out["steps"][0]["input"] == 1 and out["steps"][0]["result"] == 1
    assert out["trace_id"] in done.stderr  # debug logs went to stderr, tagged with the trace


def test_ask_json_for_a_failed_run(rules_dir: Path, sqlite_url: str) -> None:
    done = ask(rules_dir, sqlite_url, "broken", check=False)
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert out["rule"] == "broken"
    assert "ZeroDivisionError" in out["error"]
    assert out["answer"] == f"no: {out['error']}"
    assert out["steps"][0]["error"] == out["error"]


def test_ask_without_a_matching_rule(rules_dir: Path, sqlite_url: str) -> None:
    out = json.loads(ask(rules_dir, sqlite_url, "nothing matches this").stdout)
    assert (out["rule"], out["answer"], out["error"], out["steps"]) == (None, "", None, [])


def test_ask_plain_prints_the_answer(rules_dir: Path, sqlite_url: str) -> None:
    done = run("ask", "count", "--rules", str(rules_dir), "--store", sqlite_url, "--user", "x")
    assert done.stdout == "count=1\n"


def test_a_value_saved_by_one_ask_is_read_by_the_next(rules_dir: Path, store_url: str) -> None:
    assert json.loads(ask(rules_dir, store_url, "count").stdout)["answer"] == "count=1"
    assert json.loads(ask(rules_dir, store_url, "note hello there").stdout)["error"] is None
    counter, notes = json.loads(ask(rules_dir, store_url, "read").stdout)["answer"].split("|")
    assert counter == "1"
    assert json.loads(notes) == {"ann": "hello there"}


# -- check ----------------------------------------------------------------------------


def test_check_passes_on_the_shipped_samples() -> None:
    done = run("check", "rules/")
    assert done.stdout.startswith("ok: ")
    assert not done.stdout.startswith("ok: 0 rules"), "rules/ ships no sample rules"


def test_check_fails_with_file_and_line_on_a_broken_file(rules_dir: Path) -> None:
    broken = rules_dir / "broken.yaml"
    broken.write_text(
        "rules:\n  - id: x\n    triggers: [x]\n    steps:\n      - plugin: NOPE\n"
        "      - plugin: ADJUST\n        inptu: 1\n",
        encoding="utf-8",
    )
    done = run("check", str(rules_dir), check=False)
    assert done.returncode != 0
    assert f"{broken}:5:" in done.stderr and "NOPE" in done.stderr
    assert f"{broken}:7:" in done.stderr and "inptu" in done.stderr
    assert done.stdout == ""


def test_check_reports_dead_triggers_but_passes(rules_dir: Path) -> None:
    (rules_dir / "z.yaml").write_text(
        "rules:\n  - {id: late, triggers: [count], steps: [{plugin: ADJUST}]}\n", encoding="utf-8"
    )
    done = run("check", str(rules_dir))
    assert "never fire" in done.stderr
    assert str(rules_dir / "z.yaml") + ":2:" in done.stderr


def test_check_on_yaml_syntax_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - id: a\n    triggers: [x\n", encoding="utf-8")
    done = run("check", str(bad), check=False)
    assert done.returncode != 0
    assert f"{bad}:" in done.stderr and "YAML" in done.stderr


# -- vars -----------------------------------------------------------------------------


def test_vars_set_then_get_across_processes(rules_dir: Path, sqlite_url: str) -> None:
    """A smoke test of real processes; the rest of ``vars`` runs in-process in
    tests/commands/test_variables.py."""
    common = ("--rules", str(rules_dir), "--store", sqlite_url, "--user", "ann")
    run("vars", "set", "counter", "41", *common)
    assert json.loads(run("vars", "get", "counter", *common).stdout) == 41


def test_bad_store_url_is_a_clear_error(rules_dir: Path) -> None:
    done = ask(rules_dir, "mysql://nowhere", "count", check=False)
    assert done.returncode == 2
    assert "store URL" in done.stderr
    assert done.stdout == ""
