"""``cron fire RULE [--target PLATFORM:CHAT] [--dry-run]`` on every front end.

In a serving daemon (a loopback adapter named ``onebot`` stands for the platform)
the CLI asks the daemon, which posts through its adapter; without a daemon the CLI
runs the occurrence itself. Either way the run is kept in the cron history marked
manual and the scheduled fire times stay as they were.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tmy import cli
from tmy.command import CommandError
from tmy.commands.cron_fire import parse_target
from tmy.message import Target
from tmy.store import open_store
from tmy.store.base import MISSING
from tmy.testing import serving

RULES = """
variables:
  ticks: {scope: global, default: 0}
rules:
  - id: digest
    schedule:
      cron: "0 9 * * *"
      misfire_grace: 0  # on time only: a test daemon started at 09:00 does not run it too
      send_to: [{platform: onebot, chat: "group:5"}]
      input: daily digest
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "{QUESTION} #{ticks} in {CHAT} by {USER} at {FIRE_TIME}"}
  - id: quiet
    schedule: {cron: "0 0 1 1 *", misfire_grace: 0}
    steps: [{plugin: ADJUST, input: "logged only"}]
  - id: broken
    schedule: {cron: "0 0 1 1 *", misfire_grace: 0, send_to: [{platform: onebot, chat: "group:5"}]}
    steps: [{plugin: ADJUST, input: "?= 1 / 0"}]
  - id: hello
    triggers: [hello]
    steps: [{plugin: ADJUST, input: hi}]
"""
KEY = "k-cron-fire"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config whose listener nobody serves (the CLI finds no daemon there)."""
    import os

    for name in [k for k in os.environ if k.startswith("TMY_")]:
        monkeypatch.delenv(name)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES, encoding="utf-8")
    path = tmp_path / "tmy.yaml"
    path.write_text(
        f"rules: rules\nstore: sqlite:///{tmp_path / 'tmy.db'}\ntimezone: UTC\n"
        f"adapters: {{http: {{listen: '127.0.0.1:{_closed_port()}'}}}}\n",
        encoding="utf-8",
    )
    return path


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def _stored(config: Path, key: str) -> Any:
    store = open_store(f"sqlite:///{config.parent / 'tmy.db'}")
    await store.open()
    try:
        return await store.get(key)
    finally:
        await store.close()


# -- without a daemon: the CLI runs it here ------------------------------------------------------


def test_fire_without_a_daemon_runs_here_prints_the_reply_and_keeps_the_schedule(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, before, _ = _cli(capsys, "cron", "--json", "--config", str(config))
    assert code == 0
    next_before = json.loads(before)[0]["next"]

    code, out, err = _cli(
        capsys, "cron", "fire", "digest", "--config", str(config), "--user", "ann"
    )
    assert code == 0, err
    assert "note: no daemon answered at http://127.0.0.1:" in err and "running it here" in err
    head, reply = out.strip().splitlines()
    assert head.startswith("fired digest at ") and " -> onebot:group:5: ok, not sent: " in head
    assert "no onebot adapter in this process" in head
    assert reply.startswith("daily digest #1 in group:5 by cron at ")

    code, after, _ = _cli(capsys, "cron", "--json", "--config", str(config))
    job = json.loads(after)[0]
    assert job["next"] == next_before  # the next scheduled fire is untouched
    [run] = job["last_runs"]
    assert run["manual"] is True and run["by"] == "cli console:ann"
    assert run["outcome"] == "ok" and run["sent"].startswith("not sent: no onebot adapter")
    assert run["target"] == "onebot:group:5:" and len(run["trace_id"]) == 16
    code, text, _ = _cli(capsys, "cron", "--config", str(config))
    assert "(fired now by cli console:ann)" in text
    assert asyncio.run(_stored(config, "var/global/ticks")) == 1


def test_a_console_target_is_posted_by_printing_and_json_lists_the_runs(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cron", "fire", "digest", "--target", "console:me", "--json", "--config", str(config)]
    code, out, _ = _cli(capsys, *argv)
    assert code == 0
    data = json.loads(out)
    assert data["rule"] == "digest" and data["dry_run"] is False and data["in"] == "here"
    [run] = data["runs"]
    assert run["target"] == "console:me" and run["sent"] == "ok" and run["outcome"] == "ok"
    assert run["reply"].startswith("daily digest #1 in me by cron at ")


def test_a_rule_without_send_to_is_logged_only(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "cron", "fire", "quiet", "--config", str(config))
    assert code == 0
    assert "-> (no send_to: the reply is only logged): ok, sent logged only" in out
    assert out.strip().endswith("logged only")


def test_dry_run_sends_and_stores_nothing_and_shows_what_would_be_sent(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "cron", "fire", "digest", "--dry-run", "--config", str(config))
    assert code == 0, err
    assert "note:" not in err  # a dry run never asks a daemon
    lines = out.strip().splitlines()
    assert lines[0].startswith("dry run of digest at ") and "nothing is sent or stored" in lines[0]
    assert lines[1] == "would send to onebot:group:5:"
    assert lines[2].startswith("daily digest #1 in group:5 by cron at ")
    assert lines[3] == "  would write var/global/ticks = 1"
    assert asyncio.run(_stored(config, "var/global/ticks")) is MISSING  # nothing stored
    code, after, _ = _cli(capsys, "cron", "--json", "--config", str(config))
    assert json.loads(after)[0]["last_runs"] == []  # and no history
    code, out, _ = _cli(capsys, "cron", "fire", "digest", "--dry-run", "--json", "--config",
                        str(config))  # fmt: skip
    [run] = json.loads(out)["runs"]
    assert run["would_send"] is True and run["writes"] == {"var/global/ticks": 1}


def test_unknown_and_unscheduled_rules_and_bad_targets_are_usage_errors(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--config", str(config)]
    code, _, err = _cli(capsys, "cron", "fire", "digset", "--dry-run", *base)
    assert code == 2
    assert "error: no rule 'digset' (did you mean 'digest'?) (scheduled rules: digest, quiet, "
    assert "broken)" in err
    code, _, err = _cli(capsys, "cron", "fire", "hello", "--dry-run", *base)
    assert code == 2 and "error: rule 'hello' (" in err and "has no 'schedule:'" in err
    code, _, err = _cli(capsys, "cron", "fire", "--dry-run", *base)
    assert code == 2 and "usage: cron fire RULE [--target PLATFORM:CHAT] [--dry-run]" in err
    code, _, err = _cli(capsys, "cron", "fire", "digest", "--target", "onebot", "--dry-run", *base)
    assert code == 2 and "--target takes PLATFORM:CHAT" in err
    code, _, err = _cli(capsys, "cron", "fire", "digest", "--target", "onebto:g", "--dry-run",
                        *base)  # fmt: skip
    assert code == 2 and "no adapter can post to 'onebto' here (did you mean 'onebot'?)" in err
    code, _, err = _cli(capsys, "cron", "--dry-run", *base)  # the report takes no fire flags
    assert code == 2 and "error: --target and --dry-run go with cron fire RULE" in err


def test_a_failed_run_exits_1_and_is_kept_as_an_error(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "cron", "fire", "broken", "--config", str(config))
    assert code == 1
    assert "fired broken at " in err and ": error: " in err and "division by zero" in err
    code, after, _ = _cli(capsys, "cron", "--json", "--config", str(config))
    [run] = next(j for j in json.loads(after) if j["rule"] == "broken")["last_runs"]
    assert run["outcome"] == "error" and run["manual"] is True


def test_the_listener_off_in_the_config_means_no_daemon_is_asked(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config.write_text(config.read_text().replace("http: {", "http: {enabled: false, "))
    code, _, err = _cli(capsys, "cron", "fire", "quiet", "--config", str(config))
    assert code == 0
    assert err.startswith("note: adapters.http is off in the config, so no daemon can be asked")


# -- in a serving daemon: its adapter posts --------------------------------------------------------


async def test_the_cli_asks_the_running_daemon_which_posts_through_its_adapter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'd.db'}"
    async with serving({"r.yaml": RULES}, store=store, platform="onebot",
                       http_api_keys=(KEY,)) as daemon:  # fmt: skip
        rules = tmp_path / "rules"
        rules.mkdir()
        (rules / "r.yaml").write_text(RULES)
        argv = ["cron", "fire", "digest", "--url", daemon.url, "--key", KEY, "--rules", str(rules),
                "--store", store, "--user", "ann"]  # fmt: skip
        capsys.readouterr()
        code = await asyncio.to_thread(cli.main, argv)
        out, err = capsys.readouterr()
        assert code == 0, err
        assert err == ""
        post = await daemon.pop()
        assert post.target.platform == "onebot" and post.target.chat == "group:5"
        assert post.text.startswith("daily digest #1 in group:5 by cron at ")
        head, reply = out.strip().splitlines()
        assert head.endswith(")") and " -> onebot:group:5: ok, sent ok (trace " in head
        assert reply == post.text

        # --target overrides where it goes; --json prints the daemon's data
        code = await asyncio.to_thread(cli.main, [*argv, "--target", "onebot:group:9", "--json"])
        data = json.loads(capsys.readouterr().out)
        assert code == 0 and data["in"] == "daemon"
        post = await daemon.pop()
        assert post.target.chat == "group:9" and post.text.startswith("daily digest #2 in group:9")
        assert data["runs"][0]["reply"] == post.text and data["runs"][0]["sent"] == "ok"

        history = await daemon.app.store.get("cron/hist/digest")
        assert [r["target"] for r in history] == ["onebot:group:5:", "onebot:group:9:"]
        assert all(r["manual"] and r["by"] == "http console:ann" for r in history)
        assert await daemon.var("ticks") == 2
        # a wrong key is refused by the daemon, not run here instead
        wrong = [("nope" if a == KEY else a) for a in argv]
        code = await asyncio.to_thread(cli.main, wrong)
        assert code == 2 and "invalid API key" in capsys.readouterr().err
        assert await daemon.var("ticks") == 2
    assert daemon.sent == []


async def test_chat_and_http_fire_through_the_daemons_scheduler(tmp_path: Path) -> None:
    async with serving({"r.yaml": RULES}, platform="onebot", admins=("onebot:root",),
                       http_api_keys=(KEY,)) as daemon:  # fmt: skip
        answer = await daemon.push(".tmy cron fire digest", user="root")
        post = await daemon.pop()
        assert post.text.startswith("daily digest #1 in group:5")
        assert answer.text.startswith("fired digest at ")
        assert answer.text.endswith("\n" + post.text)

        dry = await daemon.push(".tmy cron fire digest --dry-run --target onebot:group:7",
                                user="root")  # fmt: skip
        assert "would send to onebot:group:7:" in dry.text and "#2 in group:7" in dry.text
        nowhere = await daemon.push(".tmy cron fire digest --target console:me", user="root")
        assert nowhere.text == (
            "error: no adapter can post to 'console' here; --target takes one of: onebot"
        )
        refused = await daemon.push(".tmy cron fire digest", user="stranger")
        assert refused.text == ""  # an admin command: no answer to anyone else

        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
            headers = {"Authorization": f"Bearer {KEY}"}
            body = {"args": {"action": "fire", "rule": "digest", "target": "onebot:group:8"}}
            response = await client.post("/admin/commands/cron", json=body, headers=headers)
            assert response.status_code == 200 and response.json()["ok"] is True
            post = await daemon.pop()
            assert post.target.chat == "group:8" and post.text.startswith("daily digest #2")
            argv = await client.post("/admin/commands/cron", json={"argv": "fire nope"},
                                     headers=headers)  # fmt: skip
            assert argv.status_code == 400
            assert argv.json()["text"].startswith("error: no rule 'nope'")
            report = await client.post("/admin/commands/cron", json={"args": {}}, headers=headers)
            assert report.json()["text"].startswith("digest  cron '0 9 * * *' (")
        assert daemon.sent == []
        assert await daemon.var("ticks") == 2


def test_a_target_where_nothing_can_post_says_so() -> None:
    with pytest.raises(CommandError) as caught:
        parse_target("onebot:group:5", ())
    assert "this daemon runs no adapter that posts" in str(caught.value)
    assert "takes one of" not in str(caught.value)


def test_a_target_through_satori_names_the_platform_behind_it() -> None:
    assert parse_target("satori:qq:4242") == Target("satori:qq", "4242")
    assert parse_target("slack:C0123") == Target("slack", "C0123")
    with pytest.raises(CommandError, match="no adapter can post to 'satori:qq' here"):
        parse_target("satori:qq:4242", ("onebot",))


def test_a_satori_target_without_its_platform_or_chat_is_refused() -> None:
    for text in ("satori:qq", "satori:1234"):
        with pytest.raises(CommandError, match="names the platform behind the server"):
            parse_target(text)
    with pytest.raises(CommandError, match="a qq chat is group:"):
        parse_target("qq:12345")
    with pytest.raises(CommandError, match="did you mean 'group:5'"):
        parse_target("onebot:5")  # the same check send_to: gets at load
