"""``explain --event``: which rule takes a platform event and why, or why none does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tmy.cli
from tmy.explain import explain, message_for
from tmy.message import Event
from tmy.testing import Bot

RULES = """
rules:
  - id: vip_welcome
    events: [member_join]
    admin_only: true
    steps: [{plugin: ADJUST, input: "welcome, boss"}]
  - id: qq_welcome
    events: [member_join]
    platforms: [onebot]
    steps: [{plugin: ADJUST, input: "qq welcome {USER}"}]
  - id: welcome
    events: [member_join, member_leave]
    steps: [{plugin: ADJUST, input: "welcome {USER} ({EVENT_DATA[operator]})"}]
  - id: friends
    events: [friend_request]
    private: false
    steps:
      - {plugin: ADJUST, input: "?= EVENT_DATA['comment'] == 'tmy'", save: APPROVE}
      - {plugin: ADJUST, input: {text: ok, buttons: [Hi]}}
  - id: hi
    triggers: [hi]
    steps: [{plugin: ADJUST, input: hey}]
"""


def _event(kind: str, **data: object) -> Event:
    return Event(kind, "notice.test", {"user": "u1", "chat": "group:1", **data})


async def test_the_first_listening_rule_the_filters_admit_runs_and_why_the_others_did_not() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        message = message_for("", user="u1", chat="group:1", platform="onebot", private=False,
                              event=_event("member_join", operator="o2"))  # fmt: skip
        ex = await explain(bot.engine, message)
    data = ex.as_dict()
    out = ex.render()
    assert data["matched"] == "qq_welcome" and data["via"] == "event"
    assert out.splitlines()[0].startswith("matched rule 'qq_welcome' for the event member_join")
    assert "event: member_join (notice.test)" in out and "normalised" not in out
    assert "rules listening (rulebook order; the first the filters admit runs):" in out
    assert "  * qq_welcome  e.yaml:7  — the first rule in rulebook order" in out
    assert "  - vip_welcome  e.yaml:3  — refused: it answers admins only (admin_only)" in out
    rows = {r["rule"]: r for r in data["candidates"]}
    assert list(rows) == ["vip_welcome", "qq_welcome", "welcome"]
    assert rows["vip_welcome"]["why"] == "refused: it answers admins only (admin_only)"
    assert rows["qq_welcome"]["won"]
    assert rows["welcome"]["why"].startswith("later in rulebook order")
    assert data["reply"]["text"] == "qq welcome u1"
    assert data["event"]["data"]["operator"] == "o2"


async def test_no_rule_wants_it_and_the_reason_names_the_refusing_rule() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        private = message_for("", user="u1", event=_event("friend_request", comment="x"))
        none = message_for("", user="u1", event=_event("poke", target="bot"))
        ex = await explain(bot.engine, private)
        ex_none = await explain(bot.engine, none)
    assert ex.as_dict()["matched"] is None
    assert ex.headline == (
        "no reply: no rule wants the event friend_request: rule 'friends' lists it but "
        "it answers groups only"
    )
    assert ex_none.headline == (
        "no reply: no rule wants the event poke (no rule lists it under events:)"
    )
    assert "rules listening for poke: none" in ex_none.render()


async def test_approve_and_the_reply_parts_are_shown() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        message = message_for("", user="u1", chat="group:1", private=False,
                              event=_event("friend_request", comment="tmy"))  # fmt: skip
        ex = await explain(bot.engine, message)
    out = ex.render()
    assert ex.as_dict()["reply"]["approve"] is True
    assert "request: accept (APPROVE)" in out
    assert "with: buttons 'Hi'" in out


async def test_in_chat_explain_event_for_this_chat_and_another_user() -> None:
    async with Bot({"e.yaml": RULES}, admins=frozenset({"root"})) as bot:

        async def ask(text: str) -> str:
            reply = await bot.ask(text, user="root", chat="group:7", platform="onebot",
                                  private=False)  # fmt: skip
            return reply.text

        out = await ask(".tmy explain --event member_join --user newbie")
        data_out = await ask('.tmy explain --event member_leave --data {"operator": "o9"}')
        bad = await ask(".tmy explain --event member_joined")
    assert out.startswith("matched rule 'qq_welcome' for the event member_join")
    assert "reply: 'qq welcome newbie'" in out
    assert "reply: 'welcome root (o9)'" in data_out
    assert bad.startswith("error: --event: 'member_joined' is not one of member_join")


def test_cli_explain_event(
    rules_dir_events: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    common = ["--rules", str(rules_dir_events), "--store", store, "--user", "ann"]
    code = tmy.cli.main(["explain", "--event", "member_join", *common, "--platform", "onebot"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("matched rule 'qq_welcome' for the event member_join")
    code = tmy.cli.main(["explain", "--event", "member_leave", "--data", '{"operator": "x"}',
                         *common, "--json"])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["matched"] == "welcome" and data["reply"]["text"] == "welcome ann (x)"
    assert tmy.cli.main(["explain", "hi", "--event", "poke", *common]) == 2
    assert "not both" in capsys.readouterr().err
    assert tmy.cli.main(["explain", *common]) == 2
    assert tmy.cli.main(["explain", "--event", "member_joined", *common]) == 2
    assert "(did you mean 'member_join'?)" in capsys.readouterr().err


@pytest.fixture
def rules_dir_events(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "e.yaml").write_text(RULES, encoding="utf-8")
    return folder


async def test_a_follow_up_of_a_debounced_session_says_it_would_wait() -> None:
    rules = """
rules:
  - id: chat
    triggers: ["let's talk"]
    session: {seconds: 120, debounce: 4}
    steps: [{plugin: ADJUST, input: "heard: {QUESTION}"}]
"""
    async with Bot({"s.yaml": rules}) as bot:
        assert (await bot.ask("let's talk", user="ann")).text == "heard: "
        ex = await explain(bot.engine, message_for("how are you", user="ann", platform="test"))
    assert ex.matched == "chat" and ex.via == "session"
    assert any("would wait 4 s for more from the same user" in n for n in ex.notes)
    assert ex.reply["text"] == "heard: how are you"


def test_an_event_in_a_named_private_chat_is_private(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "f.yaml").write_text(
        "rules:\n  - id: fr\n    events: [friend_request]\n    private: true\n"
        "    steps: [{plugin: ADJUST, input: '?= True', save: APPROVE}]\n",
        encoding="utf-8",
    )
    common = ["--rules", str(folder), "--store", f"sqlite:///{tmp_path / 's.db'}"]
    for chat in ([], ["--chat", "private:bob"]):  # the default chat and the same one named
        code = tmy.cli.main(["explain", "--event", "friend_request", "--user", "bob", *common,
                             *chat, "--json"])  # fmt: skip
        data = json.loads(capsys.readouterr().out)
        assert code == 0 and data["matched"] == "fr", chat
