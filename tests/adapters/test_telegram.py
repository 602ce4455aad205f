"""Telegram: the aiogram-based adapter against a fake Bot API server on loopback.

The fake (tests/support/telegram_fake.py) answers getMe/getUpdates/sendMessage/… the
way api.telegram.org does; the adapter reaches it through ``api_base``. The
rules run in the real engine with a real SQLite store.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tests.support.telegram_fake import (
    BOT_ID,
    BOT_USERNAME,
    GROUP,
    TOKEN,
    USER,
    FakeTelegram,
    entity,
)
from tmy import metrics
from tmy.adapters.http import HttpAdapter
from tmy.adapters.telegram import (
    MAX_TEXT,
    TelegramAdapter,
    TelegramConfig,
    from_settings,
    read_addressing,
    split_text,
)
from tmy.adapters.telegram import adapter as telegram_mod
from tmy.config import load_settings
from tmy.errors import AdapterError, ConfigError
from tmy.message import Message, Reply, Target
from tmy.testing import Bot, serving

RULES = """
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
  - id: start
    triggers: ["/start"]
    steps:
      - {plugin: ADJUST, input: welcome}
  - id: long
    triggers: [long]
    steps:
      - {plugin: ADJUST, input: "?= 'x' * 4100"}
"""

OTHER = {"id": 888, "is_bot": False, "first_name": "Bob"}


def mention(text: str, who: str = "@" + BOT_USERNAME) -> list[dict[str, Any]]:
    return [entity(text, who, "mention")]


def command(text: str) -> list[dict[str, Any]]:
    return [entity(text, text.split()[0], "bot_command")]


class Served:
    """The adapter started against a fake; ``seen`` keeps each Message the engine got."""

    def __init__(self, fake: FakeTelegram, adapter: TelegramAdapter, bot: Bot) -> None:
        self.fake = fake
        self.adapter = adapter
        self.bot = bot
        self.seen: list[Message] = []
        self.fail_next = False

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("boom")
        return await self.bot.engine.handle(message)

    async def answer(self, text: str, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Queue a message; (the message, the sendMessage that answered it)."""
        msg = await self.fake.message(text, **kw)
        return msg, await self.fake.next_sent()


def make_adapter(base: str, token: str = TOKEN, **config: Any) -> TelegramAdapter:
    adapter = TelegramAdapter(TelegramConfig(api_base=base, **config), token=token)
    adapter.backoff_base, adapter.backoff_cap = 0.05, 0.2
    return adapter


@asynccontextmanager
async def served(**config: Any) -> AsyncIterator[Served]:
    async with FakeTelegram() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(fake.base, **config)
        s = Served(fake, adapter, bot)
        await adapter.start(s.handle)
        try:
            await wait_state(adapter, "connected")
            yield s
        finally:
            await adapter.stop()


# -- inbound and replies -----------------------------------------------------------------------


async def test_private_message_is_answered_as_a_reply_in_the_same_chat() -> None:
    async with served() as s:
        msg, sent = await s.answer("echo hello there")
        assert sent["chat_id"] == str(USER["id"])
        assert sent["text"] == "telegram|777|777|Ann Lee|hello there"
        assert sent["reply_parameters"]["message_id"] == msg["message_id"]
        assert "parse_mode" not in sent  # plain text: nothing a user typed becomes markup
        m = s.seen[0]
        assert (m.platform, m.user, m.chat, m.private) == ("telegram", "777", "777", True)
        assert (m.self_id, m.message_id, m.reply_to) == (str(BOT_ID), str(msg["message_id"]), None)
        assert m.raw["message"]["from"]["id"] == 777 and "update_id" in m.raw
        health = s.adapter.health()
        assert health["state"] == "connected" and health["username"] == BOT_USERNAME
        assert health["last_event"] is not None


async def test_group_mention_is_stripped_and_satisfies_mention_rules() -> None:
    async with served() as s:
        text = f"@{BOT_USERNAME} ping"
        msg, sent = await s.answer(text, chat=GROUP, entities=mention(text))
        assert sent["text"] == "pong" and sent["chat_id"] == str(GROUP["id"])
        assert sent["reply_parameters"]["message_id"] == msg["message_id"]
        m = s.seen[-1]
        assert (m.text, m.mentions_bot, m.private, m.chat) == ("ping", True, False, "-100500")

        await s.fake.message("ping", chat=GROUP)  # not addressed: the mention rule stays quiet
        await s.fake.nothing_sent()
        assert s.seen[-1].mentions_bot is False

        text = f"echo 你好 🙂 @{BOT_USERNAME.upper()} again"  # UTF-16 offsets, any case
        _, sent = await s.answer(
            text, chat=GROUP, entities=mention(text, f"@{BOT_USERNAME.upper()}")
        )
        assert sent["text"].endswith("|你好 🙂 again")

        text = "ping @someone_else"  # a mention of somebody else is neither stripped nor addressed
        await s.fake.message(text, chat=GROUP, entities=mention(text, "@someone_else"))
        await s.fake.nothing_sent()


async def test_text_mention_and_reply_to_the_bot_count_as_mentions() -> None:
    async with served() as s:
        text = "Tmy ping"
        ents = [entity(text, "Tmy", "text_mention", user=s.fake.me)]
        _, sent = await s.answer(text, chat=GROUP, entities=ents)
        assert sent["text"] == "pong" and s.seen[-1].text == "ping"

        earlier = s.fake.bot_message("an earlier answer")
        _, sent = await s.answer("ping", chat=GROUP, reply_to=earlier)
        assert sent["text"] == "pong"
        assert s.seen[-1].reply_to == str(earlier["message_id"]) and s.seen[-1].mentions_bot

        someone = s.fake.make_message("hi", chat=GROUP, sender=OTHER)
        await s.fake.message("ping", chat=GROUP, reply_to=someone)
        await s.fake.nothing_sent()
        assert s.seen[-1].reply_to == str(someone["message_id"])
        assert s.seen[-1].mentions_bot is False


async def test_commands_for_this_bot_are_normalised_and_others_ignored() -> None:
    async with served() as s:
        text = f"/start@{BOT_USERNAME}"
        _, sent = await s.answer(text, chat=GROUP, entities=command(text))
        assert sent["text"] == "welcome"
        assert (s.seen[-1].text, s.seen[-1].mentions_bot) == ("/start", True)

        seen = len(s.seen)
        text = "/start@otherbot"
        await s.fake.message(text, chat=GROUP, entities=command(text))
        await s.fake.nothing_sent()
        assert len(s.seen) == seen  # never reached the rules

        _, sent = await s.answer("/start", chat=GROUP, entities=command("/start"))
        assert sent["text"] == "welcome" and s.seen[-1].mentions_bot


async def test_bots_stickers_and_captions() -> None:
    async with served() as s:
        await s.fake.message("echo from a bot", sender={"id": 9, "is_bot": True, "first_name": "B"})
        await s.fake.message(None, new_chat_title="renamed")  # a service message: not for rules
        await s.fake.nothing_sent()
        assert s.seen == []
        sticker = {"file_id": "f", "file_unique_id": "u", "type": "regular", "width": 1,
                   "height": 1, "is_animated": False, "is_video": False, "emoji": "🙂"}  # fmt: skip
        await s.fake.message(None, sticker=sticker)  # no rule wants "[sticker]"
        await s.fake.nothing_sent()
        assert s.seen[-1].text == "[sticker]"
        assert s.seen[-1].attachments[0].as_dict() == {
            "kind": "sticker", "url": "", "file_id": "f", "size": None, "mime": "image/webp",
            "name": "🙂",
        }  # fmt: skip
        photo = [{"file_id": "p", "file_unique_id": "q", "width": 1, "height": 1}]
        _, sent = await s.answer(None, photo=photo, caption="echo a caption")
        assert sent["text"].endswith("|a caption")


async def test_a_failing_message_does_not_stop_the_adapter() -> None:
    async with served() as s:
        s.fail_next = True
        await s.fake.message("echo one")
        await s.fake.nothing_sent()
        _, sent = await s.answer("echo two")
        assert sent["text"].endswith("|two")
        assert s.adapter.health()["state"] == "connected"


# -- outbound ----------------------------------------------------------------------------------


async def test_flood_wait_is_honoured_and_the_reply_delivered_once(log_file: Path) -> None:
    async with served() as s:
        s.fake.flood = [1]
        await s.fake.message("echo flood")
        sent = await s.fake.next_sent()
        assert sent["text"].endswith("|flood")
        calls = [params for _, method, params in s.fake.calls if method == "sendMessage"]
        assert len(calls) == 2 and len(s.fake.sent) == 1
        assert calls[1]["text"] == calls[0]["text"]  # the refused piece, sent again
    # the wait the adapter took before the retry is the one the 429 asked for
    waits = [e for e in read_log(log_file) if e["event"] == "telegram.flood_wait"]
    assert [(w["chat"], w["retry_after"]) for w in waits] == [(sent["chat_id"], 1)]


async def until(condition: Any, timeout: float = 10.0) -> None:
    """Wait until ``condition()`` holds (state that settles asynchronously)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def dropped(what: str) -> float:
    """tmy_chat_dropped{adapter="telegram", what=…} so far."""
    labels = {"adapter": "telegram", "what": what}
    return metrics.REGISTRY.get_sample_value("tmy_chat_dropped_total", labels) or 0.0


@pytest.mark.slow  # real waits: Telegram's retry_after
async def test_a_flood_limited_chat_cannot_starve_the_others(
    log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a small bound on what is held, so the flood would reach it if waiting replies counted
    monkeypatch.setattr(telegram_mod, "MAX_PENDING", 30)
    before, before_msg = dropped("reply"), dropped("message")
    async with served(max_pending_per_chat=5) as s:
        s.fake.flood_chats[GROUP["id"]] = 3  # Telegram refuses every send to this group: 429
        for i in range(60):
            await s.fake.message(f"echo flooded{i}", chat=GROUP)
        await s.fake.wait_for_call("sendMessage")
        for n in range(10):  # then ten other chats, one message each: all answered
            who = {"id": 9000 + n, "is_bot": False, "first_name": f"P{n}"}
            await s.fake.message(f"echo probe{n}", sender=who)
        got = {(await s.fake.next_sent(timeout=3))["text"].rsplit("|", 1)[1] for _ in range(10)}
        assert got == {f"probe{n}" for n in range(10)}
        # the flooded group's replies wait in its own queue, bounded; the older ones were dropped
        await until(lambda: len(s.seen) + dropped("message") - before_msg == 70)
        ran = len(s.seen) - 10  # a burst beyond the chat's runs + 5 waiting was dropped unrun
        assert s.adapter.health()["waiting"]["replies"] <= 5
        await until(lambda: dropped("reply") - before >= ran - 5 - 1)  # 1: waiting out its 429
        s.fake.flood_chats.clear()  # so that stop() need not wait out the rest
    lines = [e for e in read_log(log_file) if e["event"] == "telegram.chat_dropped"]
    assert lines and {(e["adapter"], e["chat"]) for e in lines} == {("telegram", str(GROUP["id"]))}


@pytest.mark.slow  # real waits: Telegram's retry_after
async def test_endless_flood_gives_up_after_bounded_retries() -> None:
    async with served() as s:
        s.fake.flood = [1, 1, 1, 1, 1]
        with pytest.raises(AdapterError, match=r"error_code 429"):
            await s.adapter.send(Target("telegram", "777"), "hello")
        assert s.fake.count("sendMessage") == 4  # the first try and 3 retries


@pytest.mark.timeout(30)
async def test_long_reply_is_split_into_messages_of_at_most_4096() -> None:
    async with served() as s:
        msg, first = await s.answer("long")
        second = await s.fake.next_sent()
        assert [len(first["text"]), len(second["text"])] == [4096, 4]
        assert first["reply_parameters"]["message_id"] == msg["message_id"]
        assert "reply_parameters" not in second
        await s.fake.nothing_sent()


def test_split_prefers_line_breaks_and_counts_utf16() -> None:
    text = ("y" * 99 + "\n") * 60  # 6,000 characters in lines of 100
    pieces = split_text(text)
    assert [len(p) for p in pieces] == [3999, 2000]  # cut on the last line break that fits
    assert pieces[0].endswith("y") and "\n".join(pieces) == text
    emoji = "🙂" * 3000  # 2 UTF-16 units each: at most 2,048 per message
    assert [len(p) for p in split_text(emoji)] == [2048, 952]
    words = "word " * 1000
    assert all(len(p) <= MAX_TEXT and not p.startswith(" ") for p in split_text(words))
    assert split_text("   \n  ") == []


async def test_send_to_a_target_and_its_errors() -> None:
    async with served() as s:
        await s.adapter.send(Target("telegram", str(GROUP["id"])), "from cron")
        sent = await s.fake.next_sent()
        assert (sent["chat_id"], sent["text"]) == ("-100500", "from cron")
        assert "reply_parameters" not in sent
        await s.adapter.send(Target("telegram", "", user="777"), "to a user")
        assert (await s.fake.next_sent())["chat_id"] == "777"

        with pytest.raises(AdapterError, match="chat id"):
            await s.adapter.send(Target("telegram", "group:1"), "x")
        with pytest.raises(AdapterError, match="empty"):
            await s.adapter.send(Target("telegram", "777"), "  ")
        s.fake.fail_send = [(400, "Bad Request: chat not found")]
        with pytest.raises(AdapterError, match=r"error_code 400.*chat not found"):
            await s.adapter.send(Target("telegram", "42"), "x")
        s.fake.fail_send = [(403, "Forbidden: bot was blocked by the user")]
        with pytest.raises(AdapterError, match=r"error_code 403.*blocked"):
            await s.adapter.send(Target("telegram", "42"), "x")
        s.fake.fail_send = [
            (400, "Bad Request: group chat was upgraded to a supergroup chat",
             {"migrate_to_chat_id": -1001234})
        ]  # fmt: skip
        await s.adapter.send(Target("telegram", "-1234"), "followed")
        assert (await s.fake.next_sent())["chat_id"] == "-1001234"
        # the daemon keeps serving
        _, sent = await s.answer("echo still here")
        assert sent["text"].endswith("|still here")


async def test_send_before_connecting_is_an_adapter_error() -> None:
    adapter = TelegramAdapter(TelegramConfig(), token="")
    with pytest.raises(AdapterError, match="not connected"):
        await adapter.send(Target("telegram", "1"), "x")


# -- tokens, reconnects, stop --------------------------------------------------------------------


async def test_bad_token_fails_the_adapter_without_raising() -> None:
    async with FakeTelegram() as fake:
        adapter = make_adapter(fake.base, token="999:wrong")
        await adapter.start(_no_handle)  # must not raise
        await wait_state(adapter, "failed")
        error = adapter.health()["error"]
        assert "401" in error and "TELEGRAM_TOKEN" in error and "wrong" not in error
        await asyncio.sleep(0.2)
        assert fake.count("getUpdates") == 0  # a refused token is not retried
        await adapter.stop()
        assert adapter.health()["state"] == "failed"


async def test_missing_or_malformed_token_fails_clearly() -> None:
    missing = TelegramAdapter(TelegramConfig(token_env="MY_TG"), token="")
    await missing.start(_no_handle)
    assert missing.health()["state"] == "failed"
    assert "MY_TG" in missing.health()["error"]
    malformed = TelegramAdapter(TelegramConfig(), token="not a token")
    await malformed.start(_no_handle)
    assert malformed.health()["state"] == "failed"
    assert "malformed" in malformed.health()["error"]
    await missing.stop()
    await malformed.stop()


async def test_network_errors_reconnect_and_messages_flow_again() -> None:
    with socket.socket() as sock:  # a port nobody listens on (yet)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(f"http://127.0.0.1:{port}")
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "reconnecting")
            assert "getMe" in adapter.health()["error"]
            fake = await FakeTelegram().start(port)
            try:
                await wait_state(adapter, "connected")
                await fake.message("echo back")
                assert (await fake.next_sent())["text"].endswith("|back")
                await fake.stop()  # the API goes away while polling
                await wait_state(adapter, "reconnecting")
                await fake.start(port)
                await wait_state(adapter, "connected")
                await fake.message("echo again")
                assert (await fake.next_sent())["text"].endswith("|again")
            finally:
                await fake.stop()
        finally:
            await adapter.stop()
    assert adapter.health()["state"] == "stopped"


async def test_a_restart_does_not_replay_answered_updates() -> None:
    async with FakeTelegram() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(fake.base)
        await adapter.start(bot.engine.handle)
        await fake.message("echo once")
        await fake.next_sent()
        await adapter.stop()
        assert fake.updates == []  # confirmed to Telegram
        again = make_adapter(fake.base)
        await again.start(bot.engine.handle)
        try:
            await wait_state(again, "connected")
            await fake.nothing_sent(0.5)
        finally:
            await again.stop()
        assert fake.count("deleteWebhook") == 2  # polling clears any webhook first


# -- webhook -----------------------------------------------------------------------------------


@asynccontextmanager
async def webhook_served(secret: str = "s3cret-token") -> AsyncIterator[tuple[Served, str]]:
    async with FakeTelegram() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(
            fake.base,
            mode="webhook",
            webhook_url="https://bot.example.org/telegram/webhook",
            webhook_secret=secret,
        )
        s = Served(fake, adapter, bot)
        http = HttpAdapter("127.0.0.1:0")
        http.mount(adapter.routes())
        await http.start(s.handle)
        await adapter.start(s.handle)
        try:
            await wait_state(adapter, "connected")
            yield s, f"http://127.0.0.1:{http.port}/telegram/webhook"
        finally:
            await adapter.stop()
            await http.stop()


async def test_webhook_mode_sets_the_webhook_and_checks_the_secret() -> None:
    async with webhook_served() as (s, url):
        hook = await s.fake.wait_for_call("setWebhook")
        assert hook["url"] == "https://bot.example.org/telegram/webhook"
        assert hook["secret_token"] == "s3cret-token"
        assert hook["allowed_updates"] == [
            "message",
            "message_reaction",
            "callback_query",
            "chat_join_request",
        ]
        assert s.fake.count("getUpdates") == 0
        update = {"update_id": 1, "message": s.fake.make_message("echo hooked", message_id=42)}
        async with aiohttp.ClientSession() as session:
            good = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}
            async with session.post(url, json=update, headers=good) as resp:
                assert resp.status == 200
            sent = await s.fake.next_sent()
            assert sent["text"].endswith("|hooked")
            assert sent["reply_parameters"]["message_id"] == 42
            async with session.post(url, json=update, headers=good) as resp:  # redelivered
                assert resp.status == 200
            await s.fake.nothing_sent()
            bad = {"X-Telegram-Bot-Api-Secret-Token": "wrong"}
            update2 = {"update_id": 2, "message": s.fake.make_message("echo evil")}
            async with session.post(url, json=update2, headers=bad) as resp:
                assert resp.status == 403
            async with session.post(url, json=update2) as resp:
                assert resp.status == 401
            async with session.post(url, data=b"{not json", headers=good) as resp:
                assert resp.status == 400
            await s.fake.nothing_sent()
        assert len(s.seen) == 1


async def test_webhook_without_a_configured_secret_gets_a_random_one() -> None:
    async with webhook_served(secret="") as (s, _):
        hook = await s.fake.wait_for_call("setWebhook")
        assert len(hook["secret_token"]) >= 32


# -- settings and the daemon --------------------------------------------------------------------


def test_max_pending_per_chat_is_read_from_the_config_file_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text("adapters:\n  telegram: {enabled: true, max_pending_per_chat: 7}\n")
    settings = load_settings(config=str(config), env={}, rules=str(tmp_path))
    adapter = from_settings(settings, env={})
    assert adapter is not None and adapter.config.max_pending_per_chat == 7
    assert TelegramConfig().max_pending_per_chat == 20
    for bad in (0, "5", True, 10**6):
        with pytest.raises(ConfigError, match="max_pending_per_chat"):
            TelegramConfig.from_section({"max_pending_per_chat": bad})


def test_from_settings(tmp_path: Path) -> None:
    settings = load_settings(env={}, rules=str(tmp_path))
    assert from_settings(settings) is None
    on = settings.with_(adapters={"telegram": {"enabled": True, "token_env": "TG"}})
    adapter = from_settings(on, env={"TG": " 1:abc "})
    assert adapter is not None and adapter.token == "1:abc"
    assert adapter.config.api_base == "https://api.telegram.org"
    assert adapter.config.mode == "polling" and adapter.routes() == []
    assert from_settings(on, env={}).token == ""  # not a config error: "failed" at start
    with pytest.raises(ConfigError, match="webhook_url"):
        from_settings(
            settings.with_(adapters={"telegram": {"enabled": True, "mode": "webhook"}}), env={}
        )
    with pytest.raises(ConfigError, match="webhook_secret"):
        from_settings(
            settings.with_(adapters={"telegram": {"enabled": True, "webhook_secret": "a b"}}),
            env={},
        )
    with pytest.raises(ConfigError, match="api_base"):
        from_settings(
            settings.with_(adapters={"telegram": {"enabled": True, "api_base": "api.x"}}), env={}
        )


def test_addressing_rules() -> None:
    def ents(*items: tuple[str, str, str]) -> list[Any]:
        from aiogram.types import MessageEntity

        return [MessageEntity(**entity(t, part, kind)) for t, part, kind in items]

    t = "@Tmy_Test_Bot, translate this"
    assert read_addressing(t, ents((t, "@Tmy_Test_Bot", "mention")), BOT_ID, BOT_USERNAME) == (
        "translate this",
        True,
    )
    t = "hi @tmy_test_bot there"
    assert read_addressing(t, ents((t, "@tmy_test_bot", "mention")), BOT_ID, BOT_USERNAME) == (
        "hi there",
        True,
    )
    t = "/help@tmy_test_bot me"
    assert read_addressing(t, ents((t, "/help@tmy_test_bot", "bot_command")), BOT_ID,
                           BOT_USERNAME) == ("/help me", True)  # fmt: skip
    t = "/help@other_bot"
    assert read_addressing(t, ents((t, t, "bot_command")), BOT_ID, BOT_USERNAME) == (None, False)
    t = "see /help@other_bot"  # not a command to anyone: left as it is
    assert read_addressing(t, ents((t, "/help@other_bot", "bot_command")), BOT_ID,
                           BOT_USERNAME) == (t, False)  # fmt: skip


async def test_the_daemon_serves_telegram_and_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(RULES)
    async with FakeTelegram() as fake:
        monkeypatch.setenv("TELEGRAM_TOKEN", TOKEN)
        settings = load_settings(
            env={},
            rules=str(rules),
            plugins=str(tmp_path / "none"),
            store=f"sqlite:///{tmp_path / 'tmy.db'}",
            http_listen="127.0.0.1:0",
            console=False,
            adapters={"telegram": {"enabled": True, "api_base": fake.base}},
        )
        async with serving(settings=settings) as daemon:
            await fake.message("echo via daemon")
            assert (await fake.next_sent())["text"].endswith("|via daemon")
            await daemon.send(Target("telegram", "-100500"), "from the daemon")
            assert (await fake.next_sent())["chat_id"] == "-100500"
            async with httpx.AsyncClient() as client:
                url = f"http://127.0.0.1:{daemon.http.port}/healthz"
                report = (await client.get(url)).json()
            tg = report["adapters"]["telegram"]
            assert tg["state"] == "connected" and tg["username"] == BOT_USERNAME


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")
