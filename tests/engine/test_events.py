"""Platform events through Engine.handle: the first listening rule whose filters admit,
their locals, APPROVE, and one debug line for an event no rule wants."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.log_helpers import read_log
from tmy import logs
from tmy.message import Event, Message
from tmy.testing import Bot

RULES = """
rules:
  - id: qq_welcome
    events: [member_join]
    platforms: [onebot]
    steps:
      - {plugin: ADJUST, input: "qq welcome {USER} ({EVENT_RAW}, by {EVENT_DATA[operator]})"}
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "welcome {USER} to {CHAT} [{EVENT}]"}
  - id: greet
    triggers: [hello]
    steps:
      - {plugin: ADJUST, input: "hello [{EVENT}] {EVENT_DATA} {IMAGES} {REPLY_TO}"}
  - id: friends
    events: [friend_request]
    steps:
      - plugin: ADJUST
        input: "?= EVENT_DATA['comment'] == 'let me in'"
        save: APPROVE
      - {plugin: ADJUST, input: "wrong answer", save: APPROVE_REASON, when: "?= not APPROVE"}
      - {plugin: ADJUST, input: "?= ''"}
  - id: invites
    events: [group_invite]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: {approve: false, reason: "not today"}, save: APPROVE}
      - {plugin: ADJUST, input: "declined"}
  - id: joins
    events: [join_request]
    steps:
      - {plugin: ADJUST, input: "yes", save: APPROVE}
  - id: pokes
    events: [poke]
    steps:
      - {plugin: ADJUST, input: "?= 'yes' if EVENT_DATA['target'] == 'me' else 'no'", save: APPROVE}
      - {plugin: ADJUST, input: "poked"}
"""


def _event(kind: str, raw: str = "raw.kind", user: str = "u1", chat: str = "group:1",
           platform: str = "onebot", **data: object) -> Message:  # fmt: skip
    return Message(
        "",
        user=user,
        chat=chat,
        platform=platform,
        private=chat.startswith("private:"),
        event=Event(kind, raw, {"user": user, "chat": chat, **data}),
    )


@pytest.fixture
def debug_log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "debug.log"
    logs.configure("debug", path)
    try:
        yield path
    finally:
        logs.configure("warning")


async def test_an_event_goes_to_the_first_listening_rule_whose_filters_admit_it() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        qq = await bot.engine.handle(_event("member_join", "notice.group_increase", operator="o9"))
        tg = await bot.engine.handle(
            _event("member_join", "new_chat_members", platform="telegram", chat="-100")
        )
    assert (qq.rule, qq.text) == ("qq_welcome", "qq welcome u1 (notice.group_increase, by o9)")
    assert (tg.rule, tg.text) == ("welcome", "welcome u1 to -100 [member_join]")
    assert qq.approve is None and tg.approve is None


async def test_a_text_message_sees_empty_event_locals() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        reply = await bot.ask("hello")
    assert reply.text == "hello [] {} [] "  # REPLY_TO None renders as nothing


async def test_approve_and_its_reason_come_back_on_the_reply() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        yes = await bot.engine.handle(
            _event("friend_request", chat="private:u1", comment="let me in")
        )
        no = await bot.engine.handle(
            _event("friend_request", chat="private:u2", user="u2", comment="hi")
        )
    assert (yes.rule, yes.approve, yes.approve_reason, yes.text) == ("friends", True, "", "")
    assert (no.approve, no.approve_reason) == (False, "wrong answer")
    assert no.as_dict()["approve"] is False and no.as_dict()["approve_reason"] == "wrong answer"


async def test_approve_as_a_map_and_admin_only_with_a_chat_admin() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        stranger = await bot.engine.handle(_event("group_invite", group="5"))
        message = _event("group_invite", group="5")
        message.chat_admin = True  # an admin of this chat by the platform's roles
        owner = await bot.engine.handle(message)
    assert stranger.rule is None
    assert "rule 'invites' lists it but it answers admins only" in (stranger.reason or "")
    assert (owner.rule, owner.approve, owner.approve_reason) == ("invites", False, "not today")


async def test_a_non_bool_approve_fails_the_run_clearly() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        reply = await bot.engine.handle(_event("join_request", comment="hi"))
    assert reply.rule == "joins"
    assert reply.approve is None
    assert reply.error is not None and "APPROVE must be true or false" in reply.error
    assert "str 'yes'" in reply.error


async def test_approve_means_nothing_outside_a_request_event() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        reply = await bot.engine.handle(_event("poke", target="me"))
    assert (reply.rule, reply.text, reply.error, reply.approve) == ("pokes", "poked", None, None)


async def test_an_unwanted_event_gets_a_reason_and_one_debug_line(debug_log: Path) -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        reply = await bot.engine.handle(
            _event("reaction", "notice.group_msg_emoji_like", emoji="👍")
        )
    assert reply.rule is None and reply.text == "" and reply.error is None
    assert reply.reason == "no rule wants the event reaction (no rule lists it under events:)"
    lines = [e for e in read_log(debug_log) if e.get("trace_id") == reply.trace_id]
    unhandled = [e for e in lines if e["event"] == "event.unhandled"]
    assert len(unhandled) == 1
    line = unhandled[0]
    assert line["level"] == "debug"
    assert (line["kind"], line["raw"], line["platform"], line["chat"], line["user"]) == (
        "reaction", "notice.group_msg_emoji_like", "onebot", "group:1", "u1",
    )  # fmt: skip
    assert not [e for e in lines if e["event"] in ("message.unmatched", "run.done")]


async def test_an_event_run_is_logged_like_a_message_run(log_file: Path) -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        reply = await bot.engine.handle(_event("member_join", "new_chat_members", platform="tg"))
    done = [e for e in read_log(log_file) if e["event"] == "run.done"]
    assert len(done) == 1
    assert done[0]["trace_id"] == reply.trace_id
    assert (done[0]["rule"], done[0]["event_kind"]) == ("welcome", "member_join")
    assert done[0]["trigger"] == "<event member_join>"


async def test_an_event_in_a_switched_off_chat_runs_nothing() -> None:
    async with Bot({"e.yaml": RULES}, admins=frozenset({"boss"})) as bot:
        off = await bot.ask(".tmy off", user="boss", chat="group:1", platform="onebot",
                            private=False)  # fmt: skip
        assert "off" in off.text
        reply = await bot.engine.handle(_event("member_join"))
    assert reply.rule is None and "switched off" in (reply.reason or "")


async def test_an_unknown_event_kind_says_so() -> None:
    async with Bot({"e.yaml": RULES}) as bot:
        reply = await bot.engine.handle(_event("earthquake"))
    assert reply.rule is None and "not one of member_join" in (reply.reason or "")
