"""OneBot notices and requests as tmy events, media segments as attachments, reply parts as
segments: the translations, one payload at a time (payloads shaped as NapCat, go-cqhttp and
Lagrange post them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.log_helpers import read_log
from tmy import logs
from tmy.adapters.onebot.codec import segments_of
from tmy.adapters.onebot.events import to_message
from tmy.adapters.onebot.media import attachments_of
from tmy.adapters.onebot.notices import to_event
from tmy.adapters.onebot.outbound import FileUpload, compose, localize, segment_file
from tmy.adapters.onebot.requests import request_action
from tmy.message import Attachment, Button, Message, Reply
from tmy.message import Outgoing as Parts

BOT = "10001"


def notice(kind: str, **fields: Any) -> dict[str, Any]:
    return {"post_type": "notice", "notice_type": kind, "self_id": 10001, "time": 1, **fields}


def request(kind: str, **fields: Any) -> dict[str, Any]:
    return {"post_type": "request", "request_type": kind, "self_id": 10001, "time": 1, **fields}


def event_of(payload: dict[str, Any]) -> tuple[str, str, str, str, dict[str, Any]]:
    message = to_event(BOT, payload)
    assert message is not None and message.event is not None
    assert message.text == "" and message.platform == "onebot" and message.self_id == BOT
    assert message.raw is payload
    ev = message.event
    return ev.kind, ev.raw, message.user, message.chat, ev.data


# -- notices -----------------------------------------------------------------------------------


def test_group_increase_is_a_member_join_in_its_group() -> None:
    payload = notice("group_increase", sub_type="invite", group_id=30003, user_id=20005,
                     operator_id=20002)  # fmt: skip
    kind, raw, user, chat, data = event_of(payload)
    assert (kind, raw, user, chat) == (
        "member_join",
        "notice.group_increase",
        "20005",
        "group:30003",
    )
    assert data == {"user": "20005", "chat": "group:30003", "operator": "20002",
                    "sub_type": "invite"}  # fmt: skip
    # approved by an admin with no operator given: operator ""
    plain = notice("group_increase", sub_type="approve", group_id=1, user_id=5, operator_id=0)
    assert event_of(plain)[4]["operator"] == ""


def test_group_decrease_says_who_left_and_whether_they_were_kicked() -> None:
    left = notice("group_decrease", sub_type="leave", group_id=7, user_id=5, operator_id=5)
    kind, _, user, chat, data = event_of(left)
    assert (kind, user, chat) == ("member_leave", "5", "group:7")
    assert (data["operator"], data["kicked"]) == ("", False)
    kicked = notice("group_decrease", sub_type="kick", group_id=7, user_id=5, operator_id=9)
    assert event_of(kicked)[4] | {} == {"user": "5", "chat": "group:7", "operator": "9",
                                        "kicked": True, "sub_type": "kick"}  # fmt: skip


def test_the_bots_own_joins_leaves_and_pokes_are_no_events() -> None:
    assert to_event(BOT, notice("group_increase", group_id=7, user_id=10001)) is None
    kick_me = notice("group_decrease", sub_type="kick_me", group_id=7, user_id=10001,
                     operator_id=9)  # fmt: skip
    assert to_event(BOT, kick_me) is None
    assert to_event(BOT, notice("notify", sub_type="poke", group_id=7, user_id=10001,
                                target_id=5)) is None  # fmt: skip
    assert to_event(BOT, notice("group_recall", group_id=7, user_id=5, operator_id=10001,
                                message_id=3)) is None  # fmt: skip


def test_a_poke_in_a_group_and_in_a_private_chat() -> None:
    group = notice("notify", sub_type="poke", group_id=7, user_id=20002, target_id=10001)
    kind, raw, user, chat, data = event_of(group)
    assert (kind, raw, user, chat) == ("poke", "notice.notify.poke", "20002", "group:7")
    assert data["target"] == BOT
    # NapCat's friend poke: sender_id pokes, user_id is the friend
    friend = notice("notify", sub_type="poke", user_id=20002, sender_id=20002, target_id=10001)
    assert event_of(friend)[2:4] == ("20002", "private:20002")


def test_recalls_name_author_operator_and_message() -> None:
    group = notice("group_recall", group_id=7, user_id=5, operator_id=9, message_id=1234)
    kind, raw, user, chat, data = event_of(group)
    assert (kind, raw, user, chat) == ("message_recall", "notice.group_recall", "5", "group:7")
    assert (data["operator"], data["message_id"]) == ("9", "1234")
    friend = notice("friend_recall", user_id=5, message_id=99)
    kind, raw, user, chat, data = event_of(friend)
    assert (raw, chat, data["operator"], data["message_id"]) == (
        "notice.friend_recall", "private:5", "5", "99")  # fmt: skip


def test_napcat_emoji_likes_and_lagrange_reactions_are_reactions() -> None:
    like = notice("group_msg_emoji_like", group_id=7, user_id=5, message_id=42,
                  likes=[{"emoji_id": "76", "count": 1}])  # fmt: skip
    kind, raw, user, chat, data = event_of(like)
    assert (kind, raw, user, chat) == ("reaction", "notice.group_msg_emoji_like", "5", "group:7")
    assert (data["message_id"], data["emoji"], data["added"]) == ("42", "76", True)
    removed = dict(like, is_add=False)
    assert event_of(removed)[4]["added"] is False
    lagrange = notice("reaction", sub_type="remove", group_id=7, message_id=42, operator_id=6,
                      code="424", count=0)  # fmt: skip
    kind, raw, user, _, data = event_of(lagrange)
    assert (kind, raw, user, data["emoji"], data["added"]) == (
        "reaction", "notice.reaction", "6", "424", False)  # fmt: skip


def test_unknown_notices_are_logged_at_debug_never_dropped_silently(tmp_path: Path) -> None:
    path = tmp_path / "tmy.log"
    logs.configure("debug", path)
    try:
        assert to_event(BOT, notice("group_ban", sub_type="ban", group_id=7, user_id=5)) is None
        assert to_event(BOT, notice("group_increase", user_id=5)) is None  # no group: malformed
        lines = [e for e in read_log(path) if e["event"] == "onebot.event_unmapped"]
    finally:
        logs.configure("warning")
    assert [line["raw"] for line in lines] == ["notice.group_ban", "notice.group_increase"]
    assert lines[0]["level"] == "debug" and lines[0]["group"] == 7


# -- requests ----------------------------------------------------------------------------------


def test_requests_carry_the_comment_and_the_flag() -> None:
    friend = request("friend", user_id=20009, comment="hi, it's Bo", flag="f-1")
    kind, raw, user, chat, data = event_of(friend)
    assert (kind, raw, user, chat) == ("friend_request", "request.friend", "20009", "private:20009")
    assert (data["comment"], data["flag"]) == ("hi, it's Bo", "f-1")
    invite = request("group", sub_type="invite", group_id=7, user_id=20002, comment="", flag="g-1")
    kind, raw, user, chat, data = event_of(invite)
    # the bot is not in that group yet: its answer goes to the inviter
    assert (kind, raw, user, chat) == ("group_invite", "request.group.invite", "20002",
                                       "private:20002")  # fmt: skip
    assert (data["group"], data["flag"]) == ("7", "g-1")
    add = request("group", sub_type="add", group_id=7, user_id=20010, comment="Answer: 42",
                  flag="a-1")  # fmt: skip
    kind, raw, user, chat, data = event_of(add)
    assert (kind, raw, user, chat) == ("join_request", "request.group.add", "20010", "group:7")
    assert data["comment"] == "Answer: 42"


def decided(payload: dict[str, Any], approve: bool | None, why: str = "") -> Any:
    message = to_event(BOT, payload)
    assert message is not None
    return request_action(message, Reply("", "r", "t", approve=approve, approve_reason=why))


def test_approve_becomes_the_request_actions() -> None:
    friend = request("friend", user_id=5, comment="", flag="f-1")
    assert decided(friend, True) == ("set_friend_add_request", {"flag": "f-1", "approve": True})
    assert decided(friend, False, "no") == (
        "set_friend_add_request", {"flag": "f-1", "approve": False})  # fmt: skip
    assert decided(friend, None) is None  # no decision: stays pending
    add = request("group", sub_type="add", group_id=7, user_id=5, comment="", flag="a-1")
    assert decided(add, False, "wrong answer") == ("set_group_add_request", {
        "flag": "a-1", "sub_type": "add", "approve": False, "reason": "wrong answer"})  # fmt: skip
    invite = request("group", sub_type="invite", group_id=7, user_id=5, comment="", flag="g-1")
    assert decided(invite, True, "ignored on accept") == ("set_group_add_request", {
        "flag": "g-1", "sub_type": "invite", "approve": True})  # fmt: skip


def test_ids_and_flags_that_are_not_ids_drop_the_event_or_the_answer() -> None:
    # a map, a list or a negative number is no QQ id: no event is built on it
    assert to_event(BOT, notice("group_increase", group_id=7, user_id={"x": [1, 1]})) is None
    assert to_event(BOT, notice("group_increase", group_id=[1, 2], user_id=5)) is None
    assert to_event(BOT, notice("group_increase", group_id=7, user_id=-5)) is None
    # a flag that is not text cannot answer the request: it stays pending
    odd = request("group", sub_type="add", group_id=7, user_id=5, comment="", flag={"f": 1})
    assert event_of(odd)[4]["flag"] == ""
    assert decided(odd, True) is None


# -- media in ----------------------------------------------------------------------------------


def test_media_segments_become_attachments_and_keep_their_placeholders() -> None:
    url = "https://multimedia.nt.qq.com.cn/download?appid=1407&fileid=abc&rkey=xyz"
    segments = segments_of([
        {"type": "text", "data": {"text": "look "}},
        {"type": "image", "data": {"file": "ABC.jpg", "url": url, "file_size": "2048",
                                   "sub_type": 0, "summary": ""}},
        {"type": "record", "data": {"file": "v.amr", "path": "/x/v.amr", "file_size": "900"}},
        {"type": "file", "data": {"file": "report.pdf", "file_id": "/f-1", "file_size": 77}},
        {"type": "video", "data": {"file": "m.mp4", "url": "https://x/m.mp4"}},
        {"type": "mface", "data": {"summary": "[wave]", "url": "https://gxh.vip.qq.com/w.gif"}},
        {"type": "face", "data": {"id": "178"}},
    ])  # fmt: skip
    image, voice, file, video, sticker = attachments_of(segments)
    assert image == Attachment("image", url=url, file_id="ABC.jpg", size=2048, mime="image/jpeg",
                               name="ABC.jpg", inline=True)  # fmt: skip
    assert (voice.kind, voice.url, voice.file_id, voice.size) == ("voice", "", "v.amr", 900)
    assert (file.kind, file.file_id, file.name, file.size) == ("file", "/f-1", "report.pdf", 77)
    assert (video.kind, video.url, video.inline) == ("video", "https://x/m.mp4", True)
    assert (sticker.kind, sticker.name) == ("sticker", "[wave]")
    message = to_message(BOT, {"message_type": "private", "user_id": 5, "message": segments,
                               "message_id": 1}, (), "key")  # fmt: skip
    assert message is not None
    assert message.text == "look [image][record][file][video][mface][face]"
    assert message.attachments == (image, voice, file, video, sticker)


def test_a_group_role_listed_in_admins_from_makes_a_chat_admin() -> None:
    def group_message(role: str, anonymous: Any = None) -> Message:
        event = {"message_type": "group", "group_id": 7, "user_id": 5, "message": "hi",
                 "message_id": 1, "sender": {"user_id": 5, "role": role},
                 "anonymous": anonymous}  # fmt: skip
        out = to_message(BOT, event, (), "key", ("owner", "admin"))
        assert out is not None
        return out

    assert group_message("owner").chat_admin is True
    assert group_message("admin").chat_admin is True
    assert group_message("member").chat_admin is False
    assert group_message("admin", {"id": 9, "name": "x", "flag": "f"}).chat_admin is False
    private = to_message(BOT, {"message_type": "private", "user_id": 5, "message": "hi",
                               "sender": {"role": "owner"}}, (), "key", ("owner",))  # fmt: skip
    assert private is not None and private.chat_admin is False
    # without admins_from nobody is
    event = {"message_type": "group", "group_id": 7, "user_id": 5, "message": "hi",
             "sender": {"role": "owner"}}  # fmt: skip
    assert to_message(BOT, event, (), "key").chat_admin is False  # type: ignore[union-attr]


# -- reply parts out ---------------------------------------------------------------------------

GROUP = {"message_type": "group", "group_id": 7}
PRIVATE = {"message_type": "private", "user_id": 5}


def test_images_mentions_and_a_quote_become_segments() -> None:
    parts = Parts(images=["https://img.example/cat.png", "data:image/png;base64,iVBOR"],
                  mentions=["20002"], reply_to="")  # fmt: skip
    (piece,) = compose(GROUP, "a cat", parts, answering="555")
    assert piece == [
        {"type": "reply", "data": {"id": "555"}},
        {"type": "at", "data": {"qq": "20002"}},
        {"type": "text", "data": {"text": " a cat"}},
        {"type": "image", "data": {"file": "https://img.example/cat.png"}},
        {"type": "image", "data": {"file": "base64://iVBOR"}},
    ]
    # "all" (an @everyone) or anything but a QQ number is no mention
    (odd,) = compose(GROUP, "hi", Parts(mentions=["all", "x1", "20002"]))
    assert [s for s in odd if s["type"] == "at"] == [{"type": "at", "data": {"qq": "20002"}}]
    # an image alone; mentions mean nothing in a private chat
    (alone,) = compose(PRIVATE, "", Parts(images=["https://i/x.jpg"], mentions=["9"]))
    assert alone == [{"type": "image", "data": {"file": "https://i/x.jpg"}}]


def test_a_path_image_falls_back_to_text() -> None:
    assert segment_file("pics/cat.png") is None
    assert segment_file("data:image/png,notbase64") is None
    (piece,) = compose(GROUP, "here", Parts(images=["pics/cat.png"]))
    assert piece == [{"type": "text", "data": {"text": "here\n[image: cat.png]"}}]


async def test_a_path_under_the_rules_media_directory_goes_out_as_base64(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    (rules / "media" / "pics").mkdir(parents=True)
    (rules / "media" / "pics" / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    (tmp_path / "secret.txt").write_text("no")
    (rules / "r.yaml").write_text("rules: []")  # beside media/, never sent
    parts = Parts(
        images=["media/pics/cat.png", "../secret.txt", "r.yaml"], files=["media/pics/cat.png"]
    )
    local = await localize(parts, rules)
    assert local == {"media/pics/cat.png": "base64://iVBORw0KGgpmYWtl"}
    text, upload = compose(GROUP, "hi", parts, local=local)
    assert text == [
        {"type": "text", "data": {"text": "hi\n[image: secret.txt]\n[image: r.yaml]"}},
        {"type": "image", "data": {"file": "base64://iVBORw0KGgpmYWtl"}},
    ]
    assert isinstance(upload, FileUpload)
    assert upload.params == {"group_id": 7, "file": "base64://iVBORw0KGgpmYWtl", "name": "cat.png"}
    assert await localize(parts, None) == {}


def test_buttons_become_a_numbered_list() -> None:
    rows = [[Button("Yes", data="y"), Button("No", data="n")],
            [Button("Docs", url="https://docs.example")]]  # fmt: skip
    (piece,) = compose(PRIVATE, "Sure?", Parts(buttons=rows))
    assert piece == [
        {"type": "text", "data": {"text": "Sure?\n1. Yes\n2. No\n3. Docs: https://docs.example"}}
    ]


def test_files_are_uploaded_after_the_message() -> None:
    text, upload = compose(GROUP, "the report", Parts(files=["https://f.example/r%20q.pdf"]))
    assert text == [{"type": "text", "data": {"text": "the report"}}]
    assert upload == FileUpload(
        "upload_group_file", {"group_id": 7, "file": "https://f.example/r%20q.pdf",
                              "name": "r q.pdf"}, "[file] r q.pdf: https://f.example/r%20q.pdf",
    )  # fmt: skip
    (private,) = compose(PRIVATE, "", Parts(files=["data:application/pdf;base64,JVBER"]))
    assert isinstance(private, FileUpload) and private.action == "upload_private_file"
    assert private.params == {"user_id": 5, "file": "base64://JVBER", "name": "file"}


@pytest.mark.parametrize("text", ["", "   "])
def test_nothing_to_send_is_no_piece(text: str) -> None:
    assert compose(GROUP, text, None) == []
    assert compose(GROUP, text, Parts(reply_to="")) == []


@pytest.mark.parametrize(
    "segments",
    [
        [{"type": "text", "data": {"text": "  hi "}}, {"type": "text", "data": {"text": "there "}}],
        [{"type": "text", "data": {"text": 42}}],  # a number where the spec says a string
        [{"type": "text", "data": None}, {"type": "text", "data": {"text": "x"}}],
        [{"type": "text"}, "junk", {"type": "text", "data": {"text": "y"}}],
        [{"type": "text", "data": {"text": "a"}}, {"type": "at", "data": {"qq": BOT}}],
        [
            {"type": "text", "data": {"text": "see"}},
            {"type": "image", "data": {"url": "http://x/i"}},
        ],
    ],
)
def test_a_text_message_reads_as_its_segments_would(segments: list[Any]) -> None:
    """Text-only arrays take a shorter way than read_message; the Message is the same."""
    from tmy.adapters.onebot.codec import read_message

    event = {"message_type": "group", "group_id": 5, "user_id": 7, "message": segments}
    message = to_message(BOT, event, (), "allow")
    assert message is not None
    clean = segments_of(segments)
    parsed = read_message(clean, BOT, ())
    assert (message.text, message.mentions_bot, message.reply_to) == (
        parsed.text, parsed.mentions_bot, parsed.reply_to,
    )  # fmt: skip
    assert message.attachments == attachments_of(clean)


def test_a_quoted_send_reads_back_as_its_text() -> None:
    from tmy.adapters.onebot.api import Recent

    recent = Recent(size=2)
    recent.remember(BOT, "9", [{"type": "reply", "data": {"id": "1"}}, *compose(
        {"message_type": "group", "group_id": 5}, "hello", None)[0]], BOT)  # fmt: skip
    recent.remember(BOT, "10", "typed", "7")
    assert recent.get(BOT, "9") == {"text": "hello", "user": BOT, "id": "9"}
    assert recent.get(BOT, "10") == {"text": "typed", "user": "7", "id": "10"}
