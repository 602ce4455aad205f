"""Telegram, the whole chat: events, media in and out, buttons, chat admins, streaming, typing.

Against the fake Bot API (tests/support/telegram_fake.py). A small handler stands
in for the rules here, so each test sees exactly what the adapter made of an
update and what it does with a reply; test_telegram_rules.py runs the same
through the real engine.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tests.support.telegram_fake import BOT_ID, GROUP, TOKEN, USER, FakeTelegram
from tmy.adapters.telegram import TelegramAdapter, TelegramConfig
from tmy.adapters.telegram.admins import ChatAdmins
from tmy.errors import AdapterError
from tmy.message import Button, Message, Outgoing, Reply, Target

BOB = {"id": 888, "is_bot": False, "first_name": "Bob"}
CAROL = {"id": 999, "is_bot": False, "first_name": "Carol", "username": "carol"}
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16

Answer = Callable[[Message], Awaitable[Reply] | Reply]


def reply(text: str = "", **kw: Any) -> Reply:
    return Reply(text, rule="r", trace_id="t", **kw)


class Chat:
    """The adapter against a fake; ``answer`` decides each reply, ``seen`` keeps the Messages."""

    def __init__(self, fake: FakeTelegram, adapter: TelegramAdapter, answer: Answer) -> None:
        self.fake = fake
        self.adapter = adapter
        self.answer = answer
        self.seen: list[Message] = []
        self.arrived = asyncio.Event()

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        self.arrived.set()
        got = self.answer(message)
        return await got if asyncio.iscoroutine(got) else got  # type: ignore[return-value]

    async def next_seen(self, n: int = 1) -> list[Message]:
        async with asyncio.timeout(10):
            while len(self.seen) < n:
                self.arrived.clear()
                await self.arrived.wait()
        return self.seen[:n]


@asynccontextmanager
async def chatting(
    answer: Answer, rules_dir: Path | None = None, **config: Any
) -> AsyncIterator[Chat]:
    async with FakeTelegram() as fake:
        adapter = TelegramAdapter(
            TelegramConfig(api_base=fake.base, **config), token=TOKEN, rules_dir=rules_dir
        )
        adapter.backoff_base, adapter.backoff_cap = 0.05, 0.2
        adapter.stream_interval = 0.05
        chat = Chat(fake, adapter, answer)
        await adapter.start(chat.handle)
        try:
            await wait_state(adapter, "connected")
            yield chat
        finally:
            await adapter.stop()


# -- events ------------------------------------------------------------------------------------


async def test_member_join_is_one_event_per_member_and_the_welcome_goes_to_the_group() -> None:
    def welcome(m: Message) -> Reply:
        assert m.event is not None
        return reply(f"welcome {m.user_name}" if m.event.kind == "member_join" else "bye")

    async with chatting(welcome) as c:
        await c.fake.member_join(BOB, CAROL, c.fake.me, by=USER)  # Ann added both (and the bot)
        first, second = await c.fake.next_sent(), await c.fake.next_sent()
        assert {first["text"], second["text"]} == {"welcome Bob", "welcome Carol"}
        assert first["chat_id"] == str(GROUP["id"]) and "reply_parameters" not in first
        bob = next(m for m in c.seen if m.user == "888")
        assert bob.event is not None and bob.text == ""
        assert (bob.event.kind, bob.event.raw) == ("member_join", "new_chat_members")
        assert bob.event.data["user"] == "888" and bob.event.data["operator"] == "777"
        assert (bob.chat, bob.platform, bob.private, bob.self_id) == (
            "-100500", "telegram", False, str(BOT_ID),
        )  # fmt: skip
        assert bob.stream is None  # events do not stream
        assert len(c.seen) == 2  # the bot's own join is not an event for the rules

        await c.fake.member_join(CAROL)  # joined by herself (an invite link)
        await c.fake.next_sent()
        assert c.seen[-1].event.data["operator"] == ""  # type: ignore[union-attr]

        await c.fake.member_leave(BOB, by=USER)  # removed by Ann
        assert (await c.fake.next_sent())["text"] == "bye"
        left = c.seen[-1].event
        assert left is not None and (left.kind, left.raw) == ("member_leave", "left_chat_member")
        assert left.data["kicked"] is True and left.data["operator"] == "777"


async def test_a_pressed_button_reaches_the_handler_with_its_data() -> None:
    def menu(m: Message) -> Reply:
        if m.event is not None:
            return reply(f"you chose {m.event.data['data']}")
        rows = [[Button("Tea", "drink:tea"), Button("Coffee", "drink:coffee")],
                [Button("Docs", url="https://example.org/docs")]]  # fmt: skip
        return reply("what will it be?", outgoing=Outgoing(buttons=rows))

    async with chatting(menu) as c:
        await c.fake.message("menu", chat=GROUP)
        sent = await c.fake.next_sent()
        keyboard = sent["reply_markup"]["inline_keyboard"]
        assert keyboard == [
            [{"text": "Tea", "callback_data": "drink:tea"},
             {"text": "Coffee", "callback_data": "drink:coffee"}],
            [{"text": "Docs", "url": "https://example.org/docs"}],
        ]  # fmt: skip
        carrier = c.fake.make_message("what will it be?", chat=GROUP, sender=c.fake.me)
        query = await c.fake.callback("drink:tea", carrier, sender=BOB)
        answered = await c.fake.next_sent()
        assert (answered["text"], answered["chat_id"]) == ("you chose drink:tea", "-100500")
        assert "reply_parameters" not in answered
        acks = await c.fake.wait_calls("answerCallbackQuery")
        assert acks[0]["callback_query_id"] == query["id"]
        event = c.seen[-1].event
        assert event is not None and (event.kind, event.raw) == ("button", "callback_query")
        assert event.data == {"user": "888", "chat": "-100500", "data": "drink:tea",
                              "message_id": str(carrier["message_id"])}  # fmt: skip
        assert c.seen[-1].user == "888"


async def test_reactions_added_and_taken_back() -> None:
    async with chatting(lambda m: reply("")) as c:
        await c.fake.reaction(42, new=["👍"])
        await c.fake.reaction(42, new=["❤"], old=["👍"])
        seen = await c.next_seen(3)
        data = [(m.event.data["emoji"], m.event.data["added"]) for m in seen]  # type: ignore[union-attr]
        assert data == [("👍", True), ("❤", True), ("👍", False)]
        first = seen[0].event
        assert first is not None and (first.kind, first.raw) == ("reaction", "message_reaction")
        assert first.data["message_id"] == "42" and seen[0].user == "777"


async def test_join_requests_are_approved_or_declined_by_the_run(log_file: Path) -> None:
    def gate(m: Message) -> Reply:
        assert m.event is not None and m.event.kind == "join_request"
        if m.user == "888":
            return reply("", approve=False, approve_reason="no bots")
        if m.user == "999":
            return reply("")  # no decision: left pending
        return reply(f"welcome aboard {m.user_name}", approve=True)

    async with chatting(gate) as c:
        await c.fake.join_request(USER, bio="I like tea")
        approved = await c.fake.wait_calls("approveChatJoinRequest")
        assert approved == [{"chat_id": str(GROUP["id"]), "user_id": "777"}]
        assert (await c.fake.next_sent())["text"] == "welcome aboard Ann Lee"
        event = c.seen[0].event
        assert event is not None and event.raw == "chat_join_request"
        assert (event.data["comment"], event.data["flag"]) == ("I like tea", "777")
        await c.fake.join_request(BOB)
        declined = await c.fake.wait_calls("declineChatJoinRequest")
        assert declined == [{"chat_id": str(GROUP["id"]), "user_id": "888"}]
        await c.fake.join_request(CAROL)
        await c.next_seen(3)
        await c.fake.nothing_sent()
        assert c.fake.count("approveChatJoinRequest") == 1
        assert c.fake.count("declineChatJoinRequest") == 1
    lines = [(e["event"], e["user"]) for e in read_log(log_file) if "request" in e["event"]]
    assert lines == [("telegram.request_answered", "777"), ("telegram.request_answered", "888"),
                     ("telegram.request_pending", "999")]  # fmt: skip


# -- media in ----------------------------------------------------------------------------------


async def test_a_photo_is_an_attachment_its_bytes_come_through_getfile() -> None:
    async with chatting(lambda m: reply("")) as c:
        c.fake.files["big"] = PNG
        sizes = [{"file_id": "small", "file_unique_id": "s", "width": 90, "height": 60,
                  "file_size": 900},
                 {"file_id": "big", "file_unique_id": "b", "width": 1280, "height": 853,
                  "file_size": 24}]  # fmt: skip
        earlier = c.fake.make_message("the menu", chat=GROUP, sender=BOB)
        await c.fake.message(None, chat=GROUP, photo=sizes, reply_to=earlier)
        (m,) = await c.next_seen()
        assert m.text == "[image]"
        (att,) = m.attachments
        assert att.as_dict() == {"kind": "image", "url": "", "file_id": "big", "size": 24,
                                 "mime": "image/jpeg", "name": ""}  # fmt: skip
        assert att.inline  # the URL needs the token: steps download it
        assert m.api is not None
        url, headers = await m.api.media_source(att)
        assert url == f"{c.fake.base}/file/bot{TOKEN}/photos/big.jpg" and headers == {}
        async with httpx.AsyncClient() as http:
            assert (await http.get(url)).content == PNG
        assert await m.api.quoted(m) == {"text": "the menu", "user": "888",
                                         "id": str(earlier["message_id"])}  # fmt: skip
        with pytest.raises(AdapterError, match="getFile failed"):
            await m.api.media_source(type(att)("image", file_id="gone"))


async def test_documents_voice_video_and_captions() -> None:
    async with chatting(lambda m: reply("")) as c:
        doc = {"file_id": "d1", "file_unique_id": "d", "file_name": "report.pdf",
               "mime_type": "application/pdf", "file_size": 1000}  # fmt: skip
        await c.fake.message(None, document=doc, caption="have a look")
        voice = {"file_id": "v1", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg"}
        await c.fake.message(None, voice=voice)
        video = {"file_id": "m1", "file_unique_id": "m", "width": 1, "height": 1, "duration": 1,
                 "mime_type": "video/mp4"}  # fmt: skip
        await c.fake.message(None, video=video)
        seen = await c.next_seen(3)
        assert [m.text for m in seen] == ["have a look", "[voice]", "[video]"]
        assert [(a.kind, a.mime, a.name) for m in seen for a in m.attachments] == [
            ("file", "application/pdf", "report.pdf"),
            ("voice", "audio/ogg", ""),
            ("video", "video/mp4", ""),
        ]
        assert await seen[1].api.quoted(seen[1]) is None  # type: ignore[union-attr]


# -- media and parts out -----------------------------------------------------------------------


async def test_a_reply_with_an_image_goes_out_with_sendphoto(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "chart.png").write_bytes(PNG)  # a reply's files: rules' media/ only
    parts = {
        "url": Outgoing(images=["https://example.org/cat.jpg"]),
        "data": Outgoing(images=["data:image/png;base64," + base64.b64encode(PNG).decode()]),
        "file": Outgoing(files=["media/chart.png"]),
        "outside": Outgoing(files=["../secret.txt"]),
    }

    async with chatting(lambda m: reply(f"here: {m.text}", outgoing=parts[m.text]),
                        rules_dir=tmp_path) as c:  # fmt: skip
        msg = await c.fake.message("url")
        (photo,) = await c.fake.wait_calls("sendPhoto")
        assert photo["photo"] == "https://example.org/cat.jpg"  # Telegram fetches it
        assert photo["caption"] == "here: url"  # the text rides along as the caption
        assert photo["reply_parameters"]["message_id"] == msg["message_id"]
        assert c.fake.sent == []  # no separate text message

        await c.fake.message("data")
        uploaded = (await c.fake.wait_calls("sendPhoto", 2))[1]["photo"]
        assert uploaded["data"] == PNG and uploaded["filename"] == "image.png"

        await c.fake.message("file")
        (doc,) = await c.fake.wait_calls("sendDocument")
        assert doc["document"]["data"] == PNG and doc["document"]["filename"] == "chart.png"

        await c.fake.message("outside")  # refused: the text goes out alone, the error is logged
        assert (await c.fake.next_sent())["text"] == "here: outside"
        assert c.fake.count("sendDocument") == 1


async def test_mentions_buttons_and_quotes_when_sending(log_file: Path) -> None:
    async with chatting(lambda m: reply("")) as c:
        out = Outgoing(mentions=["888"], reply_to="55", buttons=[[Button("Yes", "y")]])
        await c.adapter.send(Target("telegram", "-100500"), "are you in?", outgoing=out)
        sent = await c.fake.next_sent()
        assert sent["text"] == "888 are you in?"
        assert sent["entities"] == [
            {"type": "text_mention", "offset": 0, "length": 3,
             "user": {"id": 888, "is_bot": False, "first_name": "888"}}
        ]  # fmt: skip
        assert sent["reply_parameters"]["message_id"] == 55
        assert sent["reply_markup"] == {
            "inline_keyboard": [[{"text": "Yes", "callback_data": "y"}]]
        }

        too_long = Outgoing(buttons=[[Button("Pick", "x" * 65)]])
        with pytest.raises(AdapterError, match=r"button 'Pick' is 65 bytes.*at most 64"):
            await c.adapter.send(Target("telegram", "777"), "pick", outgoing=too_long)
        with pytest.raises(AdapterError, match="numeric user id"):
            await c.adapter.send(
                Target("telegram", "777"), "hi", outgoing=Outgoing(mentions=["@x"])
            )

    async with chatting(lambda m: reply("hi", outgoing=too_long)) as c:
        await c.fake.message("hello")  # a bad button in a reply: the text goes out without it
        assert "reply_markup" not in await c.fake.next_sent()
    assert any(e["event"] == "telegram.reply_invalid" for e in read_log(log_file))


# -- roles, streaming, typing ------------------------------------------------------------------


async def test_chat_admins_come_from_getchatadministrators_cached() -> None:
    async with chatting(lambda m: reply(""), admins_from=("owner", "admin")) as c:
        c.fake.admins[GROUP["id"]] = [(USER, "creator"), (BOB, "administrator")]
        await c.fake.message("hi", chat=GROUP)
        await c.fake.message("hi", chat=GROUP, sender=BOB)
        await c.fake.message("hi", chat=GROUP, sender=CAROL)
        await c.fake.message("hi")  # a private chat has no admins (and is not asked)
        seen = {(m.chat, m.user): m.chat_admin for m in await c.next_seen(4)}
        assert seen == {("-100500", "777"): True, ("-100500", "888"): True,
                        ("-100500", "999"): False, ("777", "777"): False}  # fmt: skip
        assert c.fake.count("getChatAdministrators") == 1  # cached for admins_ttl

    async with chatting(lambda m: reply(""), admins_from=("owner",)) as c:
        c.fake.admins[GROUP["id"]] = [(USER, "creator"), (BOB, "administrator")]
        await c.fake.message("hi", chat=GROUP, sender=BOB)
        await c.fake.message("hi", chat=GROUP)
        seen = {m.user: m.chat_admin for m in await c.next_seen(2)}
        assert seen == {"888": False, "777": True}

    async with chatting(lambda m: reply("")) as c:  # no admins_from: never asked
        await c.fake.message("hi", chat=GROUP)
        assert [m.chat_admin for m in await c.next_seen()] == [False]
        assert c.fake.count("getChatAdministrators") == 0


async def test_the_admin_cache_expires_after_its_ttl_and_survives_refusals() -> None:
    now = [0.0]
    calls: list[int] = []
    fail = [False]

    class Member:
        def __init__(self, uid: int, status: str) -> None:
            self.user, self.status = type("U", (), {"id": uid})(), status

    async def fetch(chat: int) -> list[Any]:
        calls.append(chat)
        if fail[0]:
            raise RuntimeError("network down")
        return [Member(1, "creator"), Member(2, "administrator"), Member(3, "member")]

    admins = ChatAdmins(fetch, ("admin",), ttl=300, clock=lambda: now[0])
    assert [await admins.is_admin(-5, u) for u in ("1", "2", "3")] == [False, True, False]
    assert calls == [-5]
    now[0] = 301
    fail[0] = True
    assert await admins.is_admin(-5, "2") is False  # refused: nobody, for a while
    assert await admins.is_admin(-5, "2") is False and calls == [-5, -5]
    fail[0], now[0] = False, 400
    assert await admins.is_admin(-5, "2") is True and len(calls) == 3


async def streamed(m: Message) -> Reply:
    assert m.stream is not None
    for word in ("Once ", "upon ", "a ", "time"):
        await m.stream.delta(word)
        await asyncio.sleep(0.08)  # longer than the test's stream_interval: edits happen
    return reply("Once upon a time.")


async def test_a_streamed_answer_grows_by_edits_and_ends_with_the_final_text() -> None:
    async with chatting(streamed) as c:
        msg = await c.fake.message("tell me")
        posted = await c.fake.next_sent()
        assert (
            posted["text"] == "Once "
            and posted["reply_parameters"]["message_id"] == msg["message_id"]
        )
        edits = await c.fake.wait_calls("editMessageText")
        await c.next_seen()
        async with asyncio.timeout(10):
            while c.fake.calls_of("editMessageText")[-1]["text"] != "Once upon a time.":
                await asyncio.sleep(0.02)
        edits = c.fake.calls_of("editMessageText")
        assert len(edits) >= 2 and all(e["chat_id"] == "777" for e in edits)
        methods = [m for _, m, _ in c.fake.calls if m in ("sendMessage", "editMessageText")]
        assert methods[0] == "sendMessage" and methods.count("sendMessage") == 1
        await c.fake.nothing_sent()  # the final text is the last edit, not a new message


async def test_a_long_streamed_answer_continues_in_more_messages() -> None:
    final = "a" * 4000 + "\n" + "b" * 200

    async def long(m: Message) -> Reply:
        assert m.stream is not None
        await m.stream.delta("a" * 100)
        return reply(final, outgoing=Outgoing(buttons=[[Button("More", "more")]]))

    async with chatting(long) as c:
        await c.fake.message("go")
        assert (await c.fake.next_sent())["text"] == "a" * 100
        rest = await c.fake.next_sent()
        assert rest["text"] == "b" * 200 and "reply_parameters" not in rest
        assert rest["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == "more"
        edits = await c.fake.wait_calls("editMessageText")
        assert edits[-1]["text"] == "a" * 4000


async def test_nothing_streamed_sends_the_reply_as_usual() -> None:
    async with chatting(lambda m: reply("plain", outgoing=Outgoing(buttons=[[Button("B")]]))) as c:
        await c.fake.message("hi")
        sent = await c.fake.next_sent()
        assert sent["text"] == "plain" and sent["reply_markup"]["inline_keyboard"][0][0] == {
            "text": "B", "callback_data": "B"
        }  # fmt: skip
        assert c.fake.count("editMessageText") == 0


async def test_buttons_go_under_a_streamed_answer_once_it_is_final() -> None:
    async def answer(m: Message) -> Reply:
        assert m.stream is not None
        await m.stream.delta("done")
        return reply("done", outgoing=Outgoing(buttons=[[Button("Again", "again")]]))

    async with chatting(answer) as c:
        await c.fake.message("hi")
        await c.fake.next_sent()
        (markup,) = await c.fake.wait_calls("editMessageReplyMarkup")
        keys = markup["reply_markup"]["inline_keyboard"]
        assert keys == [[{"text": "Again", "callback_data": "again"}]]
        await c.fake.nothing_sent()


async def test_typing_shows_while_a_run_works() -> None:
    release = asyncio.Event()

    async def slow(m: Message) -> Reply:
        await release.wait()
        return reply("finally")

    async with chatting(slow) as c:
        c.adapter.typing_after = 0.01
        await c.fake.message("think hard", chat=GROUP)
        (action,) = await c.fake.wait_calls("sendChatAction")
        assert (action["chat_id"], action["action"]) == ("-100500", "typing")
        release.set()
        assert (await c.fake.next_sent())["text"] == "finally"
        count = c.fake.count("sendChatAction")
        await asyncio.sleep(0.1)
        assert c.fake.count("sendChatAction") == count  # stopped with the run


# -- translations, one update at a time --------------------------------------------------------


def _read(payload: dict[str, Any]) -> list[Any]:
    from aiogram.types import Update, User

    from tmy.adapters.telegram.updates import read_update

    me = User(id=BOT_ID, is_bot=True, first_name="Tmy", username="tmy_test_bot")
    return read_update(Update.model_validate({"update_id": 1, **payload}), me)


def test_anonymous_and_custom_emoji_reactions_and_inline_buttons() -> None:
    anon = {"message_reaction": {
        "chat": GROUP, "message_id": 7, "date": 1, "actor_chat": GROUP,
        "old_reaction": [],
        "new_reaction": [{"type": "custom_emoji", "custom_emoji_id": "5368324170671202286"},
                         {"type": "paid"}],
    }}  # fmt: skip
    found = _read(anon)
    assert [(i.message.user, i.message.event.data["emoji"]) for i in found] == [
        ("-100500", "5368324170671202286"),
        ("-100500", "paid"),
    ]
    inline = {"callback_query": {"id": "q1", "from": USER, "chat_instance": "1",
                                 "inline_message_id": "im", "data": "x"}}  # fmt: skip
    (press,) = _read(inline)
    assert (press.message.chat, press.chat_id, press.callback) == ("777", 777, "q1")
    assert press.message.event.data["message_id"] == ""


def test_the_bot_leaving_and_plain_service_messages_are_not_events() -> None:
    me = {"id": BOT_ID, "is_bot": True, "first_name": "Tmy"}
    left = {"message": {"message_id": 1, "date": 1, "chat": GROUP, "from": USER,
                        "left_chat_member": me}}  # fmt: skip
    assert _read(left) == []
    pinned = {"message": {"message_id": 2, "date": 1, "chat": GROUP, "from": USER,
                          "new_chat_title": "x"}}  # fmt: skip
    assert _read(pinned) == []
