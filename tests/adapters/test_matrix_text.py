"""Matrix text and room facts without a homeserver: splitting, reply fallbacks, mentions,
pills, reading events, power levels."""

from __future__ import annotations

from tmy.adapters.matrix.compose import compose, mxc_of
from tmy.adapters.matrix.incoming import Me, Recent, read_room_events
from tmy.adapters.matrix.rooms import Rooms, creators_of, role_of
from tmy.adapters.matrix.text import (
    MAX_TEXT,
    MAX_TEXT_BYTES,
    count_pills,
    pills,
    split_text,
    strip_mention,
    strip_reply_fallback,
)
from tmy.message import Button, Outgoing

BOT = "@tmy:example.org"
ME = Me(BOT, "Tmy", "http://hs/_matrix/client/v1/media/download")


def test_split_keeps_pieces_under_the_character_and_byte_limits() -> None:
    ascii_text = "word " * 4000
    pieces = split_text(ascii_text)
    assert all(len(p) <= MAX_TEXT for p in pieces) and len(pieces) == 3
    assert " ".join(pieces) == ascii_text.strip()
    wide = "😀" * 10_000  # 4 bytes each: the byte limit cuts first
    pieces = split_text(wide)
    assert all(len(p.encode()) <= MAX_TEXT_BYTES for p in pieces)
    assert "".join(pieces) == wide
    lines = "\n".join(["a line of text"] * 1000)
    assert all(not p.startswith("\n") and p.endswith("text") for p in split_text(lines, 100))


def test_reply_fallback_lines_are_cut() -> None:
    assert strip_reply_fallback("> <@a:x> hi\n> there\n\nmy answer") == "my answer"
    assert strip_reply_fallback("> a quote I typed\nmine") == "> a quote I typed\nmine"
    assert strip_reply_fallback("plain") == "plain"
    assert strip_reply_fallback("> * <@a:x> waves\n\nhi back") == "hi back"  # a reply to an emote


def test_mentions_of_the_bot_are_stripped() -> None:
    assert strip_mention(f"{BOT}: ping", BOT, "Tmy") == ("ping", True)
    assert strip_mention("Tmy, ping", BOT, "Tmy") == ("ping", True)
    assert strip_mention("tmy: ping", BOT, "Tmy") == ("ping", True)
    assert strip_mention(f"hey {BOT} ping me", BOT, "Tmy") == ("hey ping me", True)
    assert strip_mention("Tmyx ping", BOT, "Tmy") == ("Tmyx ping", False)
    assert strip_mention("@tmy:example.org.uk ping", BOT) == ("@tmy:example.org.uk ping", False)


def test_a_display_name_is_a_mention_only_where_it_addresses_the_bot() -> None:
    assert strip_mention("Help me with this", BOT, "Help") == ("Help me with this", False)
    assert strip_mention("hey Help ping me", BOT, "Help") == ("hey Help ping me", False)
    assert strip_mention("Help ping", BOT, "Help", addressed=True) == ("ping", True)
    assert strip_mention("hey Help ping me", BOT, "Help", pills=1) == ("hey ping me", True)
    assert strip_mention("Help: ask Help", BOT, "Help", pills=1) == ("ask Help", True)


def test_pills_to_the_bot_are_counted() -> None:
    html = (
        f'<a href="https://matrix.to/#/{BOT}">Tmy</a> and '
        '<a href="https://matrix.to/#/%40tmy%3Aexample.org?via=x">Tmy</a> '
        '<a href="matrix:u/tmy:example.org">Tmy</a> <a href="https://matrix.to/#/@ann:x">A</a>'
    )
    content = {"format": "org.matrix.custom.html", "formatted_body": html}
    assert count_pills(content, BOT) == 3
    assert count_pills({"formatted_body": html}, BOT) == 0  # no format: not HTML


def test_pills_escape_html() -> None:
    body, rich = pills([("@a:x", "A<b>")], "1 < 2\nok")
    assert body == "A<b> 1 < 2\nok"
    assert rich == '<a href="https://matrix.to/#/@a:x">A&lt;b&gt;</a> 1 &lt; 2<br/>ok'


def test_compose_mentions_links_and_media() -> None:
    parts = Outgoing(
        images=["mxc://x/pic"],
        mentions=["@ann:x"],
        buttons=[[Button("Docs", url="https://d.example"), Button("Go", "go")]],
    )
    pieces = compose("hello", parts, {"@ann:x": "Ann"})
    assert pieces[0].content["body"] == "Ann hello\nDocs: https://d.example"
    assert pieces[0].content["m.mentions"] == {"user_ids": ["@ann:x"]}
    assert (pieces[1].kind, pieces[1].source) == ("image", "mxc://x/pic")
    assert compose("plain", None)[0].content == {
        "msgtype": "m.text",
        "body": "plain",
        "m.mentions": {},
    }


def test_mxc_of_recognises_the_homeservers_own_media() -> None:
    base = "http://hs/_matrix/client/v1/media/download"
    assert mxc_of(f"{base}/example.org/abc", base) == "mxc://example.org/abc"
    assert mxc_of("mxc://example.org/abc", base) == "mxc://example.org/abc"
    assert mxc_of("https://elsewhere/pic.png", base) == ""


def test_power_levels_to_roles() -> None:
    power = {"users": {"@o:x": 100, "@a:x": 50, "@m:x": 49}, "users_default": 0}
    assert [role_of(power, u) for u in ("@o:x", "@a:x", "@m:x", "@n:x")] == [
        "owner",
        "admin",
        "",
        "",
    ]
    assert role_of({"users_default": 50}, "@n:x") == "admin"


def test_reading_skips_edits_notices_own_events_and_bad_events() -> None:
    def msg(i: int, sender: str = "@ann:x", **content: object) -> dict[str, object]:
        return {
            "type": "m.room.message",
            "sender": sender,
            "event_id": f"$e{i}",
            "content": {"msgtype": "m.text", "body": f"m{i}", **content},
        }

    events = [
        msg(1),
        msg(2, msgtype="m.notice"),
        msg(3, sender=BOT),
        msg(4, **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$e1"}}),
        {"type": "m.room.message", "sender": "@ann:x", "event_id": "$e5", "content": "broken"},
        msg(6, msgtype="m.file", url="mxc://x/f", filename="a.txt", body="see this"),
    ]
    found = read_room_events("!r:x", events, ME, Recent(), {})
    assert [i.message.message_id for i in found] == ["$e1", "$e6"]
    attachment = found[1].message.attachments[0]
    assert found[1].message.text == "see this"  # a caption: the file's name is separate
    assert attachment.url == "http://hs/_matrix/client/v1/media/download/x/f"
    assert (attachment.kind, attachment.file_id, attachment.inline) == ("file", "mxc://x/f", True)


async def test_version_12_creators_are_owners_their_create_event_fetched_once() -> None:
    create = {
        "type": "m.room.create",
        "sender": "@c:x",
        "content": {"room_version": "12", "additional_creators": ["@d:x"]},
    }
    asked: list[str] = []

    async def fetch_create(room_id: str) -> dict[str, object]:
        asked.append(room_id)
        return create

    async def power(room_id: str) -> dict[str, object]:
        return {"users": {"@a:x": 100}}

    async def members(room_id: str) -> dict[str, str]:
        return {}

    rooms = Rooms(members, power, fetch_create)
    roles = [await rooms.role("!hash", u) for u in ("@c:x", "@d:x", "@a:x", "@n:x")]
    assert roles == ["owner", "owner", "owner", ""]
    assert await rooms.role("!older:x", "@c:x") == ""  # a room id naming its server: no creators
    assert asked == ["!hash"]
    assert creators_of({"sender": "@c:x", "content": {"room_version": "11"}}) == frozenset()
