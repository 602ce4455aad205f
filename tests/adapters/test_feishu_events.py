"""Feishu's other events and media: reactions and leaves reach event rules, rich text and
pictures come in as text and attachments, pictures go out uploaded, REPLY_TO is the quoted
message; and ``from_settings`` reads the section and its credentials."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from tests.adapters.test_feishu import Driven, make
from tests.support.adapters import wait_state
from tests.support.feishu_fake import APP_ID, APP_SECRET, BOB, BOT_OPEN_ID, GROUP, USER, FakeFeishu
from tests.support.llm_fake_provider import PNG
from tmy.adapters.feishu import FeishuAdapter, from_settings
from tmy.config import load_settings
from tmy.errors import AdapterError, ConfigError
from tmy.testing import Bot

RULES = rf"""
rules:
  - id: reacted
    events: [reaction]
    steps:
      - {{plugin: ADJUST, input: "{{USER}} {{EVENT_DATA[emoji]}} {{EVENT_DATA[added]}} {{CHAT}}"}}
  - id: left
    events: [member_leave]
    steps:
      - {{plugin: ADJUST, input: "bye {{USER_NAME}} kicked={{EVENT_DATA[kicked]}}"}}
  - id: cat
    triggers: [cat]
    steps:
      - plugin: ADJUST
        input: {{text: "a cat", image: "data:image/png;base64,{base64.b64encode(PNG).decode()}"}}
  - id: broken
    triggers: [broken]
    steps:
      - {{plugin: ADJUST, input: {{text: "see", image: "media/missing.png", file: "media/x.txt"}}}}
  - id: quote
    triggers: ["what about this"]
    steps:
      - {{plugin: ADJUST, input: "{{REPLY_TO[user]}} said: {{REPLY_TO[text]}}"}}
  - id: pictures
    triggers: ["Trip*"]
    steps:
      - {{plugin: ADJUST, input: "?= str(len(IMAGES)) + ' ' + IMAGES[0]['file_id']"}}
"""


@asynccontextmanager
async def driven() -> AsyncIterator[Driven]:
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make(fake)
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            yield d
        finally:
            await adapter.stop()


async def test_a_reaction_is_placed_in_the_chat_of_its_message() -> None:
    async with driven() as d:
        target = d.fake.message("hello")["event"]["message"]["message_id"]
        reaction = {
            "message_id": target,
            "reaction_type": {"emoji_type": "THUMBSUP"},
            "operator_type": "user",
            "user_id": {"open_id": BOB},
            "action_time": "1",
        }
        await d.fake.push(d.fake.envelope("im.message.reaction.created_v1", reaction))
        sent = await d.fake.next_sent()
    assert sent["receive_id"] == GROUP and sent["content"] == {
        "text": f"{BOB} THUMBSUP true {GROUP}"
    }
    event = d.seen[0].event
    assert event is not None and event.data["message_id"] == target


async def test_a_removed_member_is_a_member_leave_event() -> None:
    async with driven() as d:
        gone = {
            "chat_id": GROUP,
            "operator_id": {"open_id": BOB},
            "users": [{"name": "Ann", "user_id": {"open_id": USER}}],
        }
        await d.fake.push(d.fake.envelope("im.chat.member.user.deleted_v1", gone))
        sent = await d.fake.next_sent()
    assert sent["content"] == {"text": "bye Ann kicked=true"}
    assert d.seen[0].event is not None and d.seen[0].event.data["operator"] == BOB


async def test_rich_text_with_pictures_comes_in_as_text_and_attachments() -> None:
    post = {
        "title": "Trip",
        "content": [
            [{"tag": "text", "text": "look "}, {"tag": "at", "user_id": "@_user_1"}],
            [{"tag": "img", "image_key": "img_v3_a"}, {"tag": "img", "image_key": "img_v3_b"}],
        ],
    }
    async with driven() as d:
        at_bot = d.fake.mention("@_user_1", BOT_OPEN_ID, "tmy")
        event = d.fake.message("", message_type="post", content=post, mentions=[at_bot])
        await d.fake.push(event)
        sent = await d.fake.next_sent()
        message = d.seen[0]
        assert message.api is not None
        url, headers = await message.api.media_source(message.attachments[0])
    assert sent["content"] == {"text": "2 img_v3_a"}
    assert message.text == "Trip\nlook" and message.mentions_bot is True
    mid = event["event"]["message"]["message_id"]
    assert url == f"{d.fake.base}/open-apis/im/v1/messages/{mid}/resources/img_v3_a?type=image"
    assert headers["Authorization"].startswith("Bearer t-")


async def test_a_picture_reply_is_uploaded_then_sent() -> None:
    async with driven() as d:
        await d.fake.push(d.fake.message("cat"))
        text = await d.fake.next_sent()
        image = await d.fake.next_sent()
    assert text["kind"] == "reply" and text["content"] == {"text": "a cat"}
    assert image["msg_type"] == "image" and image["kind"] == "send"
    assert d.fake.images[image["content"]["image_key"]] == PNG


async def test_a_picture_that_will_not_load_is_named_in_the_text() -> None:
    async with driven() as d:
        await d.fake.push(d.fake.message("broken"))
        sent = [await d.fake.next_sent() for _ in range(3)]
    assert [s["content"] for s in sent] == [
        {"text": "see"},
        {"text": "[image] missing.png"},
        {"text": "[file] x.txt"},
    ]


async def test_reply_to_is_the_quoted_message() -> None:
    async with driven() as d:
        quoted = d.fake.message("lunch at noon", sender=BOB)["event"]["message"]["message_id"]
        await d.fake.push(d.fake.message("what about this", parent_id=quoted))
        sent = await d.fake.next_sent()
    assert sent["content"] == {"text": f"{BOB} said: lunch at noon"}
    assert d.seen[0].reply_to == quoted and d.seen[0].mentions_bot is False


def test_from_settings_reads_the_section_and_its_credentials(tmp_path: Path) -> None:
    base = {"rules": str(tmp_path), "plugins": str(tmp_path / "none"), "console": False}
    assert from_settings(load_settings(env={}, **base)) is None  # off by default
    env = {"FEISHU_APP_ID": APP_ID, "LARK_SECRET": APP_SECRET, "FEISHU_ENCRYPT_KEY": "k"}
    section = {
        "enabled": True,
        "app_secret_env": "LARK_SECRET",
        "api_base": "https://open.larksuite.com",
    }
    adapter = from_settings(load_settings(env={}, adapters={"feishu": section}, **base), env=env)
    assert isinstance(adapter, FeishuAdapter)
    assert (adapter.app_id, adapter.app_secret, adapter.encrypt_key) == (APP_ID, APP_SECRET, "k")
    assert adapter.routes() == [] and adapter.config.mode == "websocket"
    hooked = load_settings(
        env={}, adapters={"feishu": {"enabled": True, "mode": "webhook"}}, **base
    )
    webhook = from_settings(hooked, env={})
    assert webhook is not None and [r.path for r in webhook.routes()] == ["/feishu/events"]
    with pytest.raises(ConfigError, match="mode"):
        load_settings(env={}, adapters={"feishu": {"enabled": True, "mode": "poll"}}, **base)


async def test_a_reply_picture_on_a_private_host_needs_limits_media_private_hosts() -> None:
    """A reply's picture is fetched with the guards every uploading adapter uses: a host on
    this machine only when ``limits.media_private_hosts`` lists it."""

    async def png(request: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    app = web.Application()
    app.router.add_get("/cat.png", png)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/cat.png"  # type: ignore[union-attr]
    refusing, allowing = FeishuAdapter(), FeishuAdapter(media_private_hosts=["127.0.0.1"])
    try:
        with pytest.raises(AdapterError, match="feishu: "):
            await refusing._load(url, "image")
        assert (await allowing._load(url, "image")).data == PNG
    finally:
        await refusing.stop()
        await allowing.stop()
        await runner.cleanup()
