"""Satori's message elements read and written, events mapped, logins of both protocol
versions: the pure parts of the Satori adapter."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tmy.adapters.satori.compose import MAX_TEXT, compose, split_text
from tmy.adapters.satori.elements import Element, escape, parse, unescape
from tmy.adapters.satori.events import read_event
from tmy.adapters.satori.incoming import read_content
from tmy.adapters.satori.logins import Logins, read_login
from tmy.errors import AdapterError
from tmy.message import Button, Outgoing

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
BOT = "10001"


def test_entities_are_unescaped_once_and_blank_lines_survive() -> None:
    assert unescape("&lt;a&gt; &amp;lt; &#39;&#x4e2d; &bogus; &#0;") == "<a> &lt; '中 &bogus; &#0;"
    assert escape('a<b>&"', attribute=True) == "a&lt;b&gt;&amp;&quot;"
    (text,) = parse("first\n\nsecond &amp; third")
    assert text.text == "first\n\nsecond & third"


def test_tags_attributes_and_unpaired_tags() -> None:
    tree = parse(
        "<p>\n  <b foo=\"1\" bar no-baz>x</b>\n</p><!-- hidden --></i>tail<qq:passive id='7'/>"
    )
    p, tail, passive = tree
    assert p.type == "p" and p.children[0] == Element(
        "b", {"foo": "1", "bar": True, "baz": False}, [Element("text", text="x")]
    )
    assert tail == Element("text", text="</i>tail")  # an unpaired closing tag is text
    assert (passive.type, passive.attrs) == ("qq:passive", {"id": "7"})


def test_content_becomes_text_attachments_and_mentions() -> None:
    read = read_content(
        f'<at id="{BOT}"/>, hi <at id="7" name="ann"/> <at type="all"/> '
        '<img src="https://x.example/a.jpg" title="a.jpg"/><audio src="https://x.example/v.amr"/>'
        '<video src="internal:qq/1/v"/><file src="https://x.example/f.pdf" title="f.pdf"/>'
        '<face id="1"><img src="https://x.example/face.png"/></face><br/>next',
        BOT,
    )
    assert read.mentions_bot
    assert read.text == "hi @ann @all [image][voice][video][file][face]\nnext"
    kinds = [(a.kind, a.url, a.mime, a.name) for a in read.attachments]
    assert kinds == [
        ("image", "https://x.example/a.jpg", "image/jpeg", "a.jpg"),
        ("voice", "https://x.example/v.amr", "", ""),
        ("video", "internal:qq/1/v", "", ""),
        ("file", "https://x.example/f.pdf", "application/pdf", "f.pdf"),
    ]
    assert all(a.inline for a in read.attachments)


def test_a_quote_is_reply_to_and_its_text_is_left_out() -> None:
    read = read_content('<quote id="9"><author id="42" name="x"/>old <b>words</b></quote>new', BOT)
    assert (read.text, read.reply_to) == ("new", "9")
    assert read.quoted == {"text": "old words", "user": "42", "id": "9"}
    assert not read.mentions_bot


def test_compose_escapes_splits_and_adds_the_parts(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "cat.png").write_bytes(PNG)
    parts = Outgoing(images=["media/cat.png"], files=["https://x.example/r.pdf"],
                     mentions=["7"], reply_to="5")  # fmt: skip
    (one,) = compose("a <b> & c", parts, platform="qq", quote="1", rules_dir=tmp_path)
    inline = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert one == (
        f'<quote id="5"/><at id="7"/> a &lt;b&gt; &amp; c<img src="{inline}"/>'
        '<file src="https://x.example/r.pdf"/>'
    )
    long = compose("x" * (MAX_TEXT + 10), Outgoing(images=["https://x.example/a.png"]),
                   platform="discord")  # fmt: skip
    assert [len(p) for p in long[:2]] == [MAX_TEXT, 10]
    assert long[2] == '<img src="https://x.example/a.png"/>'  # media after a split reply
    assert len(compose("y" * 4000, None, platform="telegram")) == 1  # Telegram takes 4,096
    assert compose("", Outgoing(mentions=["7"]), platform="qq") == ['<at id="7"/>']
    with pytest.raises(AdapterError, match="media directory"):
        compose("x", Outgoing(images=["../secret.png"]), platform="qq", rules_dir=tmp_path)


def test_buttons_are_elements_where_shown_and_lines_elsewhere() -> None:
    rows = [[Button("Yes", "vote:yes"), Button("Docs", url="https://x.example/d")]]
    (discord,) = compose("Vote", Outgoing(buttons=rows), platform="discord")
    assert discord == (
        'Vote<button type="action" id="vote:yes">Yes</button>'
        '<button type="link" href="https://x.example/d">Docs</button>'
    )
    assert compose("Vote", Outgoing(buttons=rows), platform="chronocat") == [
        "Vote\n[Yes]\nDocs: https://x.example/d"
    ]


def test_split_text_prefers_line_breaks_then_spaces() -> None:
    text = "a" * 1500 + "\n" + "b" * 1000
    assert split_text(text, 2000) == ["a" * 1500, "b" * 1000]
    words = " ".join(["word"] * 500)
    assert all(len(p) <= 100 for p in split_text(words, 100))
    assert split_text("z" * 250, 100) == ["z" * 100, "z" * 100, "z" * 50]


def test_logins_of_both_protocol_versions() -> None:
    logins = Logins()
    logins.replace([
        {"sn": 1, "platform": "qq", "user": {"id": "1", "nick": "Bot"}, "status": 1},
        {"platform": "red", "self_id": "2", "status": 0},  # before Satori 1.1
        "garbage",
    ])  # fmt: skip
    assert [(x["platform"], x["user_id"], x["status"]) for x in logins.as_list()] == [
        ("satori:qq", "1", "online"),
        ("satori:red", "2", "offline"),
    ]
    assert logins.first("red") is not None and logins.first("kook") is None
    logins.updated({"sn": 1, "status": 4})  # a login event without user: matched by sn
    assert logins.as_list()[0]["status"] == "reconnecting"
    logins.removed({"sn": 9, "platform": "red", "user": {"id": "2"}})
    assert len(logins) == 1
    assert read_login({"platform": "x"}) == read_login({"platform": "x", "user": None})


def test_events_map_onto_the_vocabulary() -> None:
    base = {"guild": {"id": "g"}, "channel": {"id": "c", "type": 0}, "user": {"id": "5"}}
    leave = read_event({**base, "type": "guild-member-removed", "operator": {"id": "9"}}, "qq", BOT)
    assert leave is not None and leave.message.event is not None
    assert leave.message.event.data == {
        "operator": "9", "guild": "g", "kicked": True, "user": "5", "chat": "c",
    }  # fmt: skip
    react = read_event({**base, "type": "reaction-removed", "message": {"id": "m"},
                        "emoji": {"id": "76", "name": "👍"}}, "qq", BOT)  # fmt: skip
    assert react is not None and react.message.event is not None
    assert (react.message.event.kind, react.message.event.data["emoji"]) == ("reaction", "👍")
    assert react.message.event.data["added"] is False
    recall = read_event({**base, "type": "message-deleted", "message": {"id": "m"}}, "qq", BOT)
    assert recall is not None and recall.message.event is not None
    assert recall.message.event.data["message_id"] == "m"
    friend = read_event({"type": "friend-request", "user": {"id": "5"},
                         "message": {"id": "r1", "content": "hi"}}, "qq", BOT)  # fmt: skip
    assert friend is not None and friend.message.event is not None
    assert (friend.message.chat, friend.message.private, friend.approve_with) == (
        "private:5", True, "friend.approve",
    )  # fmt: skip
    assert friend.message.event.data["flag"] == "r1"
    quote = {"id": "m1", "content": "old", "user": {"id": BOT}}
    quoting = {**base, "type": "message-created",
               "message": {"id": "m2", "content": "right", "quote": quote}}  # fmt: skip
    replied = read_event(quoting, "qq", BOT)
    assert replied is not None and replied.message.reply_to == "m1"
    assert replied.message.mentions_bot
    assert replied.quoted == {"text": "old", "user": BOT, "id": "m1"}
    own = {**base, "type": "message-created", "user": {"id": BOT}, "message": {"id": "x"}}
    assert read_event(own, "qq", BOT) is None  # the bot's own message
    assert read_event({**base, "type": "guild-updated"}, "qq", BOT) is None


def test_media_alone_without_text_is_one_message() -> None:
    """A reply of just a picture (no text) was an IndexError: nothing went out."""
    img = '<img src="https://x.example/a.png"/>'
    assert compose("", Outgoing(images=["https://x.example/a.png"]), platform="qq") == [img]
    assert compose("  ", Outgoing(images=["https://x.example/a.png"], mentions=["7"], reply_to="5"),
                   platform="qq") == [f'<quote id="5"/><at id="7"/> {img}']  # fmt: skip
    rows = [[Button("Go", "go")]]
    assert compose("", Outgoing(buttons=rows), platform="discord") == [
        '<button type="action" id="go">Go</button>'
    ]


def test_deep_nesting_is_read_without_running_out_of_stack() -> None:
    """Thousands of nested elements raised RecursionError (the event was lost) and their
    end tags were matched by scanning the whole stack (quadratic)."""
    deep = "<b>" * 5000 + "echo &lt;deep&gt;" + "</b>" * 5000 + " tail"
    assert read_content(deep, BOT).text == "echo <deep> tail"
    assert read_content("<i>" * 5000 + "open", BOT).text == "open"
    quoted = read_content('<quote id="q">' + "<b>" * 3000 + "old</quote>new", BOT)
    assert (quoted.text, quoted.reply_to) == ("new", "q")
    depth, node = 0, parse(deep)[0]
    while node.children and node.children[0].type == "b":
        depth, node = depth + 1, node.children[0]
    assert depth < 100  # nesting is capped: tree walkers stay far from the recursion limit


@pytest.mark.timeout(10)
def test_unclosed_tags_and_comments_are_read_in_linear_time() -> None:
    """Each of these took from 10 s to minutes (the event loop blocked, the daemon
    with it): every "<" or "<!--" rescanned the rest of the content."""
    tags = "<a " * 30000
    assert read_content(tags, BOT).text == tags.strip()
    comments = "<!--" * 50000
    assert parse(comments) == [Element("text", text=comments)]
    closers = "<b>" * 20000 + "x" + "</i>" * 20000
    assert read_content(closers, BOT).text == "x" + "</i>" * 20000
    assert read_content("<b>" * 20000 + "y" + "</b>" * 20000, BOT).text == "y"


def test_a_long_reply_with_mentions_stays_under_the_limit_as_the_platform_writes_it() -> None:
    """The first piece took the whole 2,000 characters and the mention came on top:
    Discord writes <at id=X/> as <@X>, so the piece was 2,022 and refused (the reply lost)."""
    user = "123456789012345678"
    text = "word " * 600
    pieces = compose(text, Outgoing(mentions=[user, "42"]), platform="discord")
    shown = [p.replace(f'<at id="{user}"/>', f"<@{user}>").replace('<at id="42"/>', "<@42>")
             for p in pieces]  # fmt: skip
    assert all(len(p) <= MAX_TEXT for p in shown)
    assert shown[0].startswith(f"<@{user}> <@42> word")
    assert " ".join(shown).split()[2:] == text.split()


def test_pieces_are_measured_in_utf16_as_telegram_counts() -> None:
    """4,096 characters of emoji were one Telegram message of 8,192 UTF-16 units: refused."""
    text = "😀" * 3000 + " tail " + "中" * 3000
    pieces = compose(text, None, platform="telegram")
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")
    assert [len(p) for p in split_text("😀" * 5, 4)] == [2, 2, 1]


def test_an_odd_size_attribute_is_ignored_not_fatal_to_the_message() -> None:
    """``"²".isdigit()`` is true and int() refuses it (so does a 5,000-digit number):
    the ValueError lost the whole message."""
    for size in ("²", "9" * 5000, "١٢"):
        read = read_content(f'<img src="https://x.example/a.png" size="{size}"/>hi', BOT)
        assert read.text == "[image]hi" and read.attachments[0].size is None
    assert (
        read_content('<img src="https://x.example/a.png" size="42"/>', BOT).attachments[0].size
        == 42
    )


def test_a_mention_cannot_ping_everyone() -> None:
    """``mention: all`` became <at id="all"/>: Koishi's OneBot adapter writes it as
    [CQ:at,qq=all] and KOOK's as (met)all(met), pinging every member."""
    parts = Outgoing(mentions=["all", " Here ", "everyone", "@all", "7"])
    assert compose("hi", parts, platform="qq") == ['<at id="7"/> hi']
    assert compose("", Outgoing(mentions=["all"]), platform="kook") == []
