"""OneBot end to end: a fake NapCat on the real listener, the real engine and rules, a fake
LLM provider and image host on loopback. What a QQ user does reaches the rules, and what the
rules answer reaches QQ."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.llm_fake_provider import PNG, FakeProvider, ImageServer
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.llm_helpers import on
from tests.support.onebot_fake import image, loopback, text
from tmy.adapters.onebot.notices import to_event
from tmy.message import Message
from tmy.testing import Bot

PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()

LLM_RULES = """
rules:
  - id: describe
    triggers: ["describe *"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: LLM, vision: true}
  - id: tell
    triggers: ["tell *"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: LLM, stream: chunks}
"""


EVENT_RULES = """
rules:
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome {USER}! ({EVENT_RAW} in {CHAT})"}
  - id: friends
    events: [friend_request]
    steps:
      - {plugin: ADJUST, input: "?= EVENT_DATA['comment'] == 'tmy sent me'", save: APPROVE}
      - {plugin: ADJUST, input: "?= ''"}
  - id: gate
    events: [join_request]
    steps:
      - {plugin: ADJUST, input: "?= '42' in EVENT_DATA['comment']", save: APPROVE}
      - {plugin: ADJUST, input: "wrong answer", save: APPROVE_REASON, when: "?= not APPROVE"}
      - {plugin: ADJUST, input: "?= 'welcome aboard' if APPROVE else ''"}
  - id: poked
    events: [poke]
    steps:
      - {plugin: ADJUST, input: "ouch, {USER}"}
  - id: cat
    triggers: [cat]
    steps:
      - {plugin: ADJUST, input: {text: "a cat", image: "https://img.example/cat.png", reply: true}}
  - id: quote
    triggers: ["what about this"]
    steps:
      - {plugin: ADJUST, input: "{REPLY_TO[user]} said: {REPLY_TO[text]}"}
  - id: mute
    triggers: [mute all]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "muted {CHAT}"}
"""


def sent_text(action: dict[str, Any]) -> str:
    return "".join(s["data"]["text"] for s in action["params"]["message"] if s["type"] == "text")


@pytest.fixture
async def images() -> AsyncIterator[ImageServer]:
    async with ImageServer() as server:
        yield server


async def test_an_image_message_reaches_the_llm_step_as_a_downloaded_data_url(
    provider: FakeProvider, images: ImageServer
) -> None:
    """QQ's image URLs expire, so tmy fetches the picture (no headers) and sends its bytes."""
    url = images.url("/public/qq.png")
    provider.script("fake", [Completion("a small square")])
    async with (  # the image host is on 127.0.0.1: allowed as a NapCat's would be
        Bot({"r.yaml": LLM_RULES}, llm=on(provider), media_private_hosts=["127.0.0.1"]) as bot,
        loopback(bot.engine.handle, store=bot.app.store) as (_, impl),
    ):
        await impl.group([text("describe "), image(url)], group=30003, message_id=7)
        answer = await impl.next_action()
    assert sent_text(answer) == "a small square"
    content = provider.seen()[0]["messages"][-1]["content"]
    pictures = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert pictures == [PNG_URL]
    (hit,) = images.hits
    assert hit["path"] == "/public/qq.png" and "Authorization" not in hit["headers"]


async def test_a_stream_chunks_answer_goes_out_sentence_by_sentence(provider: FakeProvider) -> None:
    provider.script("fake", [Completion("One is here. Two is here! And three.")])
    async with (
        Bot({"r.yaml": LLM_RULES}, llm=on(provider)) as bot,
        loopback(bot.engine.handle, store=bot.app.store, send_interval=0.05) as (_, impl),
    ):
        await impl.private("tell me three things")
        sent = [sent_text(await impl.next_action()) for _ in range(3)]
        await impl.no_action(0.2)
    assert provider.seen()[0]["stream"] is True
    assert sent == ["One is here.", "Two is here!", "And three."]


@pytest.fixture
async def events_bot() -> AsyncIterator[Bot]:
    async with Bot({"e.yaml": EVENT_RULES}) as bot:
        yield bot


async def test_a_member_join_is_welcomed_by_its_rule(events_bot: Bot) -> None:
    async with loopback(events_bot.engine.handle, store=events_bot.app.store) as (_, impl):
        await impl.member_join(20005, group=30003, operator=20002)
        action = await impl.next_action()
    assert (action["action"], action["params"]["group_id"]) == ("send_msg", 30003)
    assert sent_text(action) == "Welcome 20005! (notice.group_increase in group:30003)"


async def test_friend_requests_approved_and_rejected_by_a_rule(events_bot: Bot) -> None:
    async with loopback(events_bot.engine.handle, store=events_bot.app.store) as (_, impl):
        await impl.friend_request(20008, "tmy sent me", "flag-yes")
        approved = await impl.next_action()
        await impl.friend_request(20009, "buy followers?", "flag-no")
        rejected = await impl.next_action()
        await impl.no_action(0.2)  # the rule answers with no text
    assert approved == {**approved, "action": "set_friend_add_request",
                        "params": {"flag": "flag-yes", "approve": True}}  # fmt: skip
    assert rejected == {**rejected, "action": "set_friend_add_request",
                        "params": {"flag": "flag-no", "approve": False}}  # fmt: skip


async def test_a_join_request_with_a_question(events_bot: Bot) -> None:
    async with loopback(events_bot.engine.handle, store=events_bot.app.store) as (_, impl):
        await impl.request("group", sub_type="add", group_id=7, user_id=5,
                           comment="Question: 6*7?\nAnswer: 42", flag="a-1")  # fmt: skip
        accepted, hello = await impl.next_action(), await impl.next_action()
        await impl.request("group", sub_type="add", group_id=7, user_id=6,
                           comment="Question: 6*7?\nAnswer: dunno", flag="a-2")  # fmt: skip
        declined = await impl.next_action()
        await impl.no_action(0.2)
    assert accepted["params"] == {"flag": "a-1", "sub_type": "add", "approve": True}
    assert (hello["params"]["group_id"], sent_text(hello)) == (7, "welcome aboard")
    assert declined["params"] == {"flag": "a-2", "sub_type": "add", "approve": False,
                                  "reason": "wrong answer"}  # fmt: skip


async def test_a_poke_is_answered(events_bot: Bot) -> None:
    async with loopback(events_bot.engine.handle, store=events_bot.app.store) as (_, impl):
        await impl.poke(20002, 10001, group=30003)
        action = await impl.next_action()
    assert (action["params"]["group_id"], sent_text(action)) == (30003, "ouch, 20002")


async def test_an_image_reply_goes_out_as_an_image_segment(events_bot: Bot) -> None:
    async with loopback(events_bot.engine.handle, store=events_bot.app.store) as (_, impl):
        await impl.group("cat", group=30003, message_id=444)
        action = await impl.next_action()
    assert action["params"]["message"] == [
        {"type": "reply", "data": {"id": "444"}},
        {"type": "text", "data": {"text": "a cat"}},
        {"type": "image", "data": {"file": "https://img.example/cat.png"}},
    ]


async def test_a_qq_group_admin_runs_an_admin_only_rule_in_their_group_only(
    events_bot: Bot,
) -> None:
    """admins_from: [owner, admin] — user 20002 is an admin of group 1, a member of group 2."""
    async with loopback(
        events_bot.engine.handle, store=events_bot.app.store, admins_from=("owner", "admin")
    ) as (_, impl):
        await impl.group("mute all", group=1, user=20002, role="admin", message_id=1)
        action = await impl.next_action()
        await impl.group("mute all", group=2, user=20002, role="member", message_id=2)
        await impl.no_action(0.3)
    assert (action["params"]["group_id"], sent_text(action)) == (1, "muted group:1")


async def test_without_admins_from_a_group_owner_is_no_admin(events_bot: Bot) -> None:
    async with loopback(events_bot.engine.handle, store=events_bot.app.store) as (_, impl):
        await impl.group("mute all", group=1, user=20002, role="owner", message_id=1)
        await impl.no_action(0.3)


async def test_reply_to_holds_the_quoted_message_seen_or_fetched(events_bot: Bot) -> None:
    async with loopback(events_bot.engine.handle, store=events_bot.app.store) as (_, impl):
        impl.answers["get_msg"] = {"message_id": 77, "message": [text("an old message")],
                                   "sender": {"user_id": 20003, "nickname": "Cy"}}  # fmt: skip
        await impl.group("rain tomorrow", group=1, user=20004, message_id=100)
        quoting = [{"type": "reply", "data": {"id": "100"}}, text("what about this")]
        await impl.group(quoting, group=1, message_id=101)
        seen = await impl.next_action()
        fetching = [{"type": "reply", "data": {"id": "77"}}, text("what about this")]
        await impl.group(fetching, group=1, message_id=102)
        get_msg, fetched = await impl.next_action(), await impl.next_action()
    assert sent_text(seen) == "20004 said: rain tomorrow"
    assert (get_msg["action"], get_msg["params"]) == ("get_msg", {"message_id": 77})
    assert sent_text(fetched) == "20003 said: an old message"


async def test_a_failed_request_run_leaves_it_pending_and_tells_the_requester_nothing() -> None:
    rules = """\
rules:
  - id: broken
    events: [friend_request]
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0", save: APPROVE}
"""
    async with Bot({"e.yaml": rules}) as bot:
        reply = await bot.engine.handle(friend_request_message())
        assert reply.error is not None  # the run did fail
        async with loopback(bot.engine.handle, store=bot.app.store) as (_, impl):
            await impl.friend_request(20008, "hi", "flag-1")
            await impl.no_action(0.5)  # neither a decision nor "Sorry, something went wrong."


def friend_request_message() -> Message:
    payload = {"post_type": "request", "request_type": "friend", "self_id": 10001,
               "user_id": 20008, "comment": "hi", "flag": "flag-1", "time": 1}  # fmt: skip
    message = to_event("10001", payload)
    assert message is not None
    return message
