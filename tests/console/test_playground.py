"""The console's Playground: the form (query, POST, scripts), explain's dry and real runs
on a real engine, conversation mode; and the page served by a real daemon over loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.console import console_daemon, logged_in
from tests.support.log_helpers import read_log
from tmy import logs
from tmy.console import playground as pg
from tmy.testing import Bot, Daemon
from tmy.testing.bot import read_var

RULES = """\
variables:
  visits: {scope: user, default: 0}
rules:
  - id: greet
    triggers: ["hello"]
    steps:
      - {plugin: ADJUST, input: "?= visits + 1", save: visits}
      - {plugin: ADJUST, input: "hi {USER_NAME}, visit {visits}"}
  - id: greet_group
    triggers: ["hello"]
    priority: 5
    private: false
    mention: true
    steps: [{plugin: ADJUST, input: "hello all"}]
  - id: roll
    triggers: [roll]
    cooldown: {seconds: 30, per: user, reply: "slow down {USER_NAME}"}
    steps: [{plugin: ADJUST, input: "rolled"}]
  - id: welcome
    events: [member_join]
    steps: [{plugin: ADJUST, input: "welcome {USER} ({EVENT_DATA[note]})"}]
  - id: admin_only
    triggers: [secret]
    admin_only: true
    steps: [{plugin: ADJUST, input: "the secret"}]
"""


@pytest.fixture
async def bot():
    async with Bot({"p.yaml": RULES}) as bot:
        yield bot


def test_form_from_a_replay_link() -> None:
    form = pg.form_from({"text": "hi", "user": "ann", "chat": "g1", "platform": "onebot"})
    assert (form.text, form.user, form.chat, form.platform) == ("hi", "ann", "g1", "onebot")
    assert form.private is False and form.run is False and form.admin is False
    private = pg.form_from({"text": "hi", "user": "ann", "chat": "private:ann"})
    assert private.private is True
    assert pg.form_from({"text": "hi"}).private is True  # no chat: the private chat
    assert pg.form_from({"text": "hi", "private": "0", "chat": ""}).private is False


def test_form_from_a_submitted_form() -> None:
    # an unticked checkbox is absent: off, also for private without a chat
    form = pg.form_from({"text": "x", "user": " ", "platform": "", "sent": "1"})
    assert form.private is False and form.user == "console" and form.platform == "console"
    ticked = pg.form_from(
        {"text": "x", "private": "on", "mention": "1", "admin": "on", "run": "on", "sent": "1"}
    )
    assert ticked.private and ticked.mention and ticked.admin and ticked.run
    assert pg.form_from({"text": "x", "run": True}).run is True  # a JSON body


def test_history_is_checked_and_cut() -> None:
    assert pg.history_from("not json") == []
    assert pg.history_from('{"a": 1}') == []
    entries = [{"text": f"t{i}", "reply": "r" * 900, "rule": "x"} for i in range(30)]
    got = pg.history_from(json.dumps([*entries, "junk"]))
    assert len(got) == pg.HISTORY - 1 and got[0]["text"] == "t11"
    assert got[0]["reply"].startswith("r" * pg.HISTORY_CHARS) and len(got[0]["reply"]) < 520
    assert got[0]["error"] is None and got[0]["run"] is False


async def test_a_dry_run_explains_and_stores_nothing(bot: Bot) -> None:
    form = pg.form_from({"text": "hello", "user": "ann", "user_name": "<b>Ann</b>"})
    data = await pg.play(bot.engine, form)
    assert data["matched"] == "greet" and data["dry_run"] is True
    assert data["reply"]["text"] == "hi <b>Ann</b>, visit 1"
    assert data["headline"].startswith("matched rule 'greet'")
    assert data["rule_at"] == "p.yaml:4"
    won = [c for c in data["candidates"] if c["won"]]
    assert [c["rule"] for c in won] == ["greet"]
    refused = next(c for c in data["candidates"] if c["rule"] == "greet_group")
    assert "refused" in refused["why"]
    steps = data["steps"]
    assert [s["uri"] for s in steps] == ["greet/0", "greet/1"]
    assert steps[0]["input"] == 1 and steps[0]["error"] is None and "ms" in steps[0]
    assert data["writes"] and "greet/0" in data["rendered"]
    assert await bot.var("visits", user="ann", chat="private:ann") == 0


async def test_a_filtered_message_and_a_near_miss(bot: Bot) -> None:
    data = await pg.play(bot.engine, pg.form_from({"text": "secret", "user": "bob"}))
    assert data["matched"] is None and data["ran"] is False
    assert "admins only" in data["reason"]
    admin = await pg.play(bot.engine, pg.form_from({"text": "secret", "admin": "1"}))
    assert admin["reply"]["text"] == "the secret"
    miss = await pg.play(bot.engine, pg.form_from({"text": "hello there"}))
    assert miss["matched"] is None and miss["near_misses"]


async def test_group_and_mention(bot: Bot) -> None:
    form = pg.form_from({"text": "hello", "chat": "g1", "mention": "1", "sent": "1"})
    data = await pg.play(bot.engine, form)
    assert data["matched"] == "greet_group" and data["message"]["private"] is False


async def test_run_for_real_and_a_conversation_meets_the_cooldown(bot: Bot) -> None:
    form = pg.form_from({"text": "roll", "user": "cy", "run": "1", "conversation": "1"})
    first = await pg.play(bot.engine, form)
    assert first["reply"]["text"] == "rolled" and first["dry_run"] is False
    nxt = pg.after(form, first)
    assert nxt.text == "" and nxt.user == "cy" and nxt.conversation
    assert nxt.history == [
        {"text": "roll", "reply": "rolled", "rule": "roll", "error": None, "run": True}
    ]
    nxt.text = "roll"
    second = await pg.play(bot.engine, nxt)
    assert second["reply"]["text"] == "slow down cy"
    assert len(pg.after(nxt, second).history) == 2
    # a dry run after it sees the cooldown too (it reads the store)
    dry = await pg.play(bot.engine, pg.form_from({"text": "roll", "user": "cy"}))
    assert "cooling down" in (dry["reason"] or "")


async def test_an_event_instead_of_a_text(bot: Bot) -> None:
    form = pg.form_from({"event": "member_join", "data": '{"note": "new"}', "user": "eve"})
    data = await pg.play(bot.engine, form)
    assert data["matched"] == "welcome" and data["reply"]["text"] == "welcome eve (new)"
    assert data["event"]["kind"] == "member_join"
    for bad, words in (("nope", "not one of"), ("member_join", "not JSON")):
        with pytest.raises(pg.FormError, match=words):
            await pg.play(bot.engine, pg.form_from({"event": bad, "data": "{"}))
    with pytest.raises(pg.FormError, match="JSON map"):
        await pg.play(bot.engine, pg.form_from({"event": "poke", "data": "[1]"}))


def test_without_conversation_the_form_stays() -> None:
    form = pg.form_from({"text": "roll"})
    assert pg.after(form, {"reply": {"text": "x"}}) is form


# -- the page, served ----------------------------------------------------------------------------

XSS = "<script>alert(1)</script>"


async def visits(daemon: Daemon, user: str) -> int:
    """``visits`` of a console-platform user in their private chat (the playground's default)."""
    chat = f"private:{user}"
    return await read_var(daemon.engine, "visits", user=user, chat=chat, platform="console")


@pytest.fixture
async def served():
    async with console_daemon({"p.yaml": RULES}) as daemon:
        yield daemon


async def test_the_form_is_prefilled_from_a_replay_link(served: Daemon) -> None:
    async with logged_in(served) as client:
        query = {"text": "hello", "user": "ann", "chat": "g1", "platform": "onebot", "run": "1"}
        html = (await client.get("playground", params=query)).text
        assert '<textarea name="text"' in html and ">hello</textarea>" in html
        assert 'name="user" value="ann"' in html and 'name="platform" value="onebot"' in html
        assert 'name="private" value="1">' in html  # a group chat: not ticked
        assert 'name="run" value="1">' in html  # a link never runs for real
        for name in pg.FIELDS:
            assert f'name="{name}"' in html
        data = await client.json("playground", text="hi", user="<b>")
        assert data["form"]["text"] == "hi" and data["form"]["private"] is True
        assert data["result"] is None
        blank = await client.json("playground")
        assert blank["form"]["user"] == "console" and blank["form"]["private"] is True


async def test_a_dry_send_shows_the_reply_and_the_explanation(served: Daemon) -> None:
    async with logged_in(served) as client:
        form = {"text": "hello", "user": "ann", "user_name": XSS, "private": "1", "sent": "1"}
        response = await client.post("playground", data=form)
        assert response.status_code == 200
        html = response.text
        assert XSS not in html and "hi &lt;script&gt;alert(1)&lt;/script&gt;, visit 1" in html
        assert "matched rule &#39;greet&#39;" in html and "p.yaml:4" in html
        assert "greet/0" in html and "greet/1" in html and "Dry run" in html
        assert "greet_group" in html and "refused" in html  # the loser, and why
        data = (await client.post("playground", data=form, params={"format": "json"})).json()
        assert data["result"]["reply"]["text"] == f"hi {XSS}, visit 1"
        assert data["result"]["steps"][0]["result"] == 1
        assert await visits(served, "ann") == 0  # nothing stored
        empty = await client.post("playground", data={"text": " "})
        assert empty.status_code == 400 and "type a message" in empty.text


async def test_run_for_real_in_a_conversation(served: Daemon, log_file: Path) -> None:
    async with logged_in(served) as client:
        form = {"text": "hello", "user": "dee", "run": "1", "conversation": "1", "sent": "1"}
        first = (await client.post("playground", data=form, params={"format": "json"})).json()
        assert first["result"]["reply"]["text"] == "hi dee, visit 1"
        assert first["form"]["text"] == "" and first["form"]["user"] == "dee"
        again = {**form, "history": json.dumps(first["history"])}
        html = (await client.post("playground", data=again)).text
        assert "hi dee, visit 2" in html and "hi dee, visit 1" in html  # the transcript
        assert "Run for real" in html
        assert await visits(served, "dee") == 2
    async with logged_in(served, viewer=True) as viewer:
        refused = await viewer.post("playground", data=form)
        assert refused.status_code == 403
        dry = await viewer.post("playground", data={**form, "run": None})
        assert dry.status_code == 200 and "hi dee, visit 3" in dry.text
    assert await visits(served, "dee") == 2
    logs.flush()
    runs = [e for e in read_log(log_file) if e.get("what") == "playground.run"]
    who = [(e["role"], e["user"], e["client"]) for e in runs]
    assert who == [("admin", "dee", "127.0.0.1")] * 2


async def test_an_event_sent_from_the_page(served: Daemon) -> None:
    async with logged_in(served) as client:
        form = {"event": "member_join", "data": '{"note": "<i>x</i>"}', "user": "fay", "sent": "1"}
        html = (await client.post("playground", data=form)).text
        assert "welcome fay (&lt;i&gt;x&lt;/i&gt;)" in html and "<i>x</i>" not in html
        bad = await client.post("playground", data={**form, "data": "{"})
        assert bad.status_code == 400 and "not JSON" in bad.text
