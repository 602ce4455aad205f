"""QQ faults found in review, each pinned: the token endpoint's 429, gateway refusals and
junk frames, msg_seq after a lost answer, start() twice, replies' text fallbacks and
reply-to-bot detection (the fake QQ on loopback, the real engine)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.adapters.test_qq import RULES, Driven, _no_handle, driven, make_adapter
from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tests.support.qq_fake import BOT_ID, GROUP, FakeQQ, c2c, channel_message, group_at
from tmy.adapters.qq.sending import compose
from tmy.message import Button, Outgoing
from tmy.testing import Bot


async def test_a_rate_limited_token_endpoint_is_retried_not_failed() -> None:
    async with FakeQQ() as fake, Bot({"r.yaml": RULES}) as bot:
        fake.token_busy = 2  # HTTP 429 twice: "not now", not a wrong secret
        adapter = make_adapter(fake)
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            await fake.push("C2C_MESSAGE_CREATE", c2c("echo up", msg_id="c-up"))
            sent = await fake.next_sent()
        finally:
            await adapter.stop()
    assert fake.token_requests == 3 and sent["body"]["msg_id"] == "c-up"


async def test_all_messages_on_a_public_bot_is_failed_not_retried() -> None:
    async with FakeQQ() as fake:
        fake.private_bot = False  # QQ closes 4014: GUILD_MESSAGES is for private bots
        adapter = make_adapter(fake, all_messages=True)
        await adapter.start(_no_handle)
        try:
            await wait_state(adapter, "failed")
            await asyncio.sleep(0.3)
            health = adapter.health()
        finally:
            await adapter.stop()
    assert fake.ops.count(2) == 1 and health["state"] == "failed"
    assert "4014" in health["error"] and "all_messages" in health["error"]


async def test_a_piece_whose_answer_was_lost_is_not_sent_again_and_the_rest_follow() -> None:
    async with driven() as d:
        d.fake.lose_answers = 1  # QQ took the first piece; its answer never arrived
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at("long", msg_id="m-lost"))
        pieces = [await d.fake.next_sent() for _ in range(3)]
        await d.fake.nothing_sent()
    assert [p["body"]["msg_seq"] for p in pieces] == [1, 2, 3]
    assert " ".join(p["body"]["content"] for p in pieces) == " ".join(["word"] * 1000)
    assert len(d.fake.attempts) == 4  # the retry of piece 1, refused as a duplicate


async def test_a_msg_seq_taken_by_another_send_takes_the_next() -> None:
    async with driven() as d:
        # an earlier process of this bot already answered m-seq with msg_seq 1
        taken = {"msg_type": 0, "content": "before the restart", "msg_id": "m-seq", "msg_seq": 1}
        assert await d.fake.post_api(f"/v2/groups/{GROUP}/messages", taken) == 200
        await d.fake.next_sent()
        await d.fake.push("GROUP_AT_MESSAGE_CREATE", group_at("ping", msg_id="m-seq"))
        sent = await d.fake.next_sent()
    assert sent["body"]["msg_seq"] == 2 and sent["body"]["content"].startswith("pong")


async def test_starting_twice_keeps_one_connection() -> None:
    async with FakeQQ() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(fake)
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            await asyncio.sleep(0.2)
        finally:
            await adapter.stop()
            await adapter.stop()  # twice: harmless
        await asyncio.sleep(0.1)
    assert fake.ops.count(2) == 1 and adapter.health()["state"] == "stopped"


async def test_a_gateway_frame_that_is_not_an_object_keeps_the_connection() -> None:
    async with driven() as d:
        for junk in ("[1, 2]", "null", "42", '"op"', "[" * 50_000):
            await d.fake.send_raw(junk)
        await d.fake.push("C2C_MESSAGE_CREATE", c2c("echo still", msg_id="c-junk"))
        sent = await d.fake.next_sent()
    assert sent["body"]["msg_id"] == "c-junk"
    assert d.fake.ops.count(2) == 1 and 6 not in d.fake.ops  # never reconnected


def test_a_passive_reply_with_many_images_keeps_its_text_first() -> None:
    urls = [f"https://img.example/{i}.png" for i in range(6)]
    pieces = compose("group", "five pictures", Outgoing(images=urls), msg_id="m")
    assert len(pieces) == 5 and pieces[0].body["content"] == "five pictures"
    assert [p.upload for p in pieces[1:]] == urls[:4]


def test_buttons_and_file_links_become_text_qq_can_show() -> None:
    parts = Outgoing(buttons=[[Button("Yes", "y"), Button("Docs", url="https://d.example")]],
                     files=["https://f.example/a.pdf"])  # fmt: skip
    for kind in ("group", "channel"):
        (piece,) = compose(kind, "Pick one", parts, msg_id="m")
        assert piece.body["content"] == (
            "Pick one\n1. Yes\n2. Docs: https://d.example\n[file] https://f.example/a.pdf"
        )


async def test_a_channel_message_quoting_the_bot_addresses_it() -> None:
    async with driven(all_messages=True) as d:
        await d.fake.push("AT_MESSAGE_CREATE", channel_message(f"<@!{BOT_ID}> ping", "g-at"))
        bots = await d.fake.next_sent()
        own_id = f"sent-{len(d.fake.sent)}"  # the id QQ answered the bot's message with
        quoting = channel_message("ping", "g-q", message_reference={"message_id": own_id})
        await d.fake.push("MESSAGE_CREATE", quoting)
        answer = await d.fake.next_sent()
        other = channel_message("ping", "g-o", message_reference={"message_id": "08someone"})
        await d.fake.push("MESSAGE_CREATE", other)
        await d.fake.nothing_sent()
    assert bots["body"]["msg_id"] == "g-at" and answer["body"]["msg_id"] == "g-q"
    assert [m.mentions_bot for m in d.seen] == [True, True, False]


async def test_a_gateway_that_keeps_refusing_the_token_is_failed_not_retried_forever() -> None:
    async with FakeQQ() as fake:
        fake.gateway_refuses = True  # close 4004 on every Identify, new token or not
        adapter = make_adapter(fake)
        await adapter.start(_no_handle)
        try:
            await wait_state(adapter, "failed")
            await asyncio.sleep(0.5)
            health = adapter.health()
        finally:
            await adapter.stop()
    assert fake.ops.count(2) == 3 and health["state"] == "failed"
    assert "4004" in health["error"] and "mode: webhook" in health["error"]


async def test_a_gateway_that_closes_right_after_ready_is_retried_ever_more_slowly(
    log_file: Path,
) -> None:
    """READY proves nothing yet: it reset the pauses, so a gateway that sent READY (or
    RESUMED) and closed at once was connected to again every ``backoff_base``, forever."""
    async with driven() as d:
        for _ in range(10):
            await d.fake.connected()
            await d.fake.drop()  # the moment the session is ready
        await d.fake.connected()  # the tenth pause was taken
    pauses = [e["retry_in"] for e in read_log(log_file) if e["event"] == "qq.reconnecting"]
    assert len(pauses) >= 10
    assert max(pauses) > d.adapter.backoff_base  # 0.05 s the first, capped at 0.2 s here
