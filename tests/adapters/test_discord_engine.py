"""Discord end to end: discord.py's own objects fed gateway payloads, the real engine and
rules, the loopback FakeDiscord for what goes out, a fake LLM provider and image host.
What a Discord user does reaches the rules, and what the rules answer reaches Discord."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.adapters.test_discord_adapter import (
    ALICE,
    BOT_USER,
    CHANNEL_ID,
    GUILD_ID,
    FakeDiscord,
    faked,
    msg_payload,
)
from tests.adapters.test_discord_adapter import driven as driven_with
from tests.adapters.test_discord_events import (
    BOB,
    BOB_ID,
    MODS_ID,
    WELCOMING,
    interaction_payload,
    member,
    settle,
)
from tests.support.llm_fake_provider import PNG, FakeProvider, ImageServer
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.llm_helpers import on

RULES = r"""
rules:
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome <@{USER}>! ({EVENT_RAW} in {CHAT})"}
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
      - {plugin: ADJUST, input: "<@{USER}> picked {EVENT_DATA[data]}"}
  - id: cat
    triggers: [cat]
    steps:
      - {plugin: ADJUST, input: {text: "a cat", image: "https://img.example/cat.png", reply: true}}
  - id: count
    triggers: ["[image]*"]
    steps:
      - {plugin: ADJUST, input: "?= str(len(IMAGES)) + ' image(s): ' + IMAGES[0]['name']"}
  - id: describe
    triggers: ["describe*"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: LLM, vision: true}
  - id: tell
    triggers: ["tell *"]
    steps:
      - {plugin: LLM, stream: true}
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


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with faked(monkeypatch) as f:
        yield f


@pytest.fixture
async def images() -> AsyncIterator[ImageServer]:
    async with ImageServer() as server:
        yield server


def driven(fake: FakeDiscord, provider: FakeProvider | None = None, **config: Any) -> Any:
    settings = None
    if provider is not None:  # the loopback image host is allowed as limits.media_private_hosts
        settings = {"llm": on(provider), "media_private_hosts": ["127.0.0.1"]}
    return driven_with(fake, rules=RULES, guild=WELCOMING, settings=settings, **config)


async def test_a_member_join_is_welcomed_by_its_rule(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        d.state.parse_guild_member_add({"guild_id": str(GUILD_ID), **member(BOB)})
        await settle(d)
        cid, body = await fake.next_post()
    assert cid == str(CHANNEL_ID)
    assert body["content"] == f"Welcome <@{BOB_ID}>! (GUILD_MEMBER_ADD in {CHANNEL_ID})"
    assert body["allowed_mentions"] == {"parse": []}  # the text names them, pings nobody


async def test_a_pressed_button_reaches_its_rule_with_the_button_data(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        await d.deliver(msg_payload("poll"))
        _, poll = await fake.next_post()
        (row,) = poll["components"]
        assert [(b["label"], b["custom_id"]) for b in row["components"]] == [
            ("Pizza", "lunch:pizza"),
            ("Soup", "lunch:soup"),
        ]
        carrier = msg_payload("Lunch?", author=BOT_USER)
        carrier["components"] = poll["components"]
        d.state.parse_interaction_create(interaction_payload("lunch:soup", carrier))
        await settle(d, 2)
        _, answer = await fake.next_post()
    assert answer["content"] == f"<@{ALICE['id']}> picked lunch:soup"
    assert fake.acks[0][1] == {"type": 6}


async def test_an_image_reply_goes_out_as_an_embed_quoting_the_message(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        payload = msg_payload("cat")
        await d.deliver(payload)
        _, body = await fake.next_post()
    assert body["content"] == "a cat"
    assert [e["image"]["url"] for e in body["embeds"]] == ["https://img.example/cat.png"]
    assert body["message_reference"]["message_id"] == int(payload["id"])


def image_message(content: str, url: str) -> dict[str, Any]:
    payload = msg_payload(content)
    payload["attachments"] = [
        {"id": "31", "filename": "cat.png", "size": len(PNG), "url": url, "proxy_url": url,
         "content_type": "image/png", "width": 4, "height": 4},
    ]  # fmt: skip
    return payload


async def test_an_image_only_message_matches_by_its_placeholder_with_images(
    fake: FakeDiscord,
) -> None:
    async with driven(fake) as d:
        await d.deliver(image_message("", "https://cdn.discordapp.com/attachments/1/2/cat.png"))
        _, body = await fake.next_post()
    assert body["content"] == "1 image(s): cat.png"


async def test_an_image_reaches_the_llm_step_as_a_downloaded_data_url(
    fake: FakeDiscord, provider: FakeProvider, images: ImageServer
) -> None:
    """Discord's CDN URLs expire, so tmy fetches the picture (no headers) and sends its bytes."""
    provider.script("fake", [Completion("a small square")])
    async with driven(fake, provider) as d:
        await d.deliver(image_message("describe", images.url("/public/cat.png")))
        _, body = await fake.next_post()
    assert body["content"] == "a small square"
    content = provider.seen()[0]["messages"][-1]["content"]
    pictures = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert pictures == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert "Authorization" not in images.hits[0]["headers"]


async def test_a_streamed_answer_grows_by_edits_at_discord(
    fake: FakeDiscord, provider: FakeProvider
) -> None:
    text = "Streaming answers grow in place, one edit after another."
    provider.script("fake", [Completion(text)])
    async with driven(fake, provider) as d:
        d.adapter.stream_interval = 0.0  # every piece edits (the default is at most 1/s)
        await d.deliver(msg_payload("tell me"))
        _, first = await fake.next_post()
    assert provider.seen()[0]["stream"] is True
    assert text.startswith(first["content"]) and first["content"] != text
    shown = [body["content"] for _, body in fake.edits]
    assert len(shown) >= 3 and shown[-1] == text
    assert all(text.startswith(s) for s in shown)
    assert fake.posts.empty()  # one message, grown by edits


def said_by(user: dict[str, Any], roles: tuple[int, ...], content: str) -> dict[str, Any]:
    payload = msg_payload(content, author=user)
    payload["member"] = {k: v for k, v in member(user, roles).items() if k != "user"}
    return payload


async def test_a_member_with_a_listed_role_runs_an_admin_only_rule(fake: FakeDiscord) -> None:
    async with driven(fake, admins_from=(str(MODS_ID),)) as d:
        await d.deliver(said_by(BOB, (MODS_ID,), "mute all"))
        _, body = await fake.next_post()
        assert body["content"] == f"muted {CHANNEL_ID}"
        carol = {**BOB, "id": "8800000000000000009", "username": "carol"}
        await d.deliver(said_by(carol, (), "mute all"))  # no role: refused
        await d.deliver(msg_payload("mute all", guild=False))  # a DM: no roles at all
    assert fake.posts.empty()
    assert [m.chat_admin for m in d.seen] == [True, False, False]


async def test_reply_to_holds_the_quoted_message_resolved_or_fetched(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        earlier = msg_payload("rain tomorrow", author=BOB)
        await d.deliver(msg_payload("what about this", reply_to=earlier))
        _, resolved = await fake.next_post()
        older = msg_payload("an old message", author=BOB)
        fake.stored[older["id"]] = older
        fetching = msg_payload("what about this")
        fetching["message_reference"] = {"message_id": older["id"], "channel_id": str(CHANNEL_ID)}
        await d.deliver(fetching)
        _, fetched = await fake.next_post()
    assert resolved["content"] == f"{BOB_ID} said: rain tomorrow"
    assert fetched["content"] == f"{BOB_ID} said: an old message"
