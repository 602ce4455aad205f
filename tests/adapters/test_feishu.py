"""Feishu in long-connection mode against the loopback fake: the real engine and rules, the
adapter's WebSocket, its frames checked against the official SDK's codec."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.adapters import wait_state
from tests.support.feishu_fake import (
    APP_ID,
    APP_SECRET,
    BOB,
    BOT_OPEN_ID,
    GROUP,
    P2P,
    USER,
    FakeFeishu,
)
from tmy.adapters.feishu import MAX_TEXT, FeishuAdapter, FeishuConfig, split_text
from tmy.adapters.feishu.frames import Frame
from tmy.message import Message, Outgoing, Reply, Target
from tmy.testing import Bot

RULES = r"""
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{PLATFORM}|{CHAT}|{USER}|{QUESTION}"}
  - id: ping
    triggers: [ping]
    mention: true
    steps:
      - {plugin: ADJUST, input: pong}
  - id: long
    triggers: [long]
    steps:
      - {plugin: ADJUST, input: "?= ('word ' * 2000).strip()"}
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome {USER_NAME}! ({EVENT_RAW} by {EVENT_DATA[operator]})"}
  - id: mute
    triggers: [mute all]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "muted {CHAT}"}
  - id: poll
    triggers: [poll]
    steps:
      - plugin: ADJUST
        input:
          text: "Lunch?"
          buttons: [[{text: Pizza, data: "lunch:pizza"}]]
"""


class Driven:
    def __init__(self, fake: FakeFeishu, adapter: FeishuAdapter, bot: Bot) -> None:
        self.fake, self.adapter, self.bot = fake, adapter, bot
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)


def make(
    fake: FakeFeishu, *, secret: str = APP_SECRET, store: Any = None, **config: Any
) -> FeishuAdapter:
    adapter = FeishuAdapter(
        FeishuConfig(api_base=fake.base, **config),
        app_id=APP_ID,
        app_secret=secret,
        store=store,
        send_interval=0.0,
    )
    adapter.backoff_base, adapter.backoff_cap = 0.05, 0.2
    return adapter


@asynccontextmanager
async def driven(store: str | None = None, **config: Any) -> AsyncIterator[Driven]:
    bot_args: dict[str, Any] = {"store": store} if store else {}
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}, **bot_args) as bot:
        adapter = make(fake, store=bot.app.store, **config)
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            yield d
        finally:
            await adapter.stop()


async def test_a_group_mention_is_answered_as_a_reply_to_the_message() -> None:
    async with driven() as d:
        at_bot = d.fake.mention("@_user_1", BOT_OPEN_ID, "tmy")
        at_bob = d.fake.mention("@_user_2", BOB, "Bob")
        event = d.fake.message("@_user_1 ping", mentions=[at_bot])
        frame_id = await d.fake.push(event)
        sent = await d.fake.next_sent()
        assert await d.fake.acked(frame_id) == {"code": 200}
        unaddressed = d.fake.message("ping @_user_2", mentions=[at_bob])
        await d.fake.push(unaddressed)
        echo = d.fake.message("echo hi @_user_2", mentions=[at_bob])
        await d.fake.push(echo)
        answer = await d.fake.next_sent()
    assert sent["kind"] == "reply" and sent["msg_type"] == "text"
    assert sent["message_id"] == event["event"]["message"]["message_id"]
    assert sent["content"] == {"text": "pong"} and sent["reply_in_thread"] is False
    first = d.seen[0]
    assert (first.text, first.mentions_bot, first.private) == ("ping", True, False)
    assert (first.chat, first.user, first.self_id) == (GROUP, USER, APP_ID)
    assert d.seen[1].mentions_bot is False  # "ping" needs a mention: no answer to it
    assert answer["content"] == {"text": f"feishu|{GROUP}|{USER}|hi @Bob"}
    assert d.adapter.health()["bot_open_id"] == BOT_OPEN_ID


async def test_a_private_message_is_answered_in_its_chat() -> None:
    async with driven() as d:
        await d.fake.push(d.fake.message("echo hello", chat=P2P, chat_type="p2p"))
        sent = await d.fake.next_sent()
        await d.adapter.send(Target("feishu", f"private:{BOB}"), "a note")
        note = await d.fake.next_sent()
        await d.adapter.send(Target("feishu", GROUP), "to the group")
        group = await d.fake.next_sent()
    assert d.seen[0].private is True and d.seen[0].chat == P2P
    assert sent["kind"] == "reply" and sent["content"] == {"text": f"feishu|{P2P}|{USER}|hello"}
    assert (note["receive_id"], note["receive_id_type"]) == (BOB, "open_id")
    assert (group["receive_id"], group["receive_id_type"]) == (GROUP, "chat_id")


async def test_a_reply_to_the_bots_message_addresses_it_and_stays_in_its_thread() -> None:
    async with driven() as d:
        await d.fake.push(d.fake.message("echo first"))
        first = await d.fake.next_sent()
        quoting = d.fake.message("ping", parent_id=first["sent_id"], thread_id="omt_1")
        await d.fake.push(quoting)
        sent = await d.fake.next_sent()
    assert d.seen[1].mentions_bot is True and d.seen[1].reply_to == first["sent_id"]
    assert sent["content"] == {"text": "pong"} and sent["reply_in_thread"] is True


async def test_a_long_reply_in_a_thread_stays_in_it() -> None:
    async with driven() as d:
        event = d.fake.message("long", thread_id="omt_2")
        await d.fake.push(event)
        pieces = [await d.fake.next_sent() for _ in range(2)]
    answered = event["event"]["message"]["message_id"]
    assert [(p["kind"], p["message_id"], p["reply_in_thread"]) for p in pieces] == [
        ("reply", answered, True),
        ("reply", answered, True),
    ]


async def test_a_long_reply_is_split_at_the_limit() -> None:
    async with driven() as d:
        await d.fake.push(d.fake.message("long"))
        pieces = [await d.fake.next_sent() for _ in range(2)]
    texts = [p["content"]["text"] for p in pieces]
    assert all(len(t) <= MAX_TEXT for t in texts)
    assert " ".join(texts) == ("word " * 2000).strip()
    assert [p["kind"] for p in pieces] == ["reply", "send"]  # the rest goes to the chat
    assert pieces[1]["receive_id"] == GROUP
    assert split_text("aaaaa\n" + "b" * 10, limit=8) == ["aaaaa", "bbbbbbbb", "bb"]


async def test_a_rate_limit_is_waited_out_and_the_reply_sent() -> None:
    async with driven() as d:
        d.fake.flood, d.fake.flood_reset = 1, 0.3
        await d.fake.push(d.fake.message("echo later"))
        sent = await d.fake.next_sent()
        delivered = asyncio.get_running_loop().time()
    assert sent["content"]["text"].endswith("|later")
    assert len(d.fake.refused_sends) == 1
    assert delivered - d.fake.refused_sends[0] >= 0.25  # x-ogw-ratelimit-reset: 0.3 s


async def test_a_lost_connection_is_reconnected() -> None:
    async with driven() as d:
        async with asyncio.timeout(5):
            while d.fake.pings < 1:  # the first ping goes out as the connection opens
                await asyncio.sleep(0.01)
        assert d.fake.connections == 1
        await d.fake.drop()
        await wait_state(d.adapter, "reconnecting")
        await wait_state(d.adapter, "connected")
        await d.fake.push(d.fake.message("echo again"))
        sent = await d.fake.next_sent()
    assert d.fake.connections == 2
    assert sent["content"]["text"].endswith("|again")


async def test_a_connection_that_answers_no_ping_is_replaced() -> None:
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        fake.ping_interval, fake.answer_pings = 0.05, False
        adapter = make(fake)
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "connected")
            await wait_state(adapter, "reconnecting")  # three intervals without a pong
            fake.answer_pings = True
            await wait_state(adapter, "connected")
            await fake.push(fake.message("echo alive"))
            sent = await fake.next_sent()
        finally:
            await adapter.stop()
    assert fake.connections >= 2 and sent["content"]["text"].endswith("|alive")


async def test_a_refused_app_secret_is_failed_and_not_retried() -> None:
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make(fake, secret="wrong")
        await adapter.start(bot.engine.handle)
        await wait_state(adapter, "failed")
        await asyncio.sleep(0.3)  # several backoff periods: no retry in a loop
        report = adapter.health()
        await adapter.stop()
    assert fake.token_requests == 1
    assert "10014" in report["error"] and "wrong" not in report["error"]
    assert report["state"] == "failed"


async def test_missing_credentials_say_what_to_set() -> None:
    adapter = FeishuAdapter(FeishuConfig(), app_id=APP_ID)
    await adapter.start(_no_handle)
    assert adapter.health()["state"] == "failed"
    assert "FEISHU_APP_SECRET" in adapter.health()["error"]
    await adapter.stop()


async def test_a_duplicate_delivery_runs_once(tmp_path: Path) -> None:
    async with driven(store=f"sqlite:///{tmp_path / 'tmy.db'}") as d:
        event = d.fake.message("echo once")
        await d.fake.push(event)
        await d.fake.push(event)  # a redelivery: same event_id
        again = dict(event, header=dict(event["header"], event_id="other"))
        await d.fake.push(again)  # same message under another event id
        await d.fake.push(d.fake.message("echo next"))
        sent = [await d.fake.next_sent() for _ in range(2)]
        claims = await d.bot.app.store.keys("dedup/feishu/")
    assert [s["content"]["text"].split("|")[-1] for s in sent] == ["once", "next"]
    assert len(d.seen) == 2
    assert len(claims) == 5  # three event ids and two message ids, claimed in the store


async def test_a_member_join_reaches_its_event_rule() -> None:
    async with driven() as d:
        await d.fake.push(d.fake.member_added(USER, "Ann"))
        sent = await d.fake.next_sent()
    event = d.seen[0].event
    assert event is not None and event.kind == "member_join"
    assert event.data == {"user": USER, "chat": GROUP, "operator": BOB}
    assert sent["kind"] == "send" and sent["receive_id"] == GROUP
    assert sent["content"] == {"text": f"Welcome Ann! (im.chat.member.user.added_v1 by {BOB})"}


async def test_the_token_is_refreshed_before_it_expires() -> None:
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        fake.token_ttl = 1  # second; the adapter replaces it after half of that
        adapter = make(fake)
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "connected")
            await fake.push(fake.message("echo one"))
            await fake.next_sent()
            await asyncio.sleep(0.6)
            await fake.push(fake.message("echo two"))
            sent = await fake.next_sent()
        finally:
            await adapter.stop()
    assert sent["content"]["text"].endswith("|two")
    assert fake.token_requests >= 2  # 2, or more on a machine slow enough to pass 0.5 s twice
    assert fake.used_tokens[0] != fake.used_tokens[-1]  # the later calls: a new token


async def test_group_owner_and_managers_are_chat_admins() -> None:
    async with driven(admins_from=("owner", "admin")) as d:
        d.fake.chats[GROUP] = {"owner_id": BOB, "user_manager_id_list": [USER]}
        await d.fake.push(d.fake.message("mute all"))
        sent = await d.fake.next_sent()
        await d.fake.push(d.fake.message("mute all", chat=P2P, chat_type="p2p"))
        await d.fake.push(d.fake.message("echo done", chat=P2P, chat_type="p2p"))
        done = await d.fake.next_sent()
    assert sent["content"] == {"text": f"muted {GROUP}"}
    assert d.seen[0].chat_admin is True and d.seen[1].chat_admin is False
    assert done["content"]["text"].endswith("|done")  # the private "mute all" ran nothing


async def test_buttons_go_out_as_a_card_and_a_press_is_a_button_event() -> None:
    async with driven() as d:
        await d.fake.push(d.fake.message("poll"))
        card = await d.fake.next_sent()
        press = d.fake.envelope(
            "card.action.trigger",
            {
                "operator": {"open_id": USER},
                "token": "c-1",
                "action": {"tag": "button", "value": {"data": "lunch:pizza"}},
                "context": {"open_message_id": card["sent_id"], "open_chat_id": GROUP},
            },
        )
        await d.fake.acked(await d.fake.push(press))
        while not any(m.event for m in d.seen):
            await asyncio.sleep(0.01)
    assert card["msg_type"] == "interactive"
    div, action = card["content"]["elements"]
    assert div["text"]["content"] == "Lunch?"
    assert action["actions"][0]["value"] == {"data": "lunch:pizza"}
    event = d.seen[-1].event
    assert event is not None and event.kind == "button"
    assert event.data["data"] == "lunch:pizza" and event.data["message_id"] == card["sent_id"]


async def test_mentions_are_sent_as_rich_text() -> None:
    async with driven() as d:
        await d.adapter.send(Target("feishu", GROUP), "look", Outgoing(mentions=[BOB]))
        sent = await d.fake.next_sent()
    assert sent["msg_type"] == "post"
    (line,) = sent["content"]["zh_cn"]["content"]
    assert line[0] == {"tag": "at", "user_id": BOB, "user_name": ""}
    assert line[1] == {"tag": "text", "text": " look"}


async def test_a_split_event_is_joined_from_its_frames() -> None:
    async with driven() as d:
        frame_id = await d.fake.push(d.fake.message("echo in three parts"), parts=3)
        sent = await d.fake.next_sent()
        assert await d.fake.acked(frame_id) == {"code": 200}
    assert sent["content"]["text"].endswith("|in three parts")


@pytest.mark.parametrize("service", [0, 42, -7])
def test_frames_match_the_sdk_codec(service: int) -> None:
    ours = Frame(
        seq_id=3,
        log_id=9,
        service=service,
        method=1,
        payload=b"{}",
        headers=[("type", "event"), ("sum", "1")],
        log_id_new="x",
    )
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame as SdkFrame  # ~2 s: only where it is used

    theirs = SdkFrame()
    theirs.ParseFromString(ours.encode())
    assert (theirs.SeqID, theirs.LogID, theirs.service, theirs.method) == (3, 9, service, 1)
    assert [(h.key, h.value) for h in theirs.headers] == ours.headers
    assert Frame.decode(theirs.SerializeToString()) == ours


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")
