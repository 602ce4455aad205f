"""The console's Chats page: its data (the chats the switch keeps off, merged with the
chats seen recently) and the page on a served daemon (switch off and on, the bot falls
silent and answers again, viewer refused, escaping, JSON)."""

from __future__ import annotations

from tmy.console.chats import chat_rows, off_chats
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
