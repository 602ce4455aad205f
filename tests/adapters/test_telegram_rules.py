"""Telegram end to end: the fake Bot API on loopback, the real engine and rules, a fake LLM
provider. What a Telegram user does reaches the rules, and what the rules answer reaches
Telegram."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.support.adapters import wait_state
from tests.support.llm_fake_provider import PNG, FakeProvider
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.llm_helpers import on
from tests.support.telegram_fake import GROUP, TOKEN, USER, FakeTelegram
from tmy.adapters.telegram import TelegramAdapter, TelegramConfig
from tmy.message import Message, Reply
from tmy.testing import Bot

BOB = {"id": 888, "is_bot": False, "first_name": "Bob"}
CAROL = {"id": 999, "is_bot": False, "first_name": "Carol"}
OTHER_GROUP = {"id": -100600, "type": "supergroup", "title": "Other group"}

RULES = r"""
rules:
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome {USER_NAME}! ({EVENT_RAW} in {CHAT})"}
  - id: poll
    triggers: [poll]
    steps:
      - plugin: ADJUST
        input:
          text: "Lunch?"
          buttons: [[{text: Pizza, data: "lunch:pizza"}, {text: Soup, data: "lunch:soup"}]]
  - id: voted
    events: [button]
    steps:
      - {plugin: ADJUST, input: "{USER_NAME} picked {EVENT_DATA[data]}"}
  - id: gate
    events: [join_request]
    steps:
      - {plugin: ADJUST, input: "?= 'tea' in EVENT_DATA['comment']", save: APPROVE}
      - {plugin: ADJUST, input: "?= 1 / 0", when: "?= EVENT_DATA['comment'] == 'boom'"}
      - {plugin: ADJUST, input: "?= ''"}
  - id: cat
    triggers: [cat]
    steps:
      - {plugin: ADJUST, input: {text: "a cat", image: "https://img.example/cat.png", reply: true}}
  - id: count
    triggers: ["[image]*"]
    steps:
      - {plugin: ADJUST, input: "?= str(len(IMAGES)) + ' image(s), ' + IMAGES[0]['mime']"}
  - id: quote
    triggers: ["what about this"]
    steps:
      - {plugin: ADJUST, input: "{REPLY_TO[user]} said: {REPLY_TO[text]}"}
  - id: describe
    triggers: ["describe*"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: LLM, vision: true}
  - id: tell
    triggers: ["tell *"]
    steps:
      - {plugin: LLM, stream: true}
  - id: mute
    triggers: [mute all]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "muted {CHAT}"}
"""


class Driven:
    def __init__(self, fake: FakeTelegram, adapter: TelegramAdapter, bot: Bot) -> None:
        self.fake, self.adapter, self.bot = fake, adapter, bot
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)


@asynccontextmanager
async def driven(provider: FakeProvider | None = None, **config: Any) -> AsyncIterator[Driven]:
    settings: dict[str, Any] = {"llm": on(provider)} if provider is not None else {}
    async with FakeTelegram() as fake, Bot({"r.yaml": RULES}, **settings) as bot:
        adapter = TelegramAdapter(TelegramConfig(api_base=fake.base, **config), token=TOKEN)
        adapter.backoff_base, adapter.backoff_cap = 0.05, 0.2
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, "connected")
            yield d
        finally:
            await adapter.stop()


async def test_a_member_join_is_welcomed_by_its_rule() -> None:
    async with driven() as d:
        await d.fake.member_join(BOB)
        sent = await d.fake.next_sent()
    assert sent["text"] == "Welcome Bob! (new_chat_members in -100500)"
    assert sent["chat_id"] == str(GROUP["id"])


async def test_a_pressed_button_reaches_its_rule_with_the_button_data() -> None:
    async with driven() as d:
        await d.fake.message("poll", chat=GROUP)
        poll = await d.fake.next_sent()
        (row,) = poll["reply_markup"]["inline_keyboard"]
        assert [(b["text"], b["callback_data"]) for b in row] == [
            ("Pizza", "lunch:pizza"),
            ("Soup", "lunch:soup"),
        ]
        carrier = d.fake.make_message("Lunch?", chat=GROUP, sender=d.fake.me)
        await d.fake.callback("lunch:soup", carrier, sender=BOB)
        answer = await d.fake.next_sent()
        assert (answer["text"], answer["chat_id"]) == ("Bob picked lunch:soup", "-100500")
        assert d.fake.count("answerCallbackQuery") == 1


async def test_join_requests_are_approved_and_declined_by_the_rule() -> None:
    async with driven() as d:
        await d.fake.join_request(BOB, bio="I like tea")
        approved = await d.fake.wait_calls("approveChatJoinRequest")
        await d.fake.join_request(CAROL, bio="coffee only")
        declined = await d.fake.wait_calls("declineChatJoinRequest")
        await d.fake.nothing_sent()  # the rule answers "" : nothing said in the group
    assert approved == [{"chat_id": "-100500", "user_id": "888"}]
    assert declined == [{"chat_id": "-100500", "user_id": "999"}]


async def test_a_failed_join_request_run_says_nothing_in_the_group() -> None:
    async with driven() as d:
        await d.fake.join_request(BOB, bio="boom")
        await d.fake.nothing_sent()  # no "Sorry, something went wrong." for a stranger's request


async def test_an_image_reply_goes_out_with_sendphoto_quoting_the_message() -> None:
    async with driven() as d:
        msg = await d.fake.message("cat")
        (photo,) = await d.fake.wait_calls("sendPhoto")
    assert photo["photo"] == "https://img.example/cat.png"
    assert photo["caption"] == "a cat"
    assert photo["reply_parameters"]["message_id"] == msg["message_id"]


PHOTO = [{"file_id": "pic", "file_unique_id": "p", "width": 4, "height": 4, "file_size": len(PNG)}]


async def test_an_image_only_message_matches_by_its_placeholder_and_quotes_are_reply_to() -> None:
    async with driven() as d:
        await d.fake.message(None, photo=PHOTO)
        assert (await d.fake.next_sent())["text"] == "1 image(s), image/jpeg"
        earlier = d.fake.make_message("lunch at noon", chat=GROUP, sender=BOB)
        await d.fake.message("what about this", chat=GROUP, reply_to=earlier)
        assert (await d.fake.next_sent())["text"] == "888 said: lunch at noon"


async def test_an_image_reaches_the_llm_step_downloaded_with_getfile(
    provider: FakeProvider,
) -> None:
    """Telegram's file URL holds the bot token: tmy downloads it and sends the bytes."""
    provider.script("fake", [Completion("a small square")])
    async with driven(provider) as d:
        d.fake.files["pic"] = PNG
        await d.fake.message(None, photo=PHOTO, caption="describe this")
        sent = await d.fake.next_sent()
    assert sent["text"] == "a small square"
    content = provider.seen()[0]["messages"][-1]["content"]
    pictures = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert pictures == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert d.fake.calls_of("getFile") == [{"file_id": "pic"}]
    assert TOKEN not in str(provider.seen())


async def test_a_streamed_answer_grows_by_edits_at_telegram(provider: FakeProvider) -> None:
    text = "Streaming answers grow in place, one edit after another."
    provider.script("fake", [Completion(text)])
    async with driven(provider) as d:
        d.adapter.stream_interval = 0.0  # every piece edits (the default is at most 1/s)
        await d.fake.message("tell me")
        first = await d.fake.next_sent()
        edits = await d.fake.wait_calls("editMessageText")
        async with asyncio.timeout(10):
            while edits[-1]["text"] != text:
                await asyncio.sleep(0.01)
                edits = d.fake.calls_of("editMessageText")
        await d.fake.nothing_sent()  # the final text is the last edit, not a new message
    assert provider.seen()[0]["stream"] is True
    assert text.startswith(first["text"]) and first["text"] != text
    shown = [e["text"] for e in d.fake.calls_of("editMessageText")]
    assert len(shown) >= 1 and shown[-1] == text
    assert all(text.startswith(s) for s in shown)
    methods = [m for _, m, _ in d.fake.calls if m in ("sendMessage", "editMessageText")]
    assert methods[0] == "sendMessage" and methods.count("sendMessage") == 1


async def test_a_group_owner_runs_an_admin_only_rule_in_their_group_only() -> None:
    async with driven(admins_from=("owner", "admin")) as d:
        d.fake.admins[GROUP["id"]] = [(USER, "creator")]
        d.fake.admins[OTHER_GROUP["id"]] = [(BOB, "administrator")]
        await d.fake.message("mute all", chat=GROUP)
        assert (await d.fake.next_sent())["text"] == "muted -100500"
        await d.fake.message("mute all", chat=OTHER_GROUP)  # Ann is nobody there
        await d.fake.nothing_sent()
        await d.fake.message("mute all", chat=OTHER_GROUP, sender=BOB)
        assert (await d.fake.next_sent())["text"] == "muted -100600"
