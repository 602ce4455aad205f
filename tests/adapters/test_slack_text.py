"""Slack's text: its markup read into plain words, the bot's mention removed, replies split."""

from __future__ import annotations

from tmy.adapters.slack import (
    MAX_TEXT,
    SlackAdapter,
    from_settings,
    readable,
    split_text,
    strip_bot_mention,
)
from tmy.adapters.slack.text import escape
from tmy.config import Settings
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
