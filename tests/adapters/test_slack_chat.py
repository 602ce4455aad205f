"""Slack's whole chat end to end: files in and out, mentions, streaming by edits, workspace
roles, thread quotes and reactions — the fake Slack on loopback, the real engine and rules,
a fake LLM provider."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tests.support.adapters import wait_state
from tests.support.llm_fake_provider import PNG, FakeProvider
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.llm_helpers import on
from tests.support.slack_fake import ANN, APP_TOKEN, BOB, BOT_TOKEN, CHANNEL, FakeSlack
from tmy.adapters.slack import MAX_TEXT, SlackAdapter, SlackConfig
from tmy.message import Message, Reply
from tmy.testing import Bot

DOT = "data:image/png;base64," + base64.b64encode(PNG).decode()

RULES = rf"""
rules:
  - id: cat
    triggers: [cat]
    steps:
      - {{plugin: ADJUST, input: {{text: "a cat", image: "https://img.example/cat.png"}}}}
  - id: dot
    triggers: [dot]
    steps:
      - {{plugin: ADJUST, input: {{text: "a dot", image: "{DOT}", mention: {BOB}}}}}
  - id: count
    triggers: ["[image]*"]
    steps:
      - {{plugin: ADJUST, input: "?= str(len(IMAGES)) + ' image(s), ' + IMAGES[0]['mime']"}}
  - id: quote
    triggers: ["what about this"]
    steps:
      - {{plugin: ADJUST, input: "{{REPLY_TO[user]}} said: {{REPLY_TO[text]}}"}}
  - id: describe
    triggers: ["describe*"]
    on_error: "failed: {{STEP_ERROR}}"
    steps:
      - {{plugin: LLM, vision: true}}
  - id: tell
    triggers: ["tell *"]
    steps:
      - {{plugin: LLM, stream: true}}
  - id: mute
    triggers: [mute all]
    admin_only: true
    steps:
      - {{plugin: ADJUST, input: "muted {{CHAT}}"}}
  - id: liked
    events: [reaction]
    steps:
      - {{plugin: ADJUST, input: "{{USER_NAME}} {{EVENT_DATA[emoji]}} {{EVENT_DATA[message_id]}}"}}
"""


class Driven:
    def __init__(self, fake: FakeSlack, adapter: SlackAdapter, bot: Bot) -> None:
        self.fake, self.adapter, self.bot = fake, adapter, bot
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)


@asynccontextmanager
async def driven(provider: FakeProvider | None = None, **config: Any) -> AsyncIterator[Driven]:
    settings: dict[str, Any] = {"llm": on(provider)} if provider is not None else {}
    async with FakeSlack() as fake, Bot({"r.yaml": RULES}, **settings) as bot:
        adapter = SlackAdapter(SlackConfig(api_base=fake.base, **config), bot_token=BOT_TOKEN,
                               app_token=APP_TOKEN, pacing=0.0)  # fmt: skip
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            yield d
        finally:
            await adapter.stop()


def png_file(fake: FakeSlack, file_id: str = "F0PIC0001") -> dict[str, Any]:
    fake.files[file_id] = PNG
    return {"id": file_id, "name": "dot.png", "mimetype": "image/png", "size": len(PNG),
            "url_private": f"{fake.root}/files/{file_id}", "mode": "hosted"}  # fmt: skip


async def test_an_image_url_is_an_image_block_and_data_is_uploaded_with_a_mention() -> None:
    async with driven() as d:
        await d.fake.event(d.fake.message("cat"))
        post = await d.fake.next_post()
        section, image = post["blocks"]
        assert (post["text"], section["text"]["text"]) == ("a cat", "a cat")
        assert image == {"type": "image", "image_url": "https://img.example/cat.png",
                         "alt_text": "image"}  # fmt: skip
        parent = d.fake.next_ts()
        await d.fake.event(d.fake.message("dot", thread_ts=parent))
        post = await d.fake.next_post()
        assert (post["text"], post["thread_ts"]) == (f"<@{BOB}> a dot", parent)
        (done,) = await d.fake.wait_calls("files.completeUploadExternal")
    assert (done["channel_id"], done["thread_ts"]) == (CHANNEL, parent)
    assert list(d.fake.uploads.values()) == [PNG]


async def test_a_shared_image_matches_by_placeholder_and_reaches_the_llm_downloaded(
    provider: FakeProvider,
) -> None:
    provider.script("fake", [Completion("a small square")])
    async with driven(provider) as d:
        file = png_file(d.fake)
        await d.fake.event(d.fake.message("", subtype="file_share", files=[file]))
        assert (await d.fake.next_post())["text"] == "1 image(s), image/png"
        await d.fake.event(d.fake.message("describe this", subtype="file_share", files=[file]))
        post = await d.fake.next_post()
    assert post["text"] == "a small square"
    content = provider.seen()[0]["messages"][-1]["content"]
    pictures = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert pictures == [DOT]
    assert BOT_TOKEN not in str(provider.seen())
    assert d.seen[-1].attachments[0].url == file["url_private"]


async def test_a_streamed_answer_grows_by_chat_update(provider: FakeProvider) -> None:
    text = "Streaming answers grow in place, one edit after another."
    provider.script("fake", [Completion(text)])
    async with driven(provider) as d:
        d.adapter.stream_interval = 0.0
        await d.fake.event(d.fake.message("tell me"))
        first = await d.fake.next_post()
        async with asyncio.timeout(10):
            while not d.fake.calls_of("chat.update") or (
                d.fake.calls_of("chat.update")[-1]["text"] != text
            ):
                await asyncio.sleep(0.01)
        await d.fake.nothing_posted()  # the final text is the last edit, not a new message
    assert text.startswith(first["text"]) and first["text"] != text
    assert all(e["ts"] == first["ts"] for e in d.fake.calls_of("chat.update"))


async def test_workspace_admins_are_chat_admins_by_admins_from() -> None:
    async with driven(admins_from=("admin",)) as d:
        await d.fake.event(d.fake.message("mute all"))  # Ann is no admin
        d.fake.users[BOB]["is_admin"] = True
        await d.fake.event(d.fake.message("mute all", user=BOB))
        post = await d.fake.next_post()
        assert post["text"] == f"muted {CHANNEL}"
        assert [m.chat_admin for m in d.seen] == [False, True]
        assert len(d.fake.calls_of("users.info")) == 2  # one per user, then cached


async def test_a_thread_reply_quotes_its_first_message_and_reactions_are_events() -> None:
    async with driven() as d:
        parent = d.fake.next_ts()
        d.fake.history[parent] = {"type": "message", "user": BOB, "ts": parent,
                                  "text": "lunch at <@U0ANN0001>'s?"}  # fmt: skip
        await d.fake.event(d.fake.message("what about this", thread_ts=parent))
        post = await d.fake.next_post()
        assert (post["text"], post["thread_ts"]) == (f"{BOB} said: lunch at @Ann's?", parent)
        item = {"type": "message", "channel": CHANNEL, "ts": parent}
        reaction = {"type": "reaction_added", "user": ANN, "reaction": "thumbsup",
                    "item_user": BOB, "event_ts": d.fake.next_ts(), "item": item}  # fmt: skip
        await d.fake.event(reaction)
        post = await d.fake.next_post()
    assert post["text"] == f"Ann thumbsup {parent}"


async def test_a_remote_files_url_gets_no_bot_token(provider: FakeProvider) -> None:
    """A remote file's ``url_private`` is its ``external_url`` on any host (files.remote.add):
    downloading it must not hand that host the bot token."""
    seen: list[str | None] = []

    async def picture(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(body=PNG, content_type="image/png")

    app = web.Application()
    app.router.add_get("/shared.png", picture)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    provider.script("fake", [Completion("a small square")])
    try:
        async with driven(provider) as d:
            remote = {"id": "F0REMOTE1", "name": "shared.png", "mimetype": "image/png",
                      "mode": "external", "is_external": True, "external_type": "app",
                      "url_private": f"http://127.0.0.1:{port}/shared.png"}  # fmt: skip
            await d.fake.event(d.fake.message("describe it", subtype="file_share", files=[remote]))
            post = await d.fake.next_post()
    finally:
        await runner.cleanup()
    assert seen and all(BOT_TOKEN not in (h or "") for h in seen), seen
    assert post["text"] == "a small square"


async def test_a_streamed_answer_full_of_markup_stays_within_the_limit(
    provider: FakeProvider,
) -> None:
    text = "<" * 3000  # 12,000 characters once escaped
    provider.script("fake", [Completion(text)])
    async with driven(provider) as d:
        d.adapter.stream_interval = 0.0
        await d.fake.event(d.fake.message("tell me"))
        first = await d.fake.next_post()
        rest = [await d.fake.next_post(), await d.fake.next_post()]
        await d.fake.nothing_posted()
        edits = d.fake.calls_of("chat.update")
    sent = [first["text"], *(e["text"] for e in edits), *(p["text"] for p in rest)]
    assert all(len(t) <= MAX_TEXT for t in sent), [len(t) for t in sent]
    final = edits[-1]["text"] if edits else first["text"]
    assert (final + "".join(p["text"] for p in rest)) == "&lt;" * 3000


async def test_an_image_slack_cannot_fetch_costs_the_picture_not_the_answer() -> None:
    """Slack refuses a whole message (invalid_blocks, "downloading image failed") when it
    cannot fetch one image block's URL: the answer goes out with the picture as a link."""
    async with driven() as d:
        d.fake.broken_images = {"https://img.example/cat.png"}
        await d.fake.event(d.fake.message("cat"))
        post = await d.fake.next_post()
    assert post["text"] == "a cat"
    assert [b["type"] for b in post["blocks"]] == ["section", "section"]
    assert post["blocks"][1]["text"]["text"] == "<https://img.example/cat.png>"
