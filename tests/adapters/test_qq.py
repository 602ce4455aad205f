"""QQ over the gateway: the fake QQ on loopback, the real engine and rules.

What a QQ user does in a group, a C2C chat or a guild channel reaches the rules,
and the answer goes back to the same chat as a passive reply (``msg_id``, and for
groups and C2C a ``msg_seq`` per message)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.adapters import wait_state
from tests.support.qq_fake import (
    APP_ID,
    BOT_ID,
    CHANNEL,
    GROUP,
    GUILD,
    MEMBER,
    SECRET,
    USER,
    FakeQQ,
    c2c,
    channel_message,
    group_at,
    member_add,
)
from tmy.adapters.qq import MAX_TEXT, QQAdapter, QQConfig, from_settings, split_text
from tmy.adapters.qq.api import AccessToken
from tmy.adapters.qq.incoming import read_dispatch
from tmy.adapters.qq.sending import compose
from tmy.config import Settings, load_settings
from tmy.message import Message, Outgoing, Reply, Target
from tmy.testing import Bot
from tmy.types import Adapter

RULES = r"""
rules:
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome {USER_NAME}! ({EVENT_RAW} in {CHAT})"}
  - id: ping
    triggers: [ping]
    mention: true
    steps:
      - {plugin: ADJUST, input: "pong {CHAT} {USER}"}
  - id: long
    triggers: [long]
    steps:
      - {plugin: ADJUST, input: "?= ' '.join(['word'] * 1000)"}
  - id: cat
    triggers: [cat]
    steps:
      - {plugin: ADJUST, input: {text: "a cat", image: "https://img.example/cat.png"}}
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{PLATFORM}|{CHAT}|{USER}|{QUESTION}"}
"""


class Driven:
    def __init__(self, fake: FakeQQ, adapter: QQAdapter, bot: Bot) -> None:
        self.fake, self.adapter, self.bot = fake, adapter, bot
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)


def make_adapter(fake: FakeQQ, *, secret: str = SECRET, **config: Any) -> QQAdapter:
    settings = {"mode": "websocket", "api_base": fake.base, "token_url": fake.token_url, **config}
    adapter = QQAdapter(QQConfig(**settings), app_id=APP_ID, secret=secret, send_interval=0.0)
    adapter.backoff_base, adapter.backoff_cap, adapter.rate_limit_wait = 0.05, 0.2, 0.05
    return adapter


@asynccontextmanager
async def driven(**config: Any) -> AsyncIterator[Driven]:
    async with FakeQQ() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(fake, **config)
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            yield d
        finally:
            await adapter.stop()


async def test_a_group_mention_is_answered_in_the_group_as_a_passive_reply() -> None:
    async with driven() as d:
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at(" ping", msg_id="m-1"))
        sent = await d.fake.next_sent()
        health = d.adapter.health()
    assert sent["kind"] == "group" and sent["target"] == GROUP
    assert sent["body"] == {"msg_type": 0, "content": f"pong group:{GROUP} {MEMBER}",
                            "msg_id": "m-1", "msg_seq": 1}  # fmt: skip
    (m,) = d.seen
    assert m.mentions_bot and not m.private and m.platform == "qq" and m.text == "ping"
    assert (health["bot_id"], health["app_id"], health["mode"]) == (BOT_ID, APP_ID, "websocket")
    assert d.fake.ops[0] == 2  # identified


async def test_a_c2c_message_is_a_private_chat_answered_there() -> None:
    async with driven() as d:
        await d.fake.push("C2C_MESSAGE_CREATE", c2c("echo hello", msg_id="c-1"))
        sent = await d.fake.next_sent()
    assert sent["kind"] == "c2c" and sent["target"] == USER
    assert sent["body"]["content"] == f"qq|private:{USER}|{USER}|hello"
    assert sent["body"]["msg_id"] == "c-1" and sent["body"]["msg_seq"] == 1
    assert d.seen[0].private is True


async def test_a_guild_channel_mention_is_stripped_and_answered_in_the_channel() -> None:
    async with driven(admins_from=["owner", "admin"]) as d:
        at = channel_message(f"<@!{BOT_ID}> ping", msg_id="g-1", roles=("1", "5"))
        await d.fake.push("AT_MESSAGE_CREATE", at)
        sent = await d.fake.next_sent()
        # a private guild bot's MESSAGE_CREATE without the bot in ``mentions``: not a mention
        await d.fake.push("MESSAGE_CREATE", channel_message("ping", msg_id="g-2"))
        await d.fake.nothing_sent()
        await d.fake.push("MESSAGE_CREATE", channel_message(f"<@{BOT_ID}> ping", msg_id="g-3",
                                                            mentions=(BOT_ID,)))  # fmt: skip
        third = await d.fake.next_sent()
    assert sent == {
        "kind": "channel",
        "target": CHANNEL,
        "body": {"content": f"pong channel:{CHANNEL} 1234", "msg_id": "g-1"},
    }
    assert third["body"]["msg_id"] == "g-3"
    first, second, _ = d.seen
    assert first.text == "ping" and first.mentions_bot and first.chat_admin  # role 5
    assert not second.mentions_bot and not second.chat_admin


async def test_a_long_reply_is_split_and_each_piece_has_its_own_msg_seq() -> None:
    async with driven() as d:
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at("long", msg_id="m-long"))
        pieces = [await d.fake.next_sent() for _ in range(3)]
    texts = [p["body"]["content"] for p in pieces]
    assert all(len(t) <= 2000 for t in texts)
    assert " ".join(texts) == " ".join(["word"] * 1000)
    assert [p["body"]["msg_seq"] for p in pieces] == [1, 2, 3]
    assert {p["body"]["msg_id"] for p in pieces} == {"m-long"}


async def test_a_rate_limit_answer_is_waited_out_and_the_reply_still_arrives() -> None:
    async with driven() as d:
        d.fake.rate_limited = 1
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at("ping", msg_id="m-429"))
        sent = await d.fake.next_sent()
    assert sent["body"]["msg_id"] == "m-429"
    assert len(d.fake.attempts) == 2  # the refused attempt, then the one QQ took
    assert d.fake.attempts[0]["body"] == d.fake.attempts[1]["body"]  # same msg_seq again


async def test_a_lost_connection_is_resumed_and_missed_messages_answered() -> None:
    async with driven() as d:
        await d.fake.drop()
        # pushed while the bot is away: QQ replays it on the resume
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at("ping", msg_id="m-away"))
        await d.fake.connected()
        sent = await d.fake.next_sent()
        await d.fake.push("C2C_MESSAGE_CREATE", c2c("echo again", msg_id="c-after"))
        after = await d.fake.next_sent()
        await wait_state(d.adapter, "connected")
        resumed = d.adapter.health()["resumed"]
    assert sent["body"]["msg_id"] == "m-away"
    assert after["body"]["msg_id"] == "c-after"
    assert 6 in d.fake.ops and resumed == 1  # resumed, not identified again


async def test_the_same_message_delivered_twice_runs_once() -> None:
    async with driven() as d:
        payload = group_at("ping", msg_id="m-dup")
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", payload)
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", payload)
        await d.fake.next_sent()
        await d.fake.nothing_sent()
    assert len(d.seen) == 1
    assert d.fake.ops.count(2) == 1 and 6 not in d.fake.ops  # the connection stayed up


async def test_heartbeats_carry_the_last_sequence_number() -> None:
    async with FakeQQ() as fake, Bot({"r.yaml": RULES}) as bot:
        fake.heartbeat_interval = 20  # ms
        adapter = make_adapter(fake)
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            pushed = await fake.push("C2C_MESSAGE_CREATE", c2c("echo hb", msg_id="c-hb"))
            await fake.next_sent()
            async with asyncio.timeout(10):
                while pushed["s"] not in fake.heartbeats:
                    await asyncio.sleep(0.01)
        finally:
            await adapter.stop()
    assert fake.ops.count(2) == 1  # answered heartbeats keep the one connection


async def test_a_guild_member_joining_reaches_the_member_join_rule() -> None:
    async with driven() as d:
        await d.fake.push("GUILD_MEMBER_ADD", member_add("5555", "Bob"), event_id="ev-1")
        sent = await d.fake.next_sent()
    assert sent["kind"] == "channel" and sent["target"] == "ch-welcome"  # the first text one
    assert sent["body"] == {"content": f"Welcome Bob! (GUILD_MEMBER_ADD in guild:{GUILD})",
                            "event_id": "ev-1"}  # fmt: skip
    (event,) = d.seen
    assert event.event is not None and event.event.kind == "member_join"
    assert event.event.data["operator"] == "" and event.event.data["guild"] == GUILD


async def test_an_expired_token_is_refreshed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AccessToken, "margin", 0.5)
    async with FakeQQ() as fake, Bot({"r.yaml": RULES}) as bot:
        fake.lifetime = 1  # QQ: 7200 s; the adapter asks again `margin` s before
        adapter = make_adapter(fake)
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            await asyncio.sleep(0.6)
            await fake.push("C2C_MESSAGE_CREATE", c2c("echo late", msg_id="c-late"))
            sent = await fake.next_sent()
        finally:
            await adapter.stop()
    assert sent["body"]["msg_id"] == "c-late"
    assert fake.token_requests == 2 and not fake.refused


async def test_a_revoked_token_is_fetched_again_after_a_401() -> None:
    async with driven() as d:
        d.fake.revoke()
        await d.fake.push("C2C_MESSAGE_CREATE", c2c("echo x", msg_id="c-401"))
        sent = await d.fake.next_sent()
    assert sent["body"]["msg_id"] == "c-401"
    assert d.fake.token_requests == 2 and d.fake.refused[0][1] == 401


async def test_a_refused_secret_fails_without_retrying() -> None:
    async with FakeQQ() as fake:
        adapter = make_adapter(fake, secret="wrong-secret")
        await adapter.start(_no_handle)
        try:
            await wait_state(adapter, "failed")
            await asyncio.sleep(0.3)
            health = adapter.health()
        finally:
            await adapter.stop()
    assert fake.token_requests == 1
    assert "refused app_id" in health["error"] and "wrong-secret" not in health["error"]
    assert health["state"] == "failed"


async def test_images_go_out_as_rich_media_in_groups_and_send_targets() -> None:
    async with driven() as d:
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at("cat", msg_id="m-cat"))
        text, media = await d.fake.next_sent(), await d.fake.next_sent()
        await d.adapter.send(Target("qq", f"channel:{CHANNEL}"), "cron says hi")
        active = await d.fake.next_sent()
    assert text["body"]["content"] == "a cat" and text["body"]["msg_seq"] == 1
    assert d.fake.uploads[0]["body"] == {"file_type": 1, "url": "https://img.example/cat.png",
                                         "srv_send_msg": False}  # fmt: skip
    assert media["body"]["msg_type"] == 7 and media["body"]["media"] == {"file_info": "FI-1"}
    assert media["body"]["msg_seq"] == 2
    assert active == {"kind": "channel", "target": CHANNEL, "body": {"content": "cron says hi"}}


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")


def test_attachments_placeholders_and_bots() -> None:
    me = {"id": BOT_ID, "app_id": APP_ID}
    photo = {"content_type": "image/jpeg", "filename": "a.jpg", "size": 2048,
             "url": "multimedia.nt.qq.com.cn/download?appid=1407&rkey=x"}  # fmt: skip
    found = read_dispatch("C2C_MESSAGE_CREATE", c2c("", attachments=[photo]), "e", me, ())
    assert found is not None and found.message.text == "[image]"
    (att,) = found.message.attachments
    assert (att.kind, att.mime, att.size, att.inline) == ("image", "image/jpeg", 2048, True)
    assert att.url == "https://multimedia.nt.qq.com.cn/download?appid=1407&rkey=x"
    quoting = channel_message("hi", message_reference={"message_id": "08quoted"})
    found = read_dispatch("AT_MESSAGE_CREATE", quoting, "e", me, ())
    assert found is not None and found.message.reply_to == "08quoted"
    bot = channel_message("hi", author={"id": "9", "username": "b", "bot": True})
    assert read_dispatch("AT_MESSAGE_CREATE", bot, "e", me, ()) is None
    left = read_dispatch("GUILD_MEMBER_REMOVE", member_add("7", op_user_id="1"), "e", me, ())
    assert left is not None and left.message.event is not None
    assert left.message.event.kind == "member_leave"
    assert left.message.event.data == {"user": "7", "chat": f"guild:{GUILD}", "operator": "1",
                                       "guild": GUILD, "kicked": True}  # fmt: skip
    assert read_dispatch("GROUP_ADD_ROBOT", {"group_openid": GROUP}, "e", me, ()) is None


def test_owner_and_admin_roles() -> None:
    me = {"id": BOT_ID, "app_id": APP_ID}
    owner = channel_message("hi", roles=("4",))
    admin = channel_message("hi", roles=("2",))
    for payload, wanted, expected in [(owner, ("owner",), True), (admin, ("owner",), False),
                                      (admin, ("admin",), True), (owner, (), False)]:  # fmt: skip
        found = read_dispatch("AT_MESSAGE_CREATE", payload, "e", me, wanted)
        assert found is not None and found.message.chat_admin is expected


def test_from_settings_reads_credentials_from_the_environment(tmp_path: Path) -> None:
    off = Settings(http_enabled=False)
    assert from_settings(off, None) is None
    on = load_settings(env={}, rules=str(tmp_path), plugins=str(tmp_path / "none"),
                       console=False, adapters={"qq": {"enabled": True}})  # fmt: skip
    adapter = from_settings(on, None, env={"QQ_APP_ID": "42", "QQ_SECRET": "s3cr3t-value"})
    assert adapter is not None and (adapter.app_id, adapter.secret) == ("42", "s3cr3t-value")
    assert isinstance(adapter, Adapter) and adapter.routes()  # webhook mode: /qq/webhook
    assert make_adapter(FakeQQ()).routes() == []  # the gateway needs no route


async def test_a_session_qq_no_longer_holds_is_identified_anew() -> None:
    async with driven() as d:
        d.fake.forget_sessions()
        await d.fake.drop()
        await d.fake.connected()  # resume refused (op 9), then identified again
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at("ping", msg_id="m-new"))
        sent = await d.fake.next_sent()
    assert sent["body"]["msg_id"] == "m-new"
    assert d.fake.ops.count(2) == 2 and 6 in d.fake.ops


def test_a_passive_group_reply_keeps_to_qqs_five_replies_per_message() -> None:
    text = "\n".join(["y" * 1500] * 7)  # seven pieces' worth
    group = compose("group", text, None, msg_id="m")
    assert len(group) == 5 and group[-1].body["content"].endswith("…")
    assert all(len(p.body["content"]) <= MAX_TEXT for p in group)
    active = compose("group", text, None)  # no msg_id: no per-message cap
    channel = compose("channel", text, Outgoing(mentions=["42"]), msg_id="m")
    assert len(active) == 7 and len(channel) == 7
    assert channel[0].body["content"].startswith("<@42> ")
    assert split_text("a b " * 10, limit=8) == ["a b a b", "a b a b", "a b a b", "a b a b",
                                                "a b a b"]  # fmt: skip
