"""Messages and their ids (tmy/message.py): ids the engine refuses whatever adapter sent them."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from tmy.message import Attachment, Event, Message
from tmy.testing import Bot

# -- from test_hardening_access.py (issue 7 hardening: who may do what, what a caller may send)


HTTP_RULES = """
rules:
  - id: who
    triggers: ["who"]
    steps:
      - {plugin: ADJUST, input: "{USER}@{PLATFORM}/{CHAT}"}
  - id: big
    triggers: ["big"]
    steps:
      - {plugin: ADJUST, input: "?= 'x' * 60000"}
"""


async def test_engine_refuses_bad_ids_from_any_adapter() -> None:
    async with Bot({"h.yaml": HTTP_RULES}) as bot:
        reply = await bot.ask("who", user="u" * 10_000)
        assert reply.rule is None and "user" in reply.error and "limit is 256" in reply.error
        reply = await bot.ask("who", chat="bad\ud800")
        assert reply.rule is None and "surrogate" in reply.error
        assert (await bot.ask("who", user="ann")).text == "ann@test/private:ann"


# -- Message.new: the adapters' way to build one, field for field the constructor's

_FIELDS_CASES = [
    {},
    {"user": "u1"},
    {"user": "u1", "chat": "group:7", "platform": "onebot"},
    {"user": "u1", "chat": "private:u1"},
    {"user": "u1", "chat": "g", "private": True, "user_name": "Ann"},
    {"chat": "private:x", "private": False},
    {
        "user": "u",
        "chat": "c",
        "platform": "p",
        "user_name": "n",
        "is_admin": True,
        "raw": {"k": 1},
        "mentions_bot": True,
        "reply_to": "41",
        "self_id": "bot",
        "message_id": "42",
        "ephemeral": True,
        "attachments": (Attachment("image", url="http://x/y.png"),),
        "event": Event("poke", "notice.notify.poke", {"user": "u"}),
        "chat_admin": True,
        "admin_as": "key:k",
    },
]


@pytest.mark.parametrize("fields", _FIELDS_CASES)
def test_message_new_is_the_constructor_field_for_field(fields: dict) -> None:
    made, built = Message("hi", **fields), Message.new("hi", **fields)
    assert type(built) is Message and built == made
    assert [getattr(built, f.name) for f in dataclasses.fields(Message)] == [
        getattr(made, f.name) for f in dataclasses.fields(Message)
    ]


def test_message_new_takes_the_constructors_keywords_in_its_order() -> None:
    init = inspect.signature(Message.__init__).parameters
    new = inspect.signature(Message.new).parameters
    assert [(p.name, p.default) for p in list(init.values())[1:]] == [
        (p.name, p.default) for p in new.values()
    ]
    assert [p.name for p in list(init.values())[1:]] == [
        f.name for f in dataclasses.fields(Message)
    ]
