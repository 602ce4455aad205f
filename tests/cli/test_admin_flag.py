"""``ask``, ``chat`` and ``explain`` take ``--admin``: the message comes from an admin, so
``admin_only`` rules answer and ``.tmy`` commands run, whatever ``admins:`` says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tmy import cli

REPO = Path(__file__).resolve().parents[2]

RULES = """
rules:
  - id: secret
    admin_only: true
    triggers: [secret]
    steps: [{plugin: ADJUST, input: "only for {USER}"}]
  - id: open
    triggers: [open]
    steps: [{plugin: ADJUST, input: "for anyone"}]
"""


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    for name in [k for k in os.environ if k.startswith("TMY_")]:
        monkeypatch.delenv(name)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES, encoding="utf-8")
    config = tmp_path / "tmy.yaml"
    config.write_text(f"rules: rules\nstore: sqlite:///{tmp_path / 't.db'}\n", encoding="utf-8")
    return ["--config", str(config), "--user", "ann"]


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ask_admin_reaches_admin_only_rules_and_admin_commands(
    base: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _main(capsys, "ask", "secret", *base)
    assert code == 0 and out == ""
    assert err == "(no reply: rule 'secret' matched but it answers admins only (admin_only))\n"
    code, out, _ = _main(capsys, "ask", "secret", "--admin", *base)
    assert code == 0 and out == "only for ann\n"
    code, out, _ = _main(capsys, "ask", "secret", "--admin", "--json", *base)
    assert '"rule": "secret"' in out
    # the .tmy commands answer admins only: --admin is how to try them from the CLI
    code, out, err = _main(capsys, "ask", ".tmy rules", *base)
    assert out == "" and err.endswith(
        "(no reply: '.tmy' commands answer admins only: add --admin, or list this user "
        "under admins: in the config)\n"
    )
    code, out, err = _main(capsys, "ask", ".tmy rules", "--admin", *base)
    assert code == 0 and out.startswith("2 rules in 1 files\n")
    assert "message.received" not in err  # a one-shot command logs warnings only


def test_explain_admin_matches_an_admin_only_rule(
    base: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _main(capsys, "explain", "secret", *base)
    assert code == 0 and out.startswith("no reply: ")
    assert "admins only" in out
    code, out, _ = _main(capsys, "explain", "secret", "--admin", *base)
    assert code == 0 and out.startswith("matched rule 'secret' by trigger 'secret' (")
    assert "only for ann" in out


@pytest.mark.slow
def test_chat_admin_treats_every_line_as_an_admins(base: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}

    def chat(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "run.py", "chat", *base, *extra],
            cwd=REPO,
            env=env,
            input="secret\nopen\n",
            capture_output=True,
            text=True,
            timeout=60,
        )

    plain = chat()
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "for anyone\n"
    assert "answers admins only (admin_only)" in plain.stderr
    admin = chat("--admin")
    assert admin.returncode == 0, admin.stderr
    assert admin.stdout == "only for ann\nfor anyone\n"
    assert admin.stderr.startswith("tmy chat as ann (admin) — 2 rules.")
