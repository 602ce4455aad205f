"""Slack's text: its markup read into plain words, the bot's mention removed, replies split."""

from __future__ import annotations

import re

from tmy.adapters.slack import (
    MAX_TEXT,
    SlackAdapter,
    from_settings,
    readable,
    split_text,
    strip_bot_mention,
)
from tmy.adapters.slack.compose import compose
from tmy.adapters.slack.text import MAX_SECTION, escape, unescape
from tmy.config import Settings
from tmy.message import Button, Outgoing
from tmy.types import Adapter

BOT = "U0BOT0001"


def test_the_bots_mention_is_removed_wherever_it_stands() -> None:
    assert strip_bot_mention(f"<@{BOT}> ping", BOT) == ("ping", True)
    assert strip_bot_mention(f"<@{BOT}|tmy>, ping", BOT) == ("ping", True)
    assert strip_bot_mention(f"hey <@{BOT}> ping me", BOT) == ("hey ping me", True)
    assert strip_bot_mention(f"ping <@{BOT}>", BOT) == ("ping", True)
    assert strip_bot_mention("<@U0ANN0001> ping", BOT) == ("<@U0ANN0001> ping", False)
    assert strip_bot_mention("ping", "") == ("ping", False)


def test_markup_reads_as_a_slack_user_sees_it() -> None:
    names = {"U0ANN0001": "Ann"}
    text = (
        "<@U0ANN0001> <@W0BOB|bob> <#C0GEN|general> <!here> <!subteam^S1|@devs> "
        "<https://x.example|docs> <mailto:a@b.example> &lt;tag&gt; &amp;"
    )
    assert readable(text, names) == ("@Ann @bob #general @here @devs docs a@b.example <tag> &")
    assert escape("<!channel> & <@U1>") == "&lt;!channel&gt; &amp; &lt;@U1&gt;"


def test_split_prefers_line_breaks_and_keeps_every_piece_within_the_limit() -> None:
    text = ("a" * 3000) + "\n" + ("b" * 3000)
    assert split_text(text) == ["a" * 3000, "b" * 3000]
    pieces = split_text("c" * (MAX_TEXT * 2 + 5))
    assert [len(p) for p in pieces] == [MAX_TEXT, MAX_TEXT, 5]
    assert split_text("   ") == []


def test_the_adapter_satisfies_the_contract_and_is_off_by_default() -> None:
    adapter = SlackAdapter()
    assert isinstance(adapter, Adapter) and adapter.name == "slack"
    assert adapter.routes() == [] and adapter.health()["state"] == "starting"
    assert from_settings(Settings(http_enabled=False), None) is None


def _words(text: str) -> str:
    return "".join(text.split())


def test_every_message_is_within_the_limit_as_slack_receives_it_escaped() -> None:
    text = "a < b && c > d " * 600  # 9,000 characters, far more once escaped
    pieces = compose(text, None)
    assert all(len(p.text) <= MAX_TEXT for p in pieces), [len(p.text) for p in pieces]
    assert _words("".join(unescape(p.text) for p in pieces)) == _words(text)  # nothing lost
    # cut exactly at the limit (no space to cut at): never inside an entity
    pieces = compose("&" * 5000, None)
    assert all(len(p.text) <= MAX_TEXT and re.fullmatch("(&amp;)+", p.text) for p in pieces)
    assert sum(p.text.count("&amp;") for p in pieces) == 5000


def test_mentions_links_and_sections_keep_within_their_limits() -> None:
    pieces = compose("x" * MAX_TEXT, Outgoing(mentions=["U0BOB0002"]))
    assert pieces[0].text.startswith("<@U0BOB0002> ")
    assert all(len(p.text) <= MAX_TEXT for p in pieces)
    assert _words("".join(p.text for p in pieces)) == "<@U0BOB0002>" + "x" * MAX_TEXT
    link = "https://example.com/report.pdf"
    pieces = compose("y " * 1995, Outgoing(files=[link]))
    assert all(len(p.text) <= MAX_TEXT for p in pieces) and f"<{link}>" in pieces[-1].text
    (piece,) = compose("<" * 800, Outgoing(buttons=[[Button("ok")]]))
    sections = [b["text"]["text"] for b in piece.blocks or () if b["type"] == "section"]
    assert all(len(s) <= MAX_SECTION and re.fullmatch("(&lt;)+", s) for s in sections)
    assert "".join(sections) == "&lt;" * 800


def test_a_short_user_id_is_mentioned_as_incoming_messages_name_it() -> None:
    """Ids are read from `<@U…>` with any length; a reply mentioning the sender (USER)
    must take the same ids, or the mention (and the reply's buttons) were dropped."""
    pieces = compose("hi", Outgoing(mentions=["U1"]))
    assert "<@U1>" in str(pieces)
