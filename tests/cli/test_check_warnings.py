"""``check`` warnings beyond the rulebook: triggers two files claim, adapters the config
leaves off. Warnings go to stderr as ``warning: file:line: …``; the exit status stays 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tmy import cli

DEMO = """\
rules:
  - id: demo_ai
    triggers:
      - "ai *"
      - hello
      - "re:^pi(ng)?$"
    steps: [{plugin: ADJUST, input: demo}]
  - id: demo_menu
    triggers: ["menu"]
    steps: [{plugin: ADJUST, input: menu}]
  - id: here_only
    platforms: [kook]
    triggers: [help]
    steps: [{plugin: ADJUST, input: here}]
"""

MINE = """\
rules:
  - id: my_ai
    triggers:
      - "ai *"
      - "hello *"
      - "a*"
      - "re:^pi(ng)?$"
    steps: [{plugin: ADJUST, input: mine}]
  - id: my_menu
    priority: 5
    triggers: ["menu *"]
    steps: [{plugin: ADJUST, input: mine}]
  - id: elsewhere
    platforms: [wechat]
    triggers: [help]
    steps: [{plugin: ADJUST, input: elsewhere}]
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in [k for k in os.environ if k.startswith("TMY_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "tmy.yaml").write_text("rules: rules\n", encoding="utf-8")
    return tmp_path


def _check(capsys: pytest.CaptureFixture[str], folder: Path, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["check", "--config", str(folder / "tmy.yaml"), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _warnings(err: str) -> list[str]:
    lines = err.strip().splitlines()
    assert all(line.startswith("warning: ") for line in lines), err
    return [line.removeprefix("warning: ") for line in lines]


def test_triggers_two_files_claim_are_named_with_both_places_and_the_winner(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "rules" / "a_demo.yaml").write_text(DEMO, encoding="utf-8")
    (folder / "rules" / "b_mine.yaml").write_text(MINE, encoding="utf-8")
    code, out, err = _check(capsys, folder)
    assert code == 0
    assert out.startswith("ok: 6 rules, 11 triggers")
    demo, mine = "rules/a_demo.yaml", "rules/b_mine.yaml"
    assert _warnings(err) == [
        # the same trigger: the file read first wins; reported once (not also as a dead trigger)
        f"{mine}:4: trigger 'ai *' of rule 'my_ai' collides with trigger 'ai *' of rule "
        f"'demo_ai' ({demo}:4): both answer 'ai', and rule 'demo_ai' wins (same priority and "
        f"kind: {demo} is read first); 'ai *' can never fire (give one rule a higher "
        "'priority:', or another trigger)",
        # a word and the word with more after it both answer the bare word
        f"{mine}:5: trigger 'hello *' of rule 'my_ai' collides with trigger 'hello' of rule "
        f"'demo_ai' ({demo}:5): both answer 'hello', and rule 'demo_ai' wins (exact before "
        "prefix triggers) (give one rule a higher 'priority:', or another trigger)",
        # a priority decides, whatever the file order
        f"{demo}:9: trigger 'menu' of rule 'demo_menu' collides with trigger 'menu *' of rule "
        f"'my_menu' ({mine}:11): both answer 'menu', and rule 'my_menu' wins (priority 5 over "
        "0); 'menu' can never fire (give one rule a higher 'priority:', or another trigger)",
        # a regex cannot be probed: the same pattern collides
        f"{mine}:7: trigger 're:^pi(ng)?$' of rule 'my_ai' collides with trigger 're:^pi(ng)?$' "
        f"of rule 'demo_ai' ({demo}:6): both answer 're:^pi(ng)?$', and rule 'demo_ai' wins "
        f"(same priority and kind: {demo} is read first) (give one rule a higher 'priority:', "
        "or another trigger)",
    ]
    # 'a*' is merely broader than 'ai *'; the two 'help' rules answer on different platforms


def test_triggers_of_one_file_are_left_to_the_dead_trigger_warning(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "rules" / "one.yaml").write_text(DEMO + MINE.removeprefix("rules:\n"))
    code, _, err = _check(capsys, folder)
    assert code == 0
    assert "collides" not in err
    assert "trigger 'ai *' of rule 'my_ai' can never fire: rule 'demo_ai'" in err


ADAPTERS = """\
rules:
  - id: qq
    triggers: [qq]
    platforms: [onebot]
    steps: [{plugin: ADJUST, input: qq}]
  - id: both
    triggers: [both]
    platforms: [onebot, console]
    steps: [{plugin: ADJUST, input: both}]
  - id: news
    schedule:
      every: 1h
      send_to:
        - {platform: console, chat: me}
        - {platform: telegram, chat: "-100"}
    steps: [{plugin: ADJUST, input: news}]
"""


def test_rules_naming_an_adapter_the_config_leaves_off(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "rules" / "r.yaml").write_text(ADAPTERS, encoding="utf-8")
    code, out, err = _check(capsys, folder)
    assert code == 0 and out.startswith("ok: 3 rules")
    assert _warnings(err) == [
        "rules/r.yaml:4: rule 'qq' answers on onebot (platforms:), but the config does not "
        "enable the onebot adapter (set adapters.onebot.enabled: true); it answers nowhere",
        "rules/r.yaml:8: rule 'both' answers on onebot (platforms:), but the config does not "
        "enable the onebot adapter (set adapters.onebot.enabled: true)",
        "rules/r.yaml:15: rule 'news' posts to telegram:-100 (send_to), but the config does not "
        "enable the telegram adapter (set adapters.telegram.enabled: true); each post fails "
        "until that adapter is enabled",
    ]
    (folder / "tmy.yaml").write_text(
        "rules: rules\nadapters:\n  onebot: {enabled: true}\n"
        "  telegram: {enabled: true, token_env: TMY_TEST_NO_TOKEN}\n",
        encoding="utf-8",
    )
    code, _, err = _check(capsys, folder)
    assert code == 0 and err == ""


def test_warnings_keep_exit_0_and_errors_still_exit_1(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "rules" / "r.yaml").write_text(ADAPTERS, encoding="utf-8")
    (folder / "rules" / "bad.yaml").write_text(
        "rules:\n  - id: x\n    triggers: [x]\n    steps: [{plugin: NOPE}]\n"
    )
    code, out, err = _check(capsys, folder)
    assert code == 1 and out == ""
    assert "rules/bad.yaml:4" in err and "NOPE" in err


def test_platforms_behind_one_bridge_name_its_adapter_once(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = """\
rules:
  - id: bridged
    triggers: [hi]
    platforms: [satori:qq, satori:kook]
    steps: [{plugin: ADJUST, input: hi}]
"""
    (folder / "rules" / "r.yaml").write_text(rules, encoding="utf-8")
    code, _, err = _check(capsys, folder)
    assert code == 0
    assert _warnings(err) == [
        "rules/r.yaml:4: rule 'bridged' answers on satori:kook, satori:qq (platforms:), but the "
        "config does not enable the satori adapter (set adapters.satori.enabled: true); "
        "it answers nowhere",
    ]
