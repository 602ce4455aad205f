"""Slack over Socket Mode: the adapter against a fake Slack on loopback (Web API + WebSocket).

The fake (tests/support/slack_fake.py) answers the Web API and serves Socket Mode the way
Slack documents them; the adapter reaches it through ``api_base``. The rules run in the
real engine with a real SQLite store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.adapters import wait_state
from tests.support.slack_fake import (
    ANN,
    APP_TOKEN,
    BOB,
    BOT_TOKEN,
    BOT_USER,
    CHANNEL,
    DM,
    FakeSlack,
)
from tmy.adapters.slack import MAX_TEXT, SlackAdapter, SlackConfig, from_settings
from tmy.config import load_settings
from tmy.errors import AdapterError
from tmy.message import Message, Reply, Target
from tmy.testing import Bot, serving

RULES = r"""
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - plugin: ADJUST
        input: "{PLATFORM}|{CHAT}|{USER}|{USER_NAME}|{QUESTION}"
  - id: ping
    triggers: [ping]
    mention: true
    steps:
      - {plugin: ADJUST, input: pong}
  - id: long
    triggers: [long]
    steps:
      - {plugin: ADJUST, input: "?= ('word ' * 1000) + ('x' * 100)"}
  - id: threaded
    triggers: [start a thread]
    steps:
      - {plugin: ADJUST, input: {text: "in a thread", reply: true}}
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome {USER_NAME}! ({EVENT_RAW} in {CHAT})"}
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
      - {plugin: ADJUST, input: "{USER_NAME} picked {EVENT_DATA[data]}"}
"""


def make_adapter(fake: FakeSlack, **config: Any) -> SlackAdapter:
    tokens = {"bot_token": config.pop("bot_token", BOT_TOKEN),
              "app_token": config.pop("app_token", APP_TOKEN)}  # fmt: skip
    base = fake.base if config.pop("api_base_slash", True) else fake.base.rstrip("/")
    adapter = SlackAdapter(SlackConfig(api_base=base, **config), pacing=0.0, **tokens)
    adapter.backoff_base, adapter.backoff_cap = 0.05, 0.2
    return adapter


class Served:
    def __init__(self, fake: FakeSlack, adapter: SlackAdapter, bot: Bot) -> None:
        self.fake, self.adapter, self.bot = fake, adapter, bot
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)

    async def say(self, text: str, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A message event over Socket Mode; (the event, the chat.postMessage answering it)."""
        event = self.fake.message(text, **kw)
        await self.fake.event(event)
        return event, await self.fake.next_post()


@asynccontextmanager
async def served(**config: Any) -> AsyncIterator[Served]:
    async with FakeSlack() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(fake, **config)
        s = Served(fake, adapter, bot)
        await adapter.start(s.handle)
        try:
            await wait_state(adapter, "connected")
            yield s
        finally:
            await adapter.stop()


# -- messages and replies ------------------------------------------------------------------------


async def test_a_mention_in_a_channel_is_answered_in_the_channel_and_its_thread() -> None:
    async with served() as s:
        event, post = await s.say(f"<@{BOT_USER}> ping")
        assert (post["channel"], post["text"]) == (CHANNEL, "pong")
        assert "thread_ts" not in post  # a top-level message is answered top-level
        message = s.seen[-1]
        assert message.mentions_bot and message.text == "ping" and message.message_id == event["ts"]
        assert (message.chat, message.user, message.private) == (CHANNEL, ANN, False)

        parent = s.fake.next_ts()
        _, post = await s.say(f"<@{BOT_USER}> ping", thread_ts=parent)
        assert (post["channel"], post["thread_ts"], post["text"]) == (CHANNEL, parent, "pong")
        assert s.seen[-1].reply_to == parent

        # an app_mention of the same message (same channel and ts), and Slack delivering
        # an envelope again (retry_attempt 1), run once
        await s.fake.event({**event, "type": "app_mention"})
        await s.fake.event(event, retry=1)
        await s.fake.nothing_posted()
        assert len(s.seen) == 2


async def test_without_a_mention_the_mention_rule_is_silent_but_a_reply_to_the_bot_counts() -> None:
    async with served() as s:
        await s.fake.event(s.fake.message("ping"))
        await s.fake.nothing_posted()
        _, first = await s.say("start a thread")
        assert first["thread_ts"] == s.seen[-1].message_id  # reply: true -> a thread under it
        # a reply in a thread whose first message is the bot's addresses the bot
        _, post = await s.say("ping", thread_ts=first["ts"], parent_user_id=BOT_USER)
        assert (post["text"], post["thread_ts"]) == ("pong", first["ts"])
        _, post = await s.say("ping", thread_ts=first["ts"])  # known without parent_user_id
        assert post["text"] == "pong"


async def test_a_dm_is_private_and_names_are_shown() -> None:
    async with served() as s:
        _, post = await s.say(f"echo hi <@{BOB}> &amp; <#C1|random>", channel=DM)
        assert post["channel"] == DM
        assert post["text"] == f"slack|{DM}|{ANN}|Ann|hi @Bob Stone &amp; #random"
        assert s.seen[-1].private is True
        _, post = await s.say("ping", channel=DM)  # a DM needs no mention
        assert post["text"] == "pong"


async def test_bots_own_messages_and_edits_are_ignored() -> None:
    async with served() as s:
        await s.fake.event(s.fake.message("echo mine", user=BOT_USER))
        await s.fake.event(s.fake.message("echo bot", bot_id="B0OTHER"))
        await s.fake.event(s.fake.message("echo edited", subtype="message_changed"))
        await s.fake.nothing_posted()
        assert s.seen == []


async def test_a_long_reply_is_split_at_slacks_4000_characters() -> None:
    async with served() as s:
        await s.fake.event(s.fake.message("long"))
        first, second = await s.fake.next_post(), await s.fake.next_post()
    assert len(first["text"]) <= MAX_TEXT and first["text"].endswith("word")
    assert second["text"].endswith("x" * 100)
    assert first["text"].count("word") + second["text"].count("word") == 1000


async def test_a_429_waits_retry_after_and_the_reply_goes_out_once() -> None:
    async with served() as s:
        s.fake.flood = [1]
        _, post = await s.say("echo slow")
        await s.fake.nothing_posted()
    assert post["text"].endswith("|slow")
    assert len(s.fake.posted) == 1


async def test_replies_in_one_channel_are_paced() -> None:
    async with FakeSlack() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = SlackAdapter(SlackConfig(api_base=fake.base), bot_token=BOT_TOKEN,
                               app_token=APP_TOKEN, pacing=0.2)  # fmt: skip
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "connected")
            await adapter.send(Target("slack", CHANNEL), "one")
            await adapter.send(Target("slack", CHANNEL), "two")
        finally:
            await adapter.stop()
    one, two = fake.posted
    assert two["at"] - one["at"] >= 0.15


async def test_send_to_a_target_and_its_errors() -> None:
    async with served() as s:
        await s.adapter.send(Target("slack", CHANNEL), "from cron")
        post = await s.fake.next_post()
        assert (post["channel"], post["text"], "thread_ts" in post) == (CHANNEL, "from cron", False)
        await s.adapter.send(Target("slack", "", user=ANN), "<b> & you")
        post = await s.fake.next_post()
        assert (post["channel"], post["text"]) == (ANN, "&lt;b&gt; &amp; you")
        with pytest.raises(AdapterError, match="channel id"):
            await s.adapter.send(Target("slack", "#general"), "x")
        with pytest.raises(AdapterError, match="empty"):
            await s.adapter.send(Target("slack", CHANNEL), " ")


# -- events --------------------------------------------------------------------------------------


async def test_a_member_join_reaches_its_event_rule() -> None:
    async with served() as s:
        await s.fake.event({"type": "member_joined_channel", "user": BOB, "channel": CHANNEL,
                            "channel_type": "C", "team": "T0TEAM001", "inviter": ANN})  # fmt: skip
        post = await s.fake.next_post()
        event = s.seen[-1].event
    assert post["channel"] == CHANNEL
    assert post["text"] == f"Welcome Bob Stone! (member_joined_channel in {CHANNEL})"
    assert event is not None and event.kind == "member_join" and event.data["operator"] == ANN


async def test_a_button_press_reaches_its_rule_in_the_buttons_thread() -> None:
    async with served() as s:
        _, poll = await s.say("poll")
        sections, actions = poll["blocks"]
        assert sections["text"]["text"] == "Lunch?"
        assert [(b["text"]["text"], b["value"]) for b in actions["elements"]] == [
            ("Pizza", "lunch:pizza"),
            ("Soup", "lunch:soup"),
        ]
        carrier = {"type": "message", "ts": poll["ts"], "user": BOT_USER, "text": "Lunch?",
                   "thread_ts": "1700000000.000001"}  # fmt: skip
        await s.fake.envelope("interactive", s.fake.button("lunch:soup", carrier))
        answer = await s.fake.next_post()
    assert (answer["text"], answer["channel"]) == ("Bob Stone picked lunch:soup", CHANNEL)
    assert answer["thread_ts"] == "1700000000.000001"


# -- connections and credentials -------------------------------------------------------------------


async def test_a_lost_connection_and_a_disconnect_message_are_reconnected() -> None:
    async with served() as s:
        await s.fake.drop()
        await s.fake.connected()  # a new connection, after a backoff pause
        await wait_state(s.adapter, "connected")
        _, post = await s.say("echo again")
        assert post["text"].endswith("|again")
        await s.fake.disconnect()
        async with asyncio.timeout(10):
            while len(s.fake.calls_of("apps.connections.open")) < 3:
                await asyncio.sleep(0.01)
        _, post = await s.say("echo still")
        assert post["text"].endswith("|still")
        assert len(s.fake.calls_of("auth.test")) == 1


async def test_a_bad_bot_token_fails_without_retrying() -> None:
    async with FakeSlack() as fake:
        adapter = make_adapter(fake, bot_token="xoxb-revoked-token-0000")
        await adapter.start(_no_handle)
        await wait_state(adapter, "failed")
        error = adapter.health()["error"]
        assert "invalid_auth" in error and "SLACK_BOT_TOKEN" in error and "revoked" not in error
        await asyncio.sleep(0.2)
        assert fake.calls == []  # nothing retried, no connection opened
        with pytest.raises(AdapterError, match="not connected"):
            await adapter.send(Target("slack", CHANNEL), "x")
        await adapter.stop()
        assert adapter.health()["state"] == "failed"


async def test_a_token_revoked_while_connected_fails_and_stops_reconnecting() -> None:
    async with served() as s:
        await s.fake.event({"type": "tokens_revoked", "tokens": {"oauth": [], "bot": [BOT_USER]}})
        await wait_state(s.adapter, "failed")
        assert "tokens_revoked" in s.adapter.health()["error"]
        await asyncio.sleep(0.3)
        assert len(s.fake.calls_of("apps.connections.open")) == 1 and s.fake.sockets == []


async def test_a_bad_or_missing_app_token_fails_naming_it() -> None:
    async with FakeSlack() as fake:
        bad = make_adapter(fake, app_token="xapp-wrong-app-token-00")
        await bad.start(_no_handle)
        await wait_state(bad, "failed")
        assert "SLACK_APP_TOKEN" in bad.health()["error"]
        assert "invalid_auth" in bad.health()["error"]
        await bad.stop()
    missing = SlackAdapter(SlackConfig(app_token_env="MY_XAPP"), bot_token=BOT_TOKEN)
    await missing.start(_no_handle)
    assert missing.health()["state"] == "failed" and "MY_XAPP" in missing.health()["error"]
    nobot = SlackAdapter(SlackConfig(), app_token=APP_TOKEN)
    await nobot.start(_no_handle)
    assert "SLACK_BOT_TOKEN" in nobot.health()["error"]


async def test_an_unreachable_slack_is_retried_until_it_answers() -> None:
    async with FakeSlack() as fake:
        port = fake.port
    fake = FakeSlack()
    async with Bot({"r.yaml": RULES}) as bot:
        adapter = SlackAdapter(SlackConfig(api_base=f"http://127.0.0.1:{port}/api/"),
                               bot_token=BOT_TOKEN, app_token=APP_TOKEN, pacing=0.0)  # fmt: skip
        adapter.backoff_base, adapter.backoff_cap = 0.05, 0.2
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "reconnecting")
            await fake.start(port)
            await wait_state(adapter, "connected")
            await fake.event(fake.message("echo up"))
            assert (await fake.next_post())["text"].endswith("|up")
        finally:
            await adapter.stop()
            await fake.stop()


def test_from_settings(tmp_path: Path) -> None:
    settings = load_settings(env={}, rules=str(tmp_path))
    assert from_settings(settings) is None
    on = settings.with_(adapters={"slack": {"enabled": True}})
    env = {"SLACK_BOT_TOKEN": " xoxb-1 ", "SLACK_APP_TOKEN": "xapp-1"}
    adapter = from_settings(on, env=env)
    assert adapter is not None and (adapter.bot_token, adapter.app_token) == ("xoxb-1", "xapp-1")
    assert adapter.config.mode == "socket" and adapter.routes() == []
    assert adapter.config.api_base == "https://slack.com/api/"
    hooked = settings.with_(adapters={"slack": {"enabled": True, "mode": "webhook",
                                                "signing_secret": "s3cret"}})  # fmt: skip
    adapter = from_settings(hooked, env={})
    assert adapter is not None and adapter.signing_secret == "s3cret"
    assert [r.path for r in adapter.routes()] == ["/slack/events"]  # type: ignore[attr-defined]


async def test_a_bad_token_shows_failed_in_healthz_while_the_daemon_serves(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(RULES)
    async with FakeSlack() as fake:
        settings = load_settings(
            env={},
            rules=str(rules),
            plugins=str(tmp_path / "none"),
            store=f"sqlite:///{tmp_path / 'tmy.db'}",
            http_listen="127.0.0.1:0",
            console=False,
            adapters={"slack": {"enabled": True, "api_base": fake.base,
                                "bot_token": "xoxb-revoked-0000", "app_token": APP_TOKEN}},
        )  # fmt: skip
        async with serving(settings=settings) as daemon:
            base = f"http://127.0.0.1:{daemon.http.port}"
            async with httpx.AsyncClient(base_url=base) as client:
                async with asyncio.timeout(10):
                    while True:
                        report = (await client.get("/healthz")).json()
                        if report["adapters"]["slack"]["state"] == "failed":
                            break
                        await asyncio.sleep(0.02)
                assert "invalid_auth" in report["adapters"]["slack"]["error"]
                assert "xoxb-revoked" not in str(report)
                answer = (await client.post("/v1/messages", json={"text": "echo still"})).json()
                assert answer["answer"].endswith("|still")
            with pytest.raises(AdapterError, match="not connected"):
                await daemon.send(Target("slack", CHANNEL), "hi")


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")
