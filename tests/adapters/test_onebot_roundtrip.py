"""OneBot events, media, quotes, reply parts and streaming through the real listener.

A fake NapCat (tests/support/onebot_fake.py) connects to the adapter's reverse endpoint
on a real HTTP listener; a small handler function stands in for the engine, so what the
adapter does with each kind of event and reply is seen on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.onebot_fake import SELF_ID, image, loopback, text
from tmy.errors import TmyError
from tmy.message import Attachment, Message, Reply, Target
from tmy.message import Outgoing as Parts

Answer = Callable[[Message], Reply]


class Handler:
    """The engine's stand-in: records each Message and answers with ``answer(message)``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[Message] = []

    async def __call__(self, message: Message) -> Reply:
        self.seen.append(message)
        return self.answer(message)


def sent_text(action: dict[str, Any]) -> str:
    return "".join(s["data"]["text"] for s in action["params"]["message"] if s["type"] == "text")


async def test_a_member_join_is_welcomed_in_its_group() -> None:
    def welcome(m: Message) -> Reply:
        assert m.event is not None
        return Reply(f"Welcome {m.event.data['user']} ({m.event.raw})", "welcome", "t")

    handler = Handler(welcome)
    async with loopback(handler) as (_, impl):
        await impl.member_join(20005, group=30003)
        action = await impl.next_action()
    assert action["action"] == "send_msg"
    assert action["params"]["group_id"] == 30003
    assert sent_text(action) == "Welcome 20005 (notice.group_increase)"
    (message,) = handler.seen
    assert (message.user, message.chat, message.event.kind) == (  # type: ignore[union-attr]
        "20005", "group:30003", "member_join")  # fmt: skip
    assert message.api is not None


@pytest.mark.parametrize("approve", [True, False])
async def test_a_friend_request_is_approved_or_declined_as_the_run_decides(approve: bool) -> None:
    handler = Handler(lambda m: Reply("", "friends", "t", approve=approve))
    async with loopback(handler) as (_, impl):
        await impl.friend_request(20009, "hello", "flag-77")
        action = await impl.next_action()
        await impl.no_action(0.2)  # no text to send
    assert action["action"] == "set_friend_add_request"
    assert action["params"] == {"flag": "flag-77", "approve": approve}


async def test_a_join_request_declined_with_a_reason_and_one_left_pending() -> None:
    def decide(m: Message) -> Reply:
        assert m.event is not None
        if m.event.data["comment"] == "pending":
            return Reply("", None, "t", reason="no rule wants the event")
        return Reply("Sorry", "gate", "t", approve=False, approve_reason="wrong answer")

    async with loopback(Handler(decide)) as (_, impl):
        await impl.request("group", sub_type="add", group_id=7, user_id=5, comment="x", flag="a1")
        first, second = await impl.next_action(), await impl.next_action()
        await impl.request("group", sub_type="add", group_id=7, user_id=6, comment="pending",
                           flag="a2")  # fmt: skip
        await impl.no_action(0.3)
    assert first["action"] == "set_group_add_request"
    assert first["params"] == {"flag": "a1", "sub_type": "add", "approve": False,
                               "reason": "wrong answer"}  # fmt: skip
    assert (second["action"], second["params"]["group_id"], sent_text(second)) == (
        "send_msg", 7, "Sorry")  # fmt: skip


async def test_a_poke_is_answered_where_it_happened() -> None:
    handler = Handler(lambda m: Reply("hey, don't poke me", "poke", "t"))
    async with loopback(handler) as (_, impl):
        await impl.poke(20002, SELF_ID, group=30003)
        in_group = await impl.next_action()
        await impl.poke(20002, SELF_ID)
        in_private = await impl.next_action()
        await impl.poke(SELF_ID, 20002, group=30003)  # the bot's own poke: no event
        await impl.no_action(0.2)
    assert (in_group["params"]["group_id"], sent_text(in_group)) == (30003, "hey, don't poke me")
    assert (in_private["params"]["message_type"], in_private["params"]["user_id"]) == (
        "private", 20002)  # fmt: skip
    assert [m.event.data["target"] for m in handler.seen] == [str(SELF_ID)] * 2  # type: ignore[union-attr]


async def test_an_image_message_carries_an_attachment_the_run_can_download() -> None:
    url = "https://multimedia.nt.qq.com.cn/download?appid=1407&fileid=abc&rkey=xyz"
    sources: list[Any] = []

    async def handle(m: Message) -> Reply:
        assert m.api is not None
        sources.append(await m.api.media_source(m.attachments[0]))
        return Reply(f"{len(m.attachments)} image", "see", "t")

    async with loopback(handle) as (_, impl):
        await impl.group([image(url)], group=30003, message_id=70)
        assert sent_text(await impl.next_action()) == "1 image"
    assert sources == [(url, {})]  # no headers: the access token never leaves for a URL


async def test_a_file_id_alone_is_asked_of_the_implementation() -> None:
    async with loopback(Handler(lambda m: Reply("", None, "t"))) as (adapter, impl):
        api = adapter._apis  # filled on the first message
        await impl.private("hi")
        await impl.no_action(0.1)
        (onebot,) = api.values()
        impl.answers["get_image"] = lambda p: {
            "file": "/tmp/x.jpg",
            "url": f"https://q/{p['file']}",
        }
        assert await onebot.media_source(Attachment("image", file_id="ABC.jpg")) == (
            "https://q/ABC.jpg", {})  # fmt: skip
        impl.answers["get_file"] = {"file": "/data/napcat/report.pdf"}
        with pytest.raises(TmyError, match="only a path on its machine"):
            await onebot.media_source(Attachment("file", file_id="/f-1"))


async def test_a_quote_is_remembered_or_fetched_with_get_msg() -> None:
    quotes: list[Any] = []

    async def handle(m: Message) -> Reply:
        if m.reply_to is not None:
            assert m.api is not None
            quotes.append(await m.api.quoted(m))
        return Reply("", None, "t")

    async with loopback(handle) as (_, impl):
        impl.answers["get_msg"] = {"message_id": 4242, "message": [text("from before")],
                                   "sender": {"user_id": 20003, "nickname": "Cy"}}  # fmt: skip
        await impl.group("the original", user=20002, message_id=100)
        await impl.group([{"type": "reply", "data": {"id": "100"}}, text("this one")],
                         message_id=101)  # fmt: skip
        await impl.group([{"type": "reply", "data": {"id": "4242"}}, text("an old one")],
                         message_id=102)  # fmt: skip
        fetched = await impl.next_action()
    assert fetched["action"] == "get_msg" and fetched["params"] == {"message_id": 4242}
    assert quotes == [
        {"text": "the original", "user": "20002", "id": "100"},
        {"text": "from before", "user": "20003", "id": "4242"},
    ]


async def test_an_image_reply_goes_out_as_an_image_segment() -> None:
    parts = Parts(images=["https://img.example/cat.png"], reply_to="")
    handler = Handler(lambda m: Reply("a cat", "cat", "t", outgoing=parts))
    async with loopback(handler) as (_, impl):
        await impl.group("cat please", group=30003, message_id=321)
        action = await impl.next_action()
    assert action["params"]["message"] == [
        {"type": "reply", "data": {"id": "321"}},
        {"type": "text", "data": {"text": "a cat"}},
        {"type": "image", "data": {"file": "https://img.example/cat.png"}},
    ]


async def test_a_file_is_uploaded_or_linked_when_the_upload_is_refused() -> None:
    parts = Parts(files=["https://f.example/report.pdf"])
    async with loopback(Handler(lambda m: Reply("here", "f", "t", outgoing=parts))) as (_, impl):
        await impl.group("report", group=7)
        message, upload = await impl.next_action(), await impl.next_action()
        impl.refuse.add("upload_group_file")
        await impl.group("report", group=7, message_id=2)
        await impl.next_action()
        refused, fallback = await impl.next_action(), await impl.next_action()
    assert sent_text(message) == "here"
    assert (upload["action"], upload["params"]) == ("upload_group_file", {
        "group_id": 7, "file": "https://f.example/report.pdf", "name": "report.pdf"})  # fmt: skip
    assert refused["action"] == "upload_group_file"
    assert sent_text(fallback) == "[file] report.pdf: https://f.example/report.pdf"


async def test_the_group_role_reaches_the_run_with_admins_from() -> None:
    handler = Handler(lambda m: Reply("", None, "t"))
    async with loopback(handler, admins_from=("owner", "admin")) as (_, impl):
        await impl.group("x", group=1, user=5, role="admin", message_id=1)
        await impl.group("x", group=2, user=5, role="member", message_id=2)
        await impl.no_action(0.2)
    assert [(m.chat, m.chat_admin) for m in handler.seen] == [("group:1", True), ("group:2", False)]


async def test_stream_chunks_go_out_a_sentence_at_a_time_then_the_rest() -> None:
    async def handle(m: Message) -> Reply:
        assert m.stream is not None
        await m.stream.delta("Ignored without chunks. ", chunks=False)
        await m.stream.delta("First. Sec", chunks=True)
        await m.stream.delta("ond! Thi", chunks=True)
        return Reply("First. Second! Third.", "llm", "t")

    async with loopback(handle, quote_reply=True, send_interval=0.05) as (_, impl):
        await impl.group("tell me", group=7, message_id=9)
        actions = [await impl.next_action() for _ in range(3)]
    assert [sent_text(a) for a in actions] == ["First.", "Second!", "Third."]
    # the quote goes with the first chunk only
    assert [a["params"]["message"][0]["type"] for a in actions] == ["reply", "text", "text"]


async def test_send_on_the_bots_initiative_takes_reply_parts() -> None:
    async with loopback(Handler(lambda m: Reply("", None, "t"))) as (adapter, impl):
        parts = Parts(images=["https://img.example/d.png"])
        await adapter.send(Target("onebot", "group:7"), "daily", parts)
        action = await impl.next_action()
        await adapter.send(Target("onebot", "private:5"), "", parts)  # an image alone
        alone = await impl.next_action()
    assert action["params"]["message"] == [
        {"type": "text", "data": {"text": "daily"}},
        {"type": "image", "data": {"file": "https://img.example/d.png"}},
    ]
    assert alone["params"]["message"] == [
        {"type": "image", "data": {"file": "https://img.example/d.png"}}
    ]
