"""Discord: events, media in and out, chat roles, streaming and typing.

As in test_discord_adapter: discord.py's own ConnectionState parses real gateway
payloads (``parse_guild_member_add``, ``parse_interaction_create`` …) and
dispatches to the adapter's handlers; what the adapter sends goes through
discord.py's HTTP client to the loopback FakeDiscord. Until the engine dispatches
events, a small handler (``Driven.respond``) stands in for the rules.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_discord_adapter import (
    ALICE,
    BOT_ID,
    BOT_USER,
    CHANNEL_ID,
    DM_ID,
    GUILD,
    GUILD_ID,
    TOKEN,
    USER_ID,
    Driven,
    FakeDiscord,
    driven,
    faked,
    msg_payload,
)
from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tmy.adapters.discord_adapter import DiscordAdapter, discord
from tmy.adapters.discord_adapter.parts import view_of
from tmy.message import Attachment, Button, Message, Outgoing, Reply, Target

BOB_ID = 8800000000000000008
MODS_ID = 7700000000000000070
MANAGERS_ID = 7700000000000000071
BOB = {
    "id": str(BOB_ID),
    "username": "bob",
    "discriminator": "0",
    "global_name": "Bob B.",
    "avatar": None,
}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with faked(monkeypatch) as f:
        yield f


def role(role_id: int, name: str, permissions: int = 0) -> dict[str, Any]:
    return {
        "id": str(role_id), "name": name, "permissions": str(permissions), "position": 2,
        "color": 0, "hoist": False, "managed": False, "mentionable": False,
    }  # fmt: skip


# the test guild with a system channel (welcomes go there), a "mods" role and a role with
# Manage Server (permission bit 1 << 5)
WELCOMING = {
    **GUILD,
    "system_channel_id": str(CHANNEL_ID),
    "roles": [*GUILD["roles"], role(MODS_ID, "mods"), role(MANAGERS_ID, "managers", 1 << 5)],
}


def member(user: dict[str, Any], roles: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "user": user, "roles": [str(r) for r in roles], "joined_at": "2024-01-01T00:00:00+00:00",
        "flags": 0, "deaf": False, "mute": False,
    }  # fmt: skip


def said(text: str) -> Any:
    """A stand-in for the rules: answer every message and event with ``text``."""

    async def respond(message: Message) -> Reply:
        return Reply(text=text, rule="test", trace_id="t")

    return respond


async def settle(d: Driven, count: int = 1) -> None:
    """Wait until ``count`` messages or events reached the rules and their replies went out."""
    async with asyncio.timeout(10):
        while len(d.seen) < count:  # discord.py dispatches each handler as a task
            await asyncio.sleep(0.005)
    assert await d.adapter.settle(10)


# -- events ------------------------------------------------------------------------------------


async def test_a_member_join_is_welcomed_in_the_system_channel(fake: FakeDiscord) -> None:
    async with driven(fake, guild=WELCOMING) as d:
        d.respond = said("welcome!")
        d.state.parse_guild_member_add({"guild_id": str(GUILD_ID), **member(BOB)})
        await settle(d)
        (m,) = d.seen
        assert m.event is not None and (m.event.kind, m.event.raw) == (
            "member_join",
            "GUILD_MEMBER_ADD",
        )
        assert (m.text, m.user, m.chat, m.user_name, m.private) == (
            "", str(BOB_ID), str(CHANNEL_ID), "Bob B.", False,
        )  # fmt: skip
        assert m.event.data == {
            "user": str(BOB_ID), "chat": str(CHANNEL_ID), "guild": str(GUILD_ID),
            "operator": "", "sub_type": "",
        }  # fmt: skip
        cid, body = await fake.next_post()
        assert (cid, body["content"]) == (str(CHANNEL_ID), "welcome!")
        assert "message_reference" not in body


async def test_without_a_system_channel_a_join_reply_goes_nowhere_and_is_logged(
    fake: FakeDiscord, log_file: Path
) -> None:
    async with driven(fake) as d:
        d.respond = said("welcome!")
        d.state.parse_guild_member_add({"guild_id": str(GUILD_ID), **member(BOB)})
        await settle(d)
        assert d.seen[0].chat == f"guild:{GUILD_ID}"
        assert fake.posts.empty()
    lines = [e for e in read_log(log_file) if e["event"] == "discord.reply_nowhere"]
    assert lines and lines[0]["chat"] == f"guild:{GUILD_ID}"


async def test_a_member_leaving_is_an_event(fake: FakeDiscord) -> None:
    async with driven(fake, guild=WELCOMING) as d:
        d.respond = said("bye")
        d.state.parse_guild_member_remove({"guild_id": str(GUILD_ID), "user": BOB})
        await settle(d)
        (m,) = d.seen
        assert m.event is not None and m.event.kind == "member_leave"
        assert m.event.raw == "GUILD_MEMBER_REMOVE" and m.user == str(BOB_ID)
        assert m.event.data["kicked"] is False and m.event.data["operator"] == ""
        assert (await fake.next_post())[1]["content"] == "bye"


def reaction_payload(emoji: dict[str, Any], *, user: dict[str, Any] = ALICE) -> dict[str, Any]:
    return {
        "user_id": user["id"], "channel_id": str(CHANNEL_ID), "message_id": "123",
        "guild_id": str(GUILD_ID), "emoji": emoji, "type": 0, "burst": False,
        "message_author_id": str(BOT_ID),
    }  # fmt: skip


async def test_reactions_added_and_removed_are_events(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        d.respond = said("")
        d.state.parse_message_reaction_add(
            {**reaction_payload({"id": None, "name": "👍"}), "member": member(ALICE)}
        )
        d.state.parse_message_reaction_remove(reaction_payload({"id": "42", "name": "blob"}))
        # the bot's own reactions and other bots' are no events
        d.state.parse_message_reaction_add(
            reaction_payload({"id": None, "name": "👍"}, user=BOT_USER)
        )
        await settle(d, 2)
        assert [(m.event.kind, m.event.raw, m.user) for m in d.seen if m.event] == [
            ("reaction", "MESSAGE_REACTION_ADD", str(USER_ID)),
            ("reaction", "MESSAGE_REACTION_REMOVE", str(USER_ID)),
        ]
        first, second = (m.event.data for m in d.seen if m.event)
        assert (first["emoji"], first["added"], first["message_id"]) == ("👍", True, "123")
        assert (second["emoji"], second["added"]) == ("blob:42", False)
        assert d.seen[0].user_name == "Alice A." and d.seen[0].chat == str(CHANNEL_ID)
        assert fake.posts.empty()  # an empty reply sends nothing


async def test_a_deleted_message_is_a_recall_with_its_author_when_cached(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        d.respond = said("")
        seen = msg_payload("a message to delete")
        d.state.parse_message_create(seen)  # discord.py caches it
        await settle(d)
        for mid in (seen["id"], "999"):
            d.state.parse_message_delete(
                {"id": mid, "channel_id": str(CHANNEL_ID), "guild_id": str(GUILD_ID)}
            )
        await settle(d, 3)
        recalls = [m for m in d.seen if m.event is not None]
        assert [(m.event.raw, m.user, m.event.data["message_id"]) for m in recalls] == [
            ("MESSAGE_DELETE", str(USER_ID), seen["id"]),
            ("MESSAGE_DELETE", "", "999"),  # not cached: Discord does not say whose it was
        ]
        assert all(m.event.kind == "message_recall" for m in recalls)


# -- buttons -----------------------------------------------------------------------------------


def interaction_payload(custom_id: str, carrier: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "1234567890123", "application_id": str(BOT_ID), "type": 3, "token": "itoken",
        "version": 1, "guild_id": str(GUILD_ID),
        "channel": {"id": str(CHANNEL_ID), "type": 0, "guild_id": str(GUILD_ID)},
        "channel_id": str(CHANNEL_ID), "member": {**member(ALICE, (MODS_ID,)), "permissions": "0"},
        "message": carrier, "data": {"custom_id": custom_id, "component_type": 2},
        "app_permissions": "0", "locale": "en-US", "attachment_size_limit": 10485760,
    }  # fmt: skip


async def test_buttons_go_out_as_components_and_a_press_is_a_button_event(
    fake: FakeDiscord,
) -> None:
    async with driven(fake, guild=WELCOMING, admins_from=(str(MODS_ID),)) as d:
        rows = [
            [Button("Yes", "vote:yes"), Button("No", "vote:no")],
            [Button("Docs", url="https://x.example/")],
        ]
        await d.adapter.send(Target("discord", str(CHANNEL_ID)), "vote?", Outgoing(buttons=rows))
        _, body = await fake.next_post()
        assert body["content"] == "vote?"
        first, second = body["components"]
        assert [(b["label"], b["custom_id"], b["style"]) for b in first["components"]] == [
            ("Yes", "vote:yes", 1), ("No", "vote:no", 1),
        ]  # fmt: skip
        (link,) = second["components"]
        assert (link["label"], link["url"], link["style"]) == ("Docs", "https://x.example/", 5)
        assert not d.state._view_store._views  # nothing kept: presses arrive as interactions

        d.respond = said("counted")
        carrier = msg_payload("vote?", author=BOT_USER)
        d.state.parse_interaction_create(interaction_payload("vote:yes", carrier))
        await settle(d)
        (m,) = d.seen
        assert m.event is not None and (m.event.kind, m.event.raw) == (
            "button",
            "INTERACTION_CREATE",
        )
        assert m.event.data["data"] == "vote:yes" and m.event.data["message_id"] == carrier["id"]
        assert (m.user, m.chat, m.user_name) == (str(USER_ID), str(CHANNEL_ID), "Alice A.")
        assert m.chat_admin  # the presser holds the mods role
        assert fake.acks == [("1234567890123", {"type": 6})]  # a deferred update: acknowledged
        cid, body = await fake.next_post()
        assert (cid, body["content"]) == (str(CHANNEL_ID), "counted")


# -- media in ----------------------------------------------------------------------------------

CDN = "https://cdn.discordapp.com/attachments/1/2/cat.png?ex=6650&is=664f&hm=abc"


def with_media(content: str) -> dict[str, Any]:
    payload = msg_payload(content)
    payload["attachments"] = [
        {"id": "31", "filename": "cat.png", "size": 2048, "url": CDN, "proxy_url": CDN,
         "content_type": "image/png", "width": 10, "height": 10},
        {"id": "32", "filename": "notes.txt", "size": 12, "proxy_url": CDN,
         "url": CDN.replace("cat.png", "notes.txt")},
    ]  # fmt: skip
    payload["sticker_items"] = [{"id": "41", "name": "wave", "format_type": 1}]
    return payload


async def test_an_image_message_reaches_the_rules_as_attachments_with_a_placeholder(
    fake: FakeDiscord,
) -> None:
    async with driven(fake) as d:
        d.respond = said("")
        await d.deliver(with_media(""))
        await d.deliver(with_media("look at this"))
        only_media, with_text = d.seen
        assert only_media.text == "[image] [file] [sticker]"
        assert with_text.text == "look at this"
        image, text_file, sticker = only_media.attachments
        assert image == Attachment(
            "image", url=CDN, file_id="31", size=2048, mime="image/png", name="cat.png", inline=True
        )
        assert (text_file.kind, text_file.mime, text_file.inline) == ("file", "text/plain", True)
        assert (sticker.kind, sticker.file_id, sticker.name, sticker.inline) == (
            "sticker", "41", "wave", False,
        )  # fmt: skip
        assert sticker.url.endswith("/stickers/41.png")
        assert only_media.api is not None
        assert await only_media.api.media_source(image) == (CDN, {})


async def test_quoted_messages_come_resolved_or_fetched(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        d.respond = said("")
        earlier = msg_payload("the earlier words", author=BOB)
        await d.deliver(msg_payload("what?", reply_to=earlier))
        fetched = msg_payload("from the API", author=BOB)
        fake.stored[fetched["id"]] = fetched
        unresolved = msg_payload("and this?")
        unresolved["message_reference"] = {
            "message_id": fetched["id"],
            "channel_id": str(CHANNEL_ID),
        }
        await d.deliver(unresolved)
        gone = msg_payload("and that?")
        gone["message_reference"] = {"message_id": "404", "channel_id": str(CHANNEL_ID)}
        await d.deliver(gone)
        plain = msg_payload("no quote")
        await d.deliver(plain)
        api = d.seen[0].api
        assert api is not None
        assert [await api.quoted(m) for m in d.seen] == [
            {"text": "the earlier words", "user": str(BOB_ID), "id": earlier["id"]},
            {"text": "from the API", "user": str(BOB_ID), "id": fetched["id"]},
            None,
            None,
        ]


# -- media out ---------------------------------------------------------------------------------


async def test_a_reply_with_images_sends_an_embed_and_an_upload(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    async with driven(fake) as d:
        outgoing = Outgoing(
            images=["https://img.example/cat.png", PNG_URL], mentions=[str(BOB_ID)], reply_to=""
        )
        d.respond = lambda m: _reply("here", outgoing)
        payload = msg_payload("show me")
        await d.deliver(payload)
        _, body = await fake.next_post()
        assert body["content"] == f"<@{BOB_ID}> here"
        assert [e["image"] for e in body["embeds"]] == [{"url": "https://img.example/cat.png"}]
        assert [(name, data) for name, _, data in body["_files"]] == [("image.png", PNG)]
        assert body["attachments"] == [{"id": 0, "filename": "image.png"}]
        assert body["message_reference"]["message_id"] == int(payload["id"])
        # only the user the reply names may be pinged
        assert body["allowed_mentions"] == {
            "parse": [],
            "users": [BOB_ID],
            "replied_user": False,
        }


async def _reply(text: str, outgoing: Outgoing) -> Reply:
    return Reply(text=text, rule="test", trace_id="t", outgoing=outgoing)


async def test_send_uploads_files_and_names_what_failed_to_load(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    async with driven(fake) as d:
        target = Target("discord", str(CHANNEL_ID))
        report = "data:text/plain;base64," + base64.b64encode(b"all good").decode()
        outgoing = Outgoing(files=[report, "../../etc/passwd"], reply_to="777")
        await d.adapter.send(target, "", outgoing)
        _, body = await fake.next_post()
        assert body["content"] == "\n[file not sent]"  # the path outside the rules directory
        assert [(f[0], f[2]) for f in body["_files"]] == [("file.txt", b"all good")]
        assert body["message_reference"]["message_id"] == 777
        with pytest.raises(Exception, match="empty"):
            await d.adapter.send(target, " ", Outgoing())


# -- roles ---------------------------------------------------------------------------------------


def said_by(user: dict[str, Any], roles: tuple[int, ...] = ()) -> dict[str, Any]:
    payload = msg_payload("echo hi", author=user)
    payload["member"] = {k: v for k, v in member(user, roles).items() if k != "user"}
    return payload


@pytest.mark.parametrize(
    ("admins_from", "expected"),
    [
        ((), {"alice": False, "mod": False, "manager": False, "bob": False}),
        (("owner",), {"alice": True, "mod": False, "manager": False, "bob": False}),
        (("admin",), {"alice": True, "mod": False, "manager": True, "bob": False}),
        ((str(MODS_ID),), {"alice": False, "mod": True, "manager": False, "bob": False}),
    ],
)
async def test_admins_from_makes_owners_managers_or_role_holders_chat_admins(
    fake: FakeDiscord, admins_from: tuple[str, ...], expected: dict[str, bool]
) -> None:
    """The guild owner is alice; 'mod' holds the mods role, 'manager' one with Manage Server."""
    carol = {**BOB, "id": "8800000000000000009", "username": "carol"}
    dave = {**BOB, "id": "8800000000000000010", "username": "dave"}
    async with driven(fake, guild=WELCOMING, admins_from=admins_from) as d:
        d.respond = said("")
        for payload in (
            said_by(ALICE),
            said_by(carol, (MODS_ID,)),
            said_by(dave, (MANAGERS_ID,)),
            said_by(BOB),
        ):
            await d.deliver(payload)
        await d.deliver(msg_payload("echo in a DM", guild=False))  # a DM has no roles
        got = dict(
            zip(("alice", "mod", "manager", "bob"), (m.chat_admin for m in d.seen), strict=False)
        )
        assert got == expected
        assert not d.seen[-1].chat_admin


# -- streaming and typing ------------------------------------------------------------------------


async def test_a_streamed_answer_grows_by_edits_and_ends_with_the_final_text(
    fake: FakeDiscord,
) -> None:
    async with driven(fake) as d:
        d.adapter.stream_interval = 0.0  # every piece edits at once (the default: 1 s apart)

        async def respond(message: Message) -> Reply:
            assert message.stream is not None
            for piece in ("The ", "answer ", "grows"):
                await message.stream.delta(piece)
            return Reply(text="The answer grows.", rule="t", trace_id="t")

        d.respond = respond
        payload = msg_payload("tell me")
        await d.deliver(payload)
        cid, body = await fake.next_post()
        assert (cid, body["content"]) == (str(CHANNEL_ID), "The ")
        assert body["message_reference"]["message_id"] == int(payload["id"])
        assert [b["content"] for _, b in fake.edits] == [
            "The answer ", "The answer grows", "The answer grows.",
        ]  # fmt: skip
        assert fake.posts.empty()  # the final text is an edit, not another message


async def test_a_long_streamed_answer_continues_in_new_messages_with_its_buttons_last(
    fake: FakeDiscord,
) -> None:
    lines = [f"line {i:03d} " + "z" * 60 for i in range(70)]  # about 4,800 characters
    final = "\n".join(lines)

    async def respond(message: Message) -> Reply:
        assert message.stream is not None
        await message.stream.delta(final[:100])
        return await _reply(final, Outgoing(buttons=[[Button("More", "more")]]))

    async with driven(fake) as d:
        d.respond = respond
        await d.deliver(msg_payload("tell me a lot"))
        _, grown = await fake.next_post()
        second, third = (await fake.next_post())[1], (await fake.next_post())[1]
    assert grown["content"] == final[:100]
    (edit,) = [body["content"] for _, body in fake.edits]
    assert not grown.get("components") and not second.get("components")
    assert third["components"][0]["components"][0]["custom_id"] == "more"
    assert "\n".join([edit, second["content"], third["content"]]).split("\n") == lines
    assert "message_reference" not in second  # only the growing message quotes the question


async def test_a_stream_that_never_started_sends_the_reply_normally(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        d.respond = said("whole")
        await d.deliver(msg_payload("tell me"))
        assert (await fake.next_post())[1]["content"] == "whole"
        assert fake.edits == []


async def test_a_slow_run_shows_typing_in_its_channel(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        d.adapter.typing_after = 0.0

        async def respond(message: Message) -> Reply:
            async with asyncio.timeout(5):
                while not fake.typed:
                    await asyncio.sleep(0.01)
            return Reply(text="done", rule="t", trace_id="t")

        d.respond = respond
        await d.deliver(msg_payload("slow", guild=False))
        assert fake.typed[0] == str(DM_ID)
        assert (await fake.next_post())[1]["content"] == "done"


# -- intents -------------------------------------------------------------------------------------


async def test_a_refused_members_intent_connects_without_it(
    fake: FakeDiscord, log_file: Path
) -> None:
    fake.gateway_mode = "4014-members"
    adapter = DiscordAdapter(token=TOKEN)
    adapter.guild_ready_timeout = 0.05

    async def nothing(message: Message) -> Reply:
        return Reply(text="", rule=None, trace_id="t")

    await adapter.start(nothing)
    try:
        await wait_state(adapter, "connected")
        members = discord.Intents(members=True).value
        assert [bool(i["intents"] & members) for i in fake.identifies] == [True, False]
        assert all(
            i["intents"] & discord.Intents(message_content=True).value for i in fake.identifies
        )
    finally:
        await adapter.stop()
    assert any(e["event"] == "discord.members_intent_refused" for e in read_log(log_file))


def test_buttons_past_discords_limits_or_repeating_data_are_dropped_and_logged(
    log_file: Path,
) -> None:
    rows = [[Button(f"b{r}{c}", f"d{r}{c}") for c in range(6)] for r in range(6)]
    rows[0][1] = Button("again", "d00")  # the same data as the first button
    view = view_of(rows)
    ids = [item.custom_id for item in view.children if isinstance(item, discord.ui.Button)]
    assert len(ids) == 24 and len(set(ids)) == 24 and "d05" not in ids and "d50" not in ids
    (line,) = [e for e in read_log(log_file) if e["event"] == "discord.buttons_dropped"]
    assert line["count"] == 6 + 5 + 1
