"""``run.py check`` judges the config values the config layer cannot: ``error_reply``,
and a web console without a password (which would stop ``serve``).

It compiles in tmy.values (above tmy.config), so load_settings passes it; check
refuses a bad one with the file and line, as load_settings words its own errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tmy.cli

REPO = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "tmy.yaml"
    path.write_text(
        f"rules: {REPO / 'rules'}\nplugins: {REPO / 'plugins'}\n"
        f"store: 'sqlite:///:memory:'\nwatch: false\n{extra}",
        encoding="utf-8",
    )
    return path


def test_check_refuses_an_error_reply_naming_anything_but_run_locals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "error_reply: '{NOPE}'\n")
    assert tmy.cli.main(["check", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {config}:5: error_reply '{{NOPE}}' refers to 'NOPE'; it may use only run "
        "locals such as {STEP_ERROR}, {USER_NAME} or {QUESTION}"
    )


def test_check_takes_an_error_reply_of_run_locals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "error_reply: 'sorry {USER_NAME}: {STEP_ERROR}'\n")
    assert tmy.cli.main(["check", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def test_check_refuses_a_console_without_a_password_as_serve_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TMY_CONSOLE_PASSWORD", raising=False)
    config = _config(tmp_path, "console:\n  enabled: true\n")
    assert tmy.cli.main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {config}:6: console.enabled is true but no console password")
    assert "console.password" in err and "TMY_CONSOLE_PASSWORD" in err
    monkeypatch.setenv("TMY_CONSOLE_PASSWORD", "from-env")
    assert tmy.cli.main(["check", "--config", str(config)]) == 0


def test_ask_shows_a_structured_replys_parts_beside_its_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    cli = tmy.cli
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "rules:\n  - id: cat\n    triggers: [cat]\n    steps:\n"
        "      - plugin: ADJUST\n"
        "        input: {text: a cat, image: 'https://x/c.png', buttons: [[More, Less]],"
        " reply: true}\n",
        encoding="utf-8",
    )
    base = ["--rules", str(rules), "--store", f"sqlite:///{tmp_path / 't.db'}"]
    assert cli.main(["ask", "cat", *base]) == 0
    out, err = capsys.readouterr()
    assert out == "a cat\n"
    assert "(with images: https://x/c.png; buttons: More Less; quotes: the message)" in err
    assert cli.main(["ask", "cat", "--json", *base]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["outgoing"]["images"] == ["https://x/c.png"]
    assert data["outgoing"]["reply_to"] == ""
