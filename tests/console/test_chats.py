"""The console's Chats page: its data (the chats the switch keeps off, merged with the
chats seen recently) and the page on a served daemon (switch off and on, the bot falls
silent and answers again, viewer refused, escaping, JSON)."""

from __future__ import annotations

from pathlib import Path

from tests.support.console import console_daemon, logged_in
from tests.support.log_helpers import read_log
from tmy.console.chats import chat_rows, off_chats
from tmy.console.feed import attach
from tmy.message import Message
from tmy.testing import Bot

RULES = "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hey}]}\n"


async def test_off_chats_come_from_the_switch_and_merge_with_recent_ones() -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        switch = bot.app.switch
        assert switch is not None and bot.app.store is not None
        await switch.set(Message("", user="op", chat="group/1", platform="onebot"), True)
        await switch.set(Message("", user="op", chat="c2", platform="test"), True)
        await switch.set(Message("", user="op", chat="c2", platform="test"), False)
        off = await off_chats(bot.app.store)
        assert off == {("onebot", "group/1"): "onebot:op"}
    recent = [
        {"platform": "test", "chat": "c3", "last_seen": "10:00", "messages": 4},
        {"platform": "onebot", "chat": "group/1", "last_seen": "09:00", "messages": 1},
        {"platform": "test", "chat": "c3", "last_seen": "08:00"},  # twice: kept once
        {"platform": "", "chat": "x"},
    ]
    rows = chat_rows(recent, {**off, ("test", "gone"): "test:op"})
    assert [(r["chat"], r["off"]) for r in rows] == [
        ("c3", False),
        ("group/1", True),
        ("gone", True),
    ]
    assert rows[0]["messages"] == 4 and rows[1]["by"] == "onebot:op"


# -- the page on a served daemon ---------------------------------------------------------------

EVIL = "<script>alert(1)</script>"


async def test_switching_a_chat_off_silences_the_bot_there_and_on_brings_it_back(
    log_file: Path,
) -> None:
    async with console_daemon({"r.yaml": RULES}) as daemon:
        attach(daemon.engine)  # the console's counters (the live pages attach them too)
        assert (await daemon.push("hi", user="ann", chat="group:1")).text == "hey"
        await daemon.push("hello?", user=EVIL, chat=EVIL)
        async with logged_in(daemon) as admin:
            page = await admin.get("chats")
            assert page.status_code == 200 and "group:1" in page.text
            assert EVIL not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
            data = await admin.json("chats")
            assert [(c["chat"], c["off"]) for c in data["chats"]] == [
                (EVIL, False),
                ("group:1", False),
            ]
            assert data["chats"][1]["rule"] == "hi" and data["chats"][1]["last_seen"]

            one = {"platform": "test", "chat": "group:1"}
            off = await admin.post("chats/switch", {**one, "state": "off"})
            assert off.status_code == 303 and off.headers["Location"] == "/console/chats"
            assert (await daemon.push("hi", user="ann", chat="group:1")).text == ""
            assert (await daemon.push("hi", user="ann", chat="group:2")).text == "hey"
            data = await admin.json("chats")
            assert {c["chat"]: c["off"] for c in data["chats"]}["group:1"] is True
            assert data["off"] == 1

            far = {"platform": "onebot", "chat": "group:9", "state": "off"}  # never seen
            assert (await admin.post("chats/switch", far)).status_code == 303
            last = (await admin.json("chats"))["chats"][-1]
            assert (last["platform"], last["chat"], last["off"]) == ("onebot", "group:9", True)

            bad = await admin.post("chats/switch", {**one, "state": "maybe"})
            assert bad.status_code == 400
            assert (await admin.post("chats/switch", {"state": "off"})).status_code == 400
        async with logged_in(daemon, viewer=True) as viewer:
            page = await viewer.get("chats")
            assert "Switch" not in page.text
            assert (await viewer.post("chats/switch", {**one, "state": "on"})).status_code == 403
        async with logged_in(daemon) as admin:
            assert (await admin.post("chats/switch", {**one, "state": "on"})).status_code == 303
        assert (await daemon.push("hi", user="ann", chat="group:1")).text == "hey"
    changes = [e for e in read_log(log_file) if e.get("what") == "chats.switch"]
    assert [(c["chat"], c["state"], c["role"]) for c in changes] == [
        ("group:1", "off", "admin"),
        ("group:9", "off", "admin"),
        ("group:1", "on", "admin"),
    ]
