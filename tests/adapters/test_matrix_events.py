"""Matrix end to end, the whole chat: events, media in and out, roles, streaming, mentions
out and encrypted rooms — the fake homeserver on loopback, the real engine and rules."""

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
from tests.support.matrix_fake import FakeHomeserver
from tests.support.matrix_fake_rooms import ANN, BOB, BOT, TOKEN
from tmy.adapters.matrix import Credentials, MatrixAdapter, MatrixConfig
from tmy.adapters.matrix.replies import ENCRYPTED_NOTICE
from tmy.message import Target
from tmy.testing import Bot

RULES = r"""
rules:
  - id: bye
    events: [member_leave]
    steps:
      - plugin: ADJUST
        input: "bye {USER} (kicked: {EVENT_DATA[kicked]}, by '{EVENT_DATA[operator]}')"
  - id: hi
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "hi {USER}, invited by '{EVENT_DATA[operator]}'"}
  - id: reacted
    events: [reaction]
    steps:
      - plugin: ADJUST
        input: "{USER} {EVENT_DATA[emoji]} {EVENT_DATA[added]} on {EVENT_DATA[message_id]}"
  - id: recalled
    events: [message_recall]
    steps:
      - {plugin: ADJUST, input: "{EVENT_DATA[operator]} removed {USER}'s {EVENT_DATA[message_id]}"}
  - id: mute
    triggers: [mute all]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "muted {CHAT}"}
  - id: hello
    triggers: [hello]
    steps:
      - {plugin: ADJUST, input: {text: "hi there", mention: "{USER}", reply: true}}
  - id: cat
    triggers: [cat]
    steps:
      - {plugin: ADJUST, input: {text: "a cat", image: "data:image/png;base64,PNGDATA"}}
  - id: again
    triggers: ["[image]*"]
    steps:
      - {plugin: ADJUST, input: {text: "?= IMAGES[0]['mime']", image: "?= IMAGES[0]['url']"}}
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
""".replace("PNGDATA", base64.b64encode(PNG).decode())


class Driven:
    def __init__(self, fake: FakeHomeserver, adapter: MatrixAdapter) -> None:
        self.fake, self.adapter = fake, adapter


@asynccontextmanager
async def driven(
    fake: FakeHomeserver, provider: FakeProvider | None = None, **config: Any
) -> AsyncIterator[Driven]:
    settings: dict[str, Any] = {"llm": on(provider)} if provider is not None else {}
    async with Bot({"r.yaml": RULES}, **settings) as bot:
        given = Credentials(user_id="", access_token=TOKEN, password="")
        adapter = MatrixAdapter(MatrixConfig(enabled=True, api_base=fake.base, **config),
                                credentials=given, store=bot.app.store)  # fmt: skip
        adapter.backoff_base, adapter.backoff_cap, adapter.poll_timeout = 0.02, 0.1, 0.5
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "connected")
            yield Driven(fake, adapter)
        finally:
            await adapter.stop()


async def test_a_kick_is_a_member_leave_with_its_operator() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB)
        async with driven(fake):
            await fake.leave(room, BOB, by=ANN)
            kicked = await fake.next_sent()
            await fake.leave(room, ANN)
            left = await fake.next_sent()
    assert kicked["content"]["body"] == f"bye {BOB} (kicked: true, by '{ANN}')"
    assert left["content"]["body"] == f"bye {ANN} (kicked: false, by '')"


async def test_a_join_after_an_invite_names_the_inviter() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN)
        async with driven(fake):
            await fake.member(room, BOB, "invite", sender=ANN)
            await fake.join(room, BOB)
            invited = await fake.next_sent()
            await fake.leave(room, BOB)
            await fake.next_sent()
            await fake.join(room, BOB)
            rejoined = await fake.next_sent()
    assert invited["content"]["body"] == f"hi {BOB}, invited by '{ANN}'"
    assert rejoined["content"]["body"] == f"hi {BOB}, invited by ''"


async def test_reactions_given_and_taken_back_and_a_recall() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB)
        async with driven(fake):
            said = await fake.message(room, BOB, "nice day")
            relates = {"rel_type": "m.annotation", "event_id": said["event_id"], "key": "👍"}
            reaction = await fake.post(room, ANN, "m.reaction", {"m.relates_to": relates})
            given = await fake.next_sent()
            await fake.post(room, ANN, "m.room.redaction", {"redacts": reaction["event_id"]})
            taken = await fake.next_sent()
            await fake.post(room, ANN, "m.room.redaction", {"redacts": said["event_id"]})
            recalled = await fake.next_sent()
    target = said["event_id"]
    assert given["content"]["body"] == f"{ANN} 👍 true on {target}"
    assert taken["content"]["body"] == f"{ANN} 👍 false on {target}"
    assert recalled["content"]["body"] == f"{ANN} removed {BOB}'s {target}"


async def test_power_levels_make_chat_admins() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB, power={ANN: 50, BOB: 0})
        async with driven(fake, admins_from=("admin",)):
            await fake.message(room, BOB, "mute all")
            await fake.nothing_sent()
            await fake.message(room, ANN, "mute all")
            sent = await fake.next_sent()
    assert sent["content"]["body"] == f"muted {room}"


async def test_a_mention_out_is_a_pill_with_m_mentions_quoting_the_message() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB)
        async with driven(fake):
            said = await fake.message(room, ANN, "hello")
            sent = await fake.next_sent()
    content = sent["content"]
    assert content["body"] == "Ann hi there"
    assert content["m.mentions"] == {"user_ids": [ANN]}
    assert content["formatted_body"] == f'<a href="https://matrix.to/#/{ANN}">Ann</a> hi there'
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": said["event_id"]}}


async def test_an_image_reply_is_uploaded_and_sent_as_m_image() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with driven(fake):
            await fake.message(room, ANN, "cat")
            text = await fake.next_sent()
            image = await fake.next_sent()
    assert text["content"]["body"] == "a cat"
    content = image["content"]
    assert content["msgtype"] == "m.image" and content["info"]["mimetype"] == "image/png"
    media_id = content["url"].rsplit("/", 1)[1]
    assert fake.media[media_id] == (PNG, "image/png")


async def test_an_image_message_is_an_attachment_and_can_be_sent_back() -> None:
    async with FakeHomeserver() as fake:
        fake.media["pic"] = (PNG, "image/png")
        room = fake.room("dm", ANN)
        async with driven(fake):
            image = {"url": "mxc://example.org/pic", "info": {"mimetype": "image/png"}}
            await fake.message(room, ANN, "pic.png", msgtype="m.image", **image)
            text = await fake.next_sent()
            again = await fake.next_sent()
    assert text["content"]["body"] == "image/png"
    assert again["content"]["url"] == "mxc://example.org/pic"  # not uploaded a second time
    assert fake.count("POST", "/upload") == 0


async def test_an_image_reaches_the_llm_downloaded_with_the_token(provider: FakeProvider) -> None:
    provider.script("fake", [Completion("a small square")])
    async with FakeHomeserver() as fake:
        fake.media["pic"] = (PNG, "image/png")
        room = fake.room("dm", ANN)
        async with driven(fake, provider):
            image = {"url": "mxc://example.org/pic", "filename": "pic.png"}
            await fake.message(room, ANN, "describe this", msgtype="m.image", **image)
            sent = await fake.next_sent()
    assert sent["content"]["body"] == "a small square"
    content = provider.seen()[0]["messages"][-1]["content"]
    pictures = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert pictures == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert fake.count("GET", "/media/download/example.org/pic") == 1
    assert TOKEN not in str(provider.seen())


async def test_reply_to_is_the_quoted_event() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        earlier = await fake.message(room, BOB, "lunch at noon")  # before the bot's first sync
        async with driven(fake):
            relates = {"m.in_reply_to": {"event_id": earlier["event_id"]}}
            body = f"> <{BOB}> lunch at noon\n\nwhat about this"
            await fake.message(room, ANN, body, **{"m.relates_to": relates})
            sent = await fake.next_sent()
    assert sent["content"]["body"] == f"{BOB} said: lunch at noon"


async def test_a_streamed_answer_grows_by_edits(provider: FakeProvider) -> None:
    text = "Streaming answers grow in place, one edit after another."
    provider.script("fake", [Completion(text)])
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with driven(fake, provider) as d:
            d.adapter.stream_interval = 0.0
            await fake.message(room, ANN, "tell me")
            first = await fake.next_sent()
            edits = []
            async with asyncio.timeout(10):
                while not edits or edits[-1]["content"]["m.new_content"]["body"] != text:
                    edits.append(await fake.next_sent())
            await fake.nothing_sent()
    assert text.startswith(first["content"]["body"]) and first["content"]["body"] != text
    for edit in edits:
        assert edit["content"]["m.relates_to"] == {"rel_type": "m.replace", "event_id": first["id"]}
        assert edit["content"]["body"] == "* " + edit["content"]["m.new_content"]["body"]


async def test_an_encrypted_room_is_told_once_and_not_answered() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("secret", ANN, BOB, encrypted=True)
        async with driven(fake):
            for _ in range(2):
                sealed = {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEn…"}
                await fake.post(room, ANN, "m.room.encrypted", sealed)
            notice = await fake.next_sent()
            await fake.nothing_sent()
    assert notice["content"] == {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE, "m.mentions": {}}


async def test_own_events_and_notices_are_not_answered() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with driven(fake):
            await fake.message(room, BOT, "hello")
            await fake.message(room, ANN, "hello", msgtype="m.notice")
            await fake.nothing_sent()


async def test_a_version_12_room_its_creator_is_owner_and_send_reaches_it() -> None:
    async with FakeHomeserver() as fake:
        # room version 12: the id has no server name, creators stand above power levels
        room = fake.room("Ab3hAsh", ANN, BOB, creator=ANN, power={BOB: 50})
        async with driven(fake, admins_from=("owner",)) as d:
            await fake.message(room, BOB, "mute all")  # 50: admin, not owner
            await fake.nothing_sent()
            await fake.message(room, ANN, "mute all")  # the creator: owner
            muted = await fake.next_sent()
            await d.adapter.send(Target("matrix", room), "from cron")
            cron = await fake.next_sent()
    assert muted["content"]["body"] == f"muted {room}"
    assert (cron["room"], cron["content"]["body"]) == (room, "from cron")
