"""OneBot v11: a fake NapCat against the reverse endpoint, and a fake server for forward mode.

Everything runs on loopback with the real engine and store: the fake
implementation (tests/support/onebot_fake.py) pushes message events in both formats
and answers ``send_msg`` the way NapCat does; the tests read what tmy sent.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from tests.support.log_helpers import read_log
from tests.support.onebot_fake import (
    SELF_ID,
    FailingServer,
    FakeImpl,
    FakeServer,
    at,
    connect_reverse,
    meta,
    text,
)
from tmy import metrics
from tmy.adapters.http import HttpAdapter
from tmy.adapters.onebot import OneBotAdapter, OneBotConfig, from_settings
from tmy.adapters.onebot import adapter as onebot_adapter
from tmy.adapters.onebot.codec import (
    escape,
    parse_cq,
    read_message,
    reply_segments,
    segments_of,
    split_text,
    unescape,
)
from tmy.config import load_settings
from tmy.errors import AdapterError, ConfigError
from tmy.message import Message, Reply, Target
from tmy.testing import Bot, serving

RULES = """
variables:
  hits: {scope: global, default: 0}
  secret: {scope: user, default: "none"}
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
  - id: hit
    triggers: [hit]
    steps:
      - {plugin: ADJUST, input: "?= hits + 1", save: hits}
  - id: long
    triggers: [long]
    steps:
      - {plugin: ADJUST, input: "?= 'x' * 3500"}
  - id: keep
    triggers: ["keep *"]
    steps:
      - {plugin: ADJUST, input: "{QUESTION}", save: secret}
  - id: tell
    triggers: [tell]
    steps:
      - {plugin: ADJUST, input: "{USER}:{secret}"}
"""


def sent_text(action: dict[str, Any]) -> str:
    """The text of a send_msg action's segments."""
    return "".join(s["data"]["text"] for s in action["params"]["message"] if s["type"] == "text")


class Served:
    """An adapter on a real HTTP listener; ``seen`` keeps each Message the engine got."""

    def __init__(self, bot: Bot, adapter: OneBotAdapter, http: HttpAdapter) -> None:
        self.bot = bot
        self.adapter = adapter
        self.http = http
        self.seen: list[Message] = []
        self.blocked: set[str] = set()  # chats whose runs hang until ``release`` is set
        self.failing: set[str] = set()  # chats whose runs raise (a bug in a run)
        self.release = asyncio.Event()
        self.session = aiohttp.ClientSession()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.http.port}{self.adapter.config.path}"

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        if message.chat in self.failing:
            raise RuntimeError("a bug in the run")
        if message.chat in self.blocked:
            await self.release.wait()  # a slow rule (an LLM that takes its time)
        return await self.bot.engine.handle(message)

    async def connect(self, self_id: int = SELF_ID, **kw: Any) -> FakeImpl:
        impl = await connect_reverse(self.session, self.url, self_id, **kw)
        await until(lambda: str(self_id) in self.adapter.health()["self_ids"])
        return impl


async def until(condition: Any, timeout: float = 5.0) -> None:
    """Wait until ``condition()`` holds (state that settles asynchronously)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@asynccontextmanager
async def reverse(bot: Bot, shutdown_grace: float = 5, **config: Any) -> AsyncIterator[Served]:
    adapter = OneBotAdapter(
        OneBotConfig(**config), store=bot.app.store, shutdown_grace=shutdown_grace
    )
    http = HttpAdapter("127.0.0.1:0")
    http.mount(adapter.routes())
    served = Served(bot, adapter, http)
    await adapter.start(served.handle)
    await http.start(bot.engine.handle)
    try:
        yield served
    finally:
        await adapter.stop()
        await http.stop()
        await served.session.close()


@pytest.fixture
async def bot() -> AsyncIterator[Bot]:
    async with Bot({"ob.yaml": RULES}) as b:
        yield b


@pytest.fixture
async def served(bot: Bot) -> AsyncIterator[Served]:
    async with reverse(bot, send_interval=0) as s:
        yield s


# -- messages in, replies out ----------------------------------------------------------------


async def test_group_message_in_array_format_is_answered_with_send_msg(served: Served) -> None:
    impl = await served.connect()
    await impl.group([text("echo hello world")], group=30003, user=20002, message_id=555)
    action = await impl.next_action()
    assert action["action"] == "send_msg"
    assert isinstance(action["echo"], str) and action["echo"]
    assert action["params"] == {
        "message_type": "group",
        "group_id": 30003,
        "message": [{"type": "text", "data": {"text": "onebot|group:30003|20002|Ann|hello world"}}],
    }
    (message,) = served.seen
    assert (message.platform, message.chat, message.user, message.user_name) == (
        "onebot",
        "group:30003",
        "20002",
        "Ann",
    )
    assert message.private is False
    assert message.self_id == str(SELF_ID)
    assert message.message_id == "555"
    assert message.raw["group_id"] == 30003


async def test_private_message_in_cq_string_format_is_unescaped_and_answered(
    served: Served,
) -> None:
    impl = await served.connect()
    await impl.private("echo a&#91;1&#93; &amp; b&#44;c [CQ:face,id=178]", user=20002)
    action = await impl.next_action()
    assert action["params"]["message_type"] == "private"
    assert action["params"]["user_id"] == 20002
    assert "group_id" not in action["params"]
    # the nickname names a private sender; a face becomes a placeholder in the text
    assert sent_text(action) == "onebot|private:20002|20002|ann_nick|a[1] & b,c [face]"
    (message,) = served.seen
    assert message.private is True
    assert message.raw["message"].endswith("[CQ:face,id=178]")


async def test_group_message_in_cq_string_format(served: Served) -> None:
    impl = await served.connect()
    await impl.group("echo pic [CQ:image,file=a.jpg,url=http://x/a.jpg?a=1&amp;b=2]", group=7)
    action = await impl.next_action()
    assert action["params"]["group_id"] == 7
    assert sent_text(action) == "onebot|group:7|20002|Ann|pic [image]"
    assert served.seen[0].text == "echo pic [image]"


async def test_at_mention_is_stripped_and_satisfies_mention_rules(served: Served) -> None:
    impl = await served.connect()
    await impl.group([at(SELF_ID), text(" ping")], message_id=1)
    assert sent_text(await impl.next_action()) == "pong"
    first = served.seen[0]
    assert first.text == "ping"
    assert first.mentions_bot is True
    # the same in a CQ string, @ at the end
    await impl.group(f"ping[CQ:at,qq={SELF_ID}]", message_id=2)
    assert sent_text(await impl.next_action()) == "pong"


async def test_without_the_at_a_mention_rule_stays_silent_in_groups(served: Served) -> None:
    impl = await served.connect()
    await impl.group([text("ping")], message_id=1)
    await impl.group([at(99999), text(" ping")], message_id=2)  # someone else
    await impl.group([at("all"), text(" ping")], message_id=3)  # @all is not the bot
    await impl.no_action(0.3)
    assert [m.mentions_bot for m in served.seen] == [False, False, False]
    assert served.seen[1].text == "@99999 ping"
    assert served.seen[2].text == "@all ping"


async def test_a_private_message_is_always_addressed_to_the_bot(served: Served) -> None:
    impl = await served.connect()
    await impl.private([text("ping")])
    assert sent_text(await impl.next_action()) == "pong"


async def test_a_reply_to_the_bots_message_counts_as_a_mention(served: Served) -> None:
    impl = await served.connect()
    await impl.group("echo first", message_id=1)
    await impl.next_action()  # the fake answered with message_id 9001
    reply = [{"type": "reply", "data": {"id": "9001"}}, text("ping")]  # no @ of the bot
    await impl.group(reply, message_id=2)
    assert sent_text(await impl.next_action()) == "pong"
    message = served.seen[1]
    assert (message.reply_to, message.mentions_bot, message.text) == ("9001", True, "ping")
    # quoting someone else's message (QQ adds that author's @) is no mention
    other = [{"type": "reply", "data": {"id": "42"}}, at(777), text(" ping")]
    await impl.group(other, message_id=3)
    await impl.no_action(0.3)
    assert (served.seen[2].reply_to, served.seen[2].mentions_bot) == ("42", False)
    assert served.seen[2].text == "ping"


async def test_quote_reply_and_at_sender_options(bot: Bot) -> None:
    async with reverse(bot, send_interval=0, quote_reply=True, at_sender=True) as served:
        impl = await served.connect()
        await impl.group("echo x", message_id=321, user=20002)
        assert (await impl.next_action())["params"]["message"] == [
            {"type": "reply", "data": {"id": "321"}},
            {"type": "at", "data": {"qq": "20002"}},
            {"type": "text", "data": {"text": " onebot|group:30003|20002|Ann|x"}},
        ]
        await impl.private("echo y")  # neither in private chats
        assert [s["type"] for s in (await impl.next_action())["params"]["message"]] == ["text"]


async def test_a_long_reply_goes_out_as_several_messages(served: Served) -> None:
    impl = await served.connect()
    await impl.group("long")
    first, second = await impl.next_action(), await impl.next_action()
    assert len(sent_text(first)) + len(sent_text(second)) == 3500


async def test_meta_events_are_consumed_silently(served: Served) -> None:
    impl = await served.connect()
    assert served.adapter.health()["last_event"] is None
    await impl.lifecycle()
    await impl.send(meta(SELF_ID, "heartbeat", status={"online": True}, interval=5000))
    await impl.send({"post_type": "notice", "notice_type": "group_increase", "self_id": SELF_ID})
    await until(lambda: served.adapter.health()["last_event"] is not None)
    await impl.no_action(0.2)
    assert served.seen == []


async def test_malformed_frames_do_not_break_the_connection(served: Served) -> None:
    impl = await served.connect()
    await impl.ws.send_str("{not json")
    await impl.ws.send_str("[1, 2]")
    await impl.send({"post_type": "message", "message_type": "group", "user_id": 1})  # no group
    await impl.send({"post_type": "message", "message_type": "private", "user_id": SELF_ID,
                     "message": "echo me", "message_id": 5})  # fmt: skip  # the bot's own
    await impl.group([{"type": "text"}, "junk", {"type": "text", "data": {"text": "echo ok"}}])
    assert sent_text(await impl.next_action()) == "onebot|group:30003|20002|Ann|ok"


# -- the handshake -----------------------------------------------------------------------------


async def test_a_missing_or_wrong_token_is_refused_before_the_upgrade(bot: Bot) -> None:
    async with reverse(bot, access_token="s3cret") as served:
        with pytest.raises(aiohttp.WSServerHandshakeError) as missing:
            await connect_reverse(served.session, served.url)
        assert missing.value.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError) as wrong:
            await connect_reverse(served.session, served.url, token="s3creT")
        assert wrong.value.status == 403
        with pytest.raises(aiohttp.WSServerHandshakeError) as wrong_query:
            await connect_reverse(served.session, served.url, query_token="nope")
        assert wrong_query.value.status == 403
        assert served.adapter.health()["self_ids"] == []
        by_header = await served.connect(token="s3cret")
        await by_header.group("echo a")
        assert sent_text(await by_header.next_action()).endswith("|a")
        by_query = await served.connect(10002, query_token="s3cret")
        await by_query.group("echo b")
        assert sent_text(await by_query.next_action()).endswith("|b")


async def test_self_id_and_role_are_checked(served: Served) -> None:
    async with served.session.get(served.url, headers={"X-Client-Role": "Universal"}) as r:
        assert r.status == 400
        assert "X-Self-ID" in (await r.json())["error"]
    with pytest.raises(aiohttp.WSServerHandshakeError) as bad_id:
        await connect_reverse(served.session, served.url, "10001/../x")  # type: ignore[arg-type]
    assert bad_id.value.status == 400
    with pytest.raises(aiohttp.WSServerHandshakeError) as api_only:
        await connect_reverse(served.session, served.url, role="API")
    assert api_only.value.status == 400
    no_role = await served.connect(role=None)  # taken as Universal
    await no_role.private("echo r")
    assert sent_text(await no_role.next_action()).endswith("|r")
    async with served.session.get(served.url, headers={"X-Self-ID": "1"}) as plain:
        assert plain.status == 400  # not a WebSocket upgrade


# -- connections -----------------------------------------------------------------------------


async def test_a_new_connection_for_an_account_replaces_the_old_one(served: Served) -> None:
    old = await served.connect()
    new = await connect_reverse(served.session, served.url, SELF_ID)
    await asyncio.wait_for(old.closed.wait(), 5)
    assert served.adapter.health()["self_ids"] == [str(SELF_ID)]
    await new.group("echo again")
    assert sent_text(await new.next_action()).endswith("|again")
    assert old.actions == []


async def test_two_accounts_at_once(served: Served) -> None:
    first = await served.connect(10001)
    second = await served.connect(10002)
    assert served.adapter.health()["self_ids"] == ["10001", "10002"]
    await second.group("echo two", message_id=1)
    await first.group("echo one", message_id=1)  # same id, other account: not a duplicate
    assert sent_text(await first.next_action()).endswith("|one")
    assert sent_text(await second.next_action()).endswith("|two")
    assert {m.self_id for m in served.seen} == {"10001", "10002"}
    # on its own initiative: the most recently connected account sends
    await served.adapter.send(Target("onebot", "group:5"), "notice")
    action = await second.next_action()
    assert action["params"] == {
        "message_type": "group",
        "group_id": 5,
        "message": [{"type": "text", "data": {"text": "notice"}}],
    }
    await served.adapter.send(Target("onebot", "", user="20002"), "psst")
    assert (await second.next_action())["params"]["user_id"] == 20002
    await first.no_action(0.1)


async def test_send_errors_are_clear(served: Served) -> None:
    with pytest.raises(AdapterError, match="onebot: no bot account connected"):
        await served.adapter.send(Target("onebot", "group:1"), "x")
    impl = await served.connect()
    with pytest.raises(AdapterError, match="'group:<id>' or 'private:<id>'"):
        await served.adapter.send(Target("onebot", "channel:1"), "x")
    with pytest.raises(AdapterError, match="empty"):
        await served.adapter.send(Target("onebot", "group:1"), "  ")
    impl.fail_with.append(1404)
    with pytest.raises(AdapterError, match="retcode 1404"):
        await served.adapter.send(Target("onebot", "private:2"), "x")


@pytest.mark.slow  # real waits: heartbeat timeouts, floods, reconnects
async def test_a_silent_connection_is_closed_after_heartbeat_timeout(bot: Bot) -> None:
    async with reverse(bot, heartbeat_timeout=0.5) as served:
        # a half-open peer: never reads, so never answers tmy's ping
        ws = await served.session.ws_connect(
            served.url, headers={"X-Self-ID": "10001"}, autoping=False
        )
        await until(lambda: served.adapter.health()["self_ids"] == ["10001"])
        # what the peer sees: a probe (a ping after half the timeout, unanswered), then
        # the close, saying why — not a close before the peer was given its chance
        async with asyncio.timeout(10):
            probe = await ws.receive()
            closing = await ws.receive()
        assert probe.type == aiohttp.WSMsgType.PING
        assert closing.type == aiohttp.WSMsgType.CLOSE
        assert closing.extra == "no frame for 0.5 s (the peer is gone)"
        await until(lambda: served.adapter.health()["self_ids"] == [], timeout=5)
        assert served.adapter.health()["state"] == "reconnecting"
        await ws.close()
        # a live peer with OneBot heartbeats off stays: its WebSocket answers the pings
        alive = await served.connect(10002)
        await asyncio.sleep(1.5)
        assert served.adapter.health()["self_ids"] == ["10002"]
        await alive.private("echo still here")
        assert sent_text(await alive.next_action()).endswith("|still here")


async def test_a_failed_action_is_logged_and_the_daemon_keeps_serving(
    served: Served, log_file: Path
) -> None:
    impl = await served.connect()
    impl.fail_with.append(100)
    await impl.group("echo first", message_id=1)
    await impl.next_action()  # answered with retcode 100
    await impl.group("echo second", message_id=2)
    assert sent_text(await impl.next_action()).endswith("|second")
    failures = [e for e in read_log(log_file) if e["event"] == "onebot.send_failed"]
    assert len(failures) == 1
    assert failures[0]["retcode"] == 100
    assert failures[0]["chat"] == "group:30003"
    assert "retcode 100" in failures[0]["error"]


async def test_a_run_that_raises_is_logged_with_its_message_and_the_next_is_answered(
    served: Served, log_file: Path
) -> None:
    impl = await served.connect()
    served.failing.add("group:30003")
    await impl.group("echo first", message_id=41)
    await until(lambda: len(served.seen) == 1)
    served.failing.clear()
    await impl.group("echo second", message_id=42)
    assert sent_text(await impl.next_action()).endswith("|second")
    failures = [e for e in read_log(log_file) if e["event"] == "onebot.message_failed"]
    assert [(f["self_id"], f["message_id"]) for f in failures] == [(str(SELF_ID), "41")]
    assert "a bug in the run" in failures[0]["exception"]


async def test_an_unanswered_action_times_out(bot: Bot, log_file: Path) -> None:
    async with reverse(bot, action_timeout=0.3) as served:
        ws = await served.session.ws_connect(served.url, headers={"X-Self-ID": "10001"})
        await until(lambda: served.adapter.health()["self_ids"] == ["10001"])
        with pytest.raises(AdapterError, match=r"send_msg got no answer within 0\.3 s"):
            await served.adapter.send(Target("onebot", "group:1"), "x")
        await ws.close()


async def test_replies_to_one_group_are_paced_but_other_groups_are_not(bot: Bot) -> None:
    # an interval no slow machine reaches: group 1's second reply is held for all of the
    # test, and dropped at stop (a short shutdown grace)
    async with reverse(bot, send_interval=60, shutdown_grace=0.1) as served:
        impl = await served.connect()
        await impl.group("echo a1", group=1, message_id=1)
        assert sent_text(await impl.next_action()).endswith("|a1")
        await impl.group("echo a2", group=1, message_id=2)
        await until(lambda: served.adapter.health()["waiting"]["replies"] == 1)  # a2, held
        await impl.group("echo b1", group=2, message_id=3)
        # group 2 does not wait for group 1's turn
        assert sent_text(await impl.next_action()).endswith("|b1")
        assert served.adapter.health()["waiting"]["replies"] == 1  # a2 still waits
        await impl.no_action(0.2)


# -- one busy chat cannot starve the others ------------------------------------------------


def dropped(what: str) -> float:
    """tmy_chat_dropped{adapter="onebot", what=…} so far."""
    labels = {"adapter": "onebot", "what": what}
    return metrics.REGISTRY.get_sample_value("tmy_chat_dropped_total", labels) or 0.0


def to_group(group: int, marker: str) -> Any:
    """A predicate: a send_msg to ``group`` whose text ends with ``marker``."""
    return lambda f: f["params"].get("group_id") == group and sent_text(f).endswith(marker)


@pytest.mark.slow  # real waits: heartbeat timeouts, floods, reconnects
async def test_a_flooded_group_cannot_starve_the_others(
    bot: Bot, log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a small adapter-wide bound so the flood would reach it quickly if paced replies counted
    monkeypatch.setattr(onebot_adapter, "MAX_WAITING", 40)
    before, before_msg = dropped("reply"), dropped("message")
    async with reverse(bot, send_interval=0.1) as served:
        impl = await served.connect()
        flood = iter(range(300))
        for g in range(2, 7):
            for i in itertools.islice(flood, 60):  # group 1 floods; replies go out every 0.1 s
                await impl.group(f"echo f{i}", group=1, message_id=i)
            # a probe from each other group, sent right behind the flood, is answered
            await impl.group(f"echo probe{g}", group=g, message_id=1000 + g)
            await impl.action_where(to_group(g, f"|probe{g}"), timeout=3)
            # group 1's queue stays bounded by max_pending_per_chat (default 20)
            assert served.adapter.health()["waiting"]["replies"] <= 20
        # each message ran or was dropped waiting; each reply was sent, waits, or was dropped
        inbound = served.adapter._inbound

        def ran() -> int:
            return len(served.seen) + int(dropped("message") - before_msg)

        await until(lambda: ran() == 305 and inbound.in_flight == 0, timeout=30)
        waiting = served.adapter.health()["waiting"]["replies"]
        assert 0 < waiting <= 20
        gone = len(served.seen) - len(impl.actions) - waiting - (dropped("reply") - before)
        assert gone in (0, 1)  # 1: a send in flight
    lines = [e for e in read_log(log_file) if e["event"] == "onebot.chat_dropped"]
    assert lines, "drops are logged"
    assert {(e["adapter"], e["chat"], e["account"]) for e in lines} == {
        ("onebot", "group:1", str(SELF_ID))
    }
    replies = [e for e in lines if e["what"] == "reply"]
    assert replies and sum(e["dropped"] for e in replies) <= dropped("reply") - before


async def test_a_group_whose_runs_hang_leaves_run_slots_to_the_others(
    bot: Bot, log_file: Path
) -> None:
    before = dropped("message")
    async with reverse(bot, send_interval=0, max_pending_per_chat=3) as served:
        served.blocked.add("group:1")
        impl = await served.connect()
        for i in range(100):  # more than MAX_RUNS: all would hang if one chat could take them
            await impl.group(f"echo slow{i}", group=1, message_id=i)
        await until(
            lambda: dropped("message") - before >= 100 - 3 - onebot_adapter.MAX_RUNS_PER_CHAT
        )
        assert served.adapter.health()["waiting"]["messages"] == 3
        await impl.group("echo probe", group=2, message_id=500)
        await impl.action_where(to_group(2, "|probe"), timeout=3)
        served.release.set()
        # the newest waiting ones survived the cap: the last message is answered
        await impl.action_where(to_group(1, "|slow99"), timeout=5)
    lines = [e for e in read_log(log_file) if e["event"] == "onebot.chat_dropped"]
    assert lines and lines[0]["chat"] == "group:1" and lines[0]["what"] == "message"


async def test_max_pending_per_chat_is_checked(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text(
        "adapters:\n  onebot: {enabled: true, max_pending_per_chat: 7, anonymous: ignore}\n"
    )
    settings = load_settings(config=str(config), env={}, rules=str(tmp_path))
    adapter = from_settings(settings)
    assert adapter is not None
    assert (adapter.config.max_pending_per_chat, adapter.config.anonymous) == (7, "ignore")
    assert OneBotConfig.from_section({}).max_pending_per_chat == 20
    for bad in (0, -1, "5", True, 10**6):
        with pytest.raises(ConfigError, match="max_pending_per_chat"):
            OneBotConfig.from_section({"max_pending_per_chat": bad})


# -- anonymous group messages ------------------------------------------------------------------


async def test_anonymous_senders_are_keyed_on_their_anonymous_id(served: Served) -> None:
    impl = await served.connect()
    one = {"id": 4401, "name": "Bulbasaur", "flag": "f1"}
    two = {"id": 4402, "name": "Squirtle", "flag": "f2"}
    await impl.group("keep mine-only", group=30003, message_id=1, anonymous=one)
    await impl.next_action()
    await impl.group("tell", group=30004, message_id=2, anonymous=two)  # another group, too
    assert sent_text(await impl.next_action()) == "anonymous:4402:none"
    await impl.group("tell", group=30003, message_id=3, anonymous=one)
    assert sent_text(await impl.next_action()) == "anonymous:4401:mine-only"
    assert [m.user for m in served.seen] == ["anonymous:4401", "anonymous:4402", "anonymous:4401"]
    assert served.seen[0].user_name == "Bulbasaur"
    # without its anonymous object an anonymous message has no identity: it is not answered
    await impl.send({**served.seen[0].raw, "anonymous": {"name": "x"}, "message_id": 4})
    await impl.no_action(0.3)


async def test_anonymous_messages_can_be_ignored(bot: Bot) -> None:
    async with reverse(bot, send_interval=0, anonymous="ignore") as served:
        impl = await served.connect()
        await impl.group("tell", message_id=1, anonymous={"id": 1, "name": "a", "flag": "f"})
        await impl.group("echo named", message_id=2)
        assert sent_text(await impl.next_action()).endswith("|named")
        assert [m.user for m in served.seen] == ["20002"]
    with pytest.raises(ConfigError, match="anonymous"):
        OneBotConfig.from_section({"anonymous": "share"})


# -- de-duplication --------------------------------------------------------------------------


async def test_a_duplicated_message_id_runs_once(store_url: str) -> None:
    async with (
        Bot({"ob.yaml": RULES}, store=store_url) as bot,
        reverse(bot, send_interval=0) as one,
        reverse(bot, send_interval=0) as two,
    ):
        first = await one.connect()
        await first.group("hit", message_id=77)
        assert sent_text(await first.next_action()) == "1"
        await first.group("hit", message_id=77)  # replayed after a reconnect
        # the same account on a second transport (or a second daemon on the same store)
        other = await two.connect()
        await other.group("hit", message_id=77)
        await first.group("echo done", message_id=78)
        assert sent_text(await first.next_action()).endswith("|done")
        await first.no_action(0.2)
        await other.no_action(0)
        assert await bot.var("hits") == 1
        keys = await bot.app.store.keys("dedup/onebot/")
        assert f"dedup/onebot/{SELF_ID}/77" in keys


async def test_without_a_store_duplicates_are_caught_in_process() -> None:
    adapter = OneBotAdapter(OneBotConfig(send_interval=0))
    assert await adapter._first_delivery("1", "5") is True
    assert await adapter._first_delivery("1", "5") is False
    assert await adapter._first_delivery("2", "5") is True


# -- forward mode ----------------------------------------------------------------------------


@asynccontextmanager
async def forward(bot: Bot, server: FakeServer, **config: Any) -> AsyncIterator[OneBotAdapter]:
    adapter = OneBotAdapter(
        OneBotConfig(mode="forward", url=server.url, send_interval=0, **config),
        store=bot.app.store,
        shutdown_grace=5,
    )
    adapter.backoff_base, adapter.backoff_cap = 0.05, 0.2
    await adapter.start(bot.engine.handle)
    try:
        yield adapter
    finally:
        await adapter.stop()


async def test_forward_reconnects_after_the_server_drops_it(bot: Bot) -> None:
    async with FakeServer(token="tok") as server, forward(bot, server, access_token="tok") as ad:
        impl = await asyncio.wait_for(server.connections.get(), 5)
        assert server.auth_headers[-1] == "Bearer tok"
        await until(lambda: ad.health()["self_ids"] == [str(SELF_ID)])  # from the lifecycle
        assert ad.routes() == []
        await impl.group("echo one", message_id=1)
        assert sent_text(await impl.next_action()).endswith("|one")
        await impl.close()  # the implementation restarts
        again = await asyncio.wait_for(server.connections.get(), 5)
        await until(lambda: ad.health()["state"] == "connected" and ad.health()["self_ids"])
        await again.group("echo two", message_id=2)
        assert sent_text(await again.next_action()).endswith("|two")
        assert ad.health()["mode"] == "forward"


async def test_forward_with_a_wrong_token_keeps_retrying_and_says_why(bot: Bot) -> None:
    async with FakeServer(token="right") as server, forward(bot, server, access_token="bad") as ad:
        await until(lambda: len(server.auth_headers) >= 2)
        health = ad.health()
        assert health["state"] == "reconnecting"
        assert "HTTP 403" in health["error"]
        assert "access_token" in health["error"]


@pytest.mark.slow  # real waits: heartbeat timeouts, floods, reconnects
async def test_forward_closes_a_silent_server_and_reconnects(bot: Bot) -> None:
    async with FakeServer() as server:
        server.silent = True
        async with forward(bot, server, heartbeat_timeout=0.4) as ad:
            await until(lambda: ad.health()["self_ids"] == [str(SELF_ID)])
            # the first socket stays silent; the next one tmy opens (once it closed the
            # silent one) is served (silent until now, that one would take another close)
            server.silent = False
            impl = await asyncio.wait_for(server.connections.get(), 8)
            assert len(server.auth_headers) == 2  # the silent socket, then this one
            await impl.group("echo back")
            assert sent_text(await impl.next_action()).endswith("|back")


async def test_forward_backs_off_a_server_that_fails_every_session_and_logs_why(
    bot: Bot, log_file: Path
) -> None:
    token = "tok-forward-secret-42"
    failure = {"status": "failed", "retcode": 1403, "wording": f"token {token} verify failed"}
    async with FailingServer(failure) as server:
        adapter = OneBotAdapter(
            OneBotConfig(mode="forward", url=server.url, access_token=token),
            store=bot.app.store,
        )
        adapter.backoff_base, adapter.backoff_cap = 0.02, 0.5
        await adapter.start(bot.engine.handle)
        try:
            await until(lambda: server.accepted >= 6, timeout=20)
        finally:
            await adapter.stop()
    events = read_log(log_file)
    retries = [e for e in events if e["event"] == "onebot.reconnecting"]
    assert len(retries) >= 5
    # every session failed: the backoff keeps growing instead of starting over each time
    assert [e["attempt"] for e in retries[:5]] == [1, 2, 3, 4, 5]
    assert all("verify failed" in e["reason"] for e in retries)
    frames = [e for e in events if e["event"] == "onebot.failure_frame"]
    assert frames and frames[0]["retcode"] == 1403
    assert "token *** verify failed" in frames[0]["error"]
    assert token not in log_file.read_text()  # the access token is a secret


# -- configuration and the daemon ------------------------------------------------------------


def test_from_settings_applies_defaults_and_checks_values(bot: Bot) -> None:
    assert from_settings(bot.settings) is None
    assert from_settings(bot.settings.with_(adapters={"onebot": {"enabled": False}})) is None
    adapter = from_settings(bot.settings.with_(adapters={"onebot": {"enabled": True}}))
    assert adapter is not None
    assert adapter.config == OneBotConfig(enabled=True)
    assert [r.path for r in adapter.routes()] == ["/onebot/v11/ws", "/onebot/v11/ws/"]
    with pytest.raises(ConfigError, match=r"adapters.onebot.url"):
        from_settings(
            bot.settings.with_(
                adapters={"onebot": {"enabled": True, "mode": "forward", "url": "http://x"}}
            )
        )
    with pytest.raises(ConfigError, match=r"adapters.onebot.path"):
        from_settings(bot.settings.with_(adapters={"onebot": {"enabled": True, "path": "ws"}}))


async def test_the_daemon_serves_onebot_on_its_one_listener(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(RULES)
    settings = load_settings(
        env={"TMY_ONEBOT_TOKEN": "tok"},
        rules=str(rules),
        plugins=str(tmp_path / "none"),
        store=f"sqlite:///{tmp_path / 'tmy.db'}",
        http_listen="127.0.0.1:0",
        console=False,
        adapters={"onebot": {"enabled": True, "access_token": "tok"}},
    )
    async with aiohttp.ClientSession() as session:
        async with serving(settings=settings) as daemon:
            port = daemon.http.port
            url = f"ws://127.0.0.1:{port}/onebot/v11/ws"
            impl = await connect_reverse(session, url, token="tok")
            await impl.group("hit", message_id=1)
            await impl.group("hit", message_id=1)
            await impl.group("hit", message_id=2)
            assert {sent_text(await impl.next_action()) for _ in range(2)} == {"1", "2"}
            await daemon.send(Target("onebot", "group:9"), "from cron")
            assert (await impl.next_action())["params"]["group_id"] == 9
            async with httpx.AsyncClient() as client:
                report = (await client.get(f"http://127.0.0.1:{port}/healthz")).json()
            assert report["adapters"]["onebot"]["state"] == "connected"
            assert report["adapters"]["onebot"]["self_ids"] == [str(SELF_ID)]
        await asyncio.wait_for(impl.closed.wait(), 5)  # tmy closed the socket on stop


# -- the codec -------------------------------------------------------------------------------


def test_cq_unescaping_is_one_pass() -> None:
    assert unescape("&amp;#91; &#91;x&#93; &#44; &amp;amp;") == "&#91; [x] , &amp;"
    assert unescape(escape("a&b[c],d", comma=True)) == "a&b[c],d"
    assert escape("[x],&", comma=False) == "&#91;x&#93;,&amp;"


def test_parse_cq_codes() -> None:
    assert parse_cq("hi [CQ:at,qq=10001] &amp; [CQ:share,title=a&#44;b=c,url=http://x?a=1]!") == [
        {"type": "text", "data": {"text": "hi "}},
        {"type": "at", "data": {"qq": "10001"}},
        {"type": "text", "data": {"text": " & "}},
        {"type": "share", "data": {"title": "a,b=c", "url": "http://x?a=1"}},
        {"type": "text", "data": {"text": "!"}},
    ]
    assert parse_cq("[CQ:shake]") == [{"type": "shake", "data": {}}]
    assert parse_cq("[CQ:broken") == [{"type": "text", "data": {"text": "[CQ:broken"}}]


def test_segments_tolerate_numbers_and_junk() -> None:
    segments = segments_of([{"type": "at", "data": {"qq": 10001}}, 5, {"data": {}}])
    assert segments == [{"type": "at", "data": {"qq": "10001"}}]
    assert segments_of(None) == []


def test_read_message_placeholders_mentions_and_replies() -> None:
    segments = [
        {"type": "reply", "data": {"id": "9"}},
        at(1),
        text(" look "),
        {"type": "image", "data": {"file": "a.jpg"}},
        {"type": "record", "data": {}},
        text(" hi @"),
        at(1),
        text(" there"),
    ]
    parsed = read_message(segments_of(segments), "1", sent_ids={"9"})
    assert parsed.text == "look [image][record] hi @ there"
    assert parsed.mentions_bot is True
    assert parsed.reply_to == "9"
    assert read_message(segments_of([at(2), text("x")]), "1").text == "@2x"


def test_reply_segments_and_split_text() -> None:
    assert reply_segments("hi") == [{"type": "text", "data": {"text": "hi"}}]
    assert split_text("abc", 5) == ["abc"]
    assert split_text("", 5) == [""]
    assert split_text("aaaa\nbbbb\ncc", 9) == ["aaaa\nbbbb", "cc"]
    assert split_text("abcdefghij", 4) == ["abcd", "efgh", "ij"]


# -- from test_review_issue8.py (review of issue 8: defects found running the daemon for real)


RULES_REVIEW_ISSUE8 = """
rules:
  - id: hello
    triggers: [hello]
    steps:
      - {plugin: ADJUST, input: "hi {USER}"}
"""


async def test_send_to_a_group_naming_a_user_ats_that_user() -> None:
    """``Target`` documents ``user`` as "a private chat, or someone to @"; the OneBot
    adapter dropped it for a group target, so a cron/admin message meant for one
    member of a group reached the group without the @."""
    async with Bot({"r.yaml": RULES_REVIEW_ISSUE8}) as bot:
        adapter = OneBotAdapter(OneBotConfig(send_interval=0), store=bot.app.store)
        http = HttpAdapter("127.0.0.1:0")
        http.mount(adapter.routes())
        await adapter.start(bot.engine.handle)
        await http.start(bot.engine.handle)
        session = aiohttp.ClientSession()
        try:
            impl = await connect_reverse(
                session, f"ws://127.0.0.1:{http.port}/onebot/v11/ws", SELF_ID
            )
            for _ in range(500):
                if adapter.health()["self_ids"]:
                    break
                await asyncio.sleep(0.01)
            await adapter.send(Target("onebot", "group:30003", "20002"), "your turn")
            action = await impl.next_action()
        finally:
            await adapter.stop()
            await http.stop()
            await session.close()
    assert action["params"]["group_id"] == 30003
    segments = action["params"]["message"]
    assert {"type": "at", "data": {"qq": "20002"}} in segments, json.dumps(segments)


async def test_a_onebot_path_that_collides_with_a_listener_route_is_refused(tmp_path) -> None:
    """``adapters.onebot.path: /healthz`` (or /v1/messages …) started without a word,
    and the reverse endpoint was never reachable: NapCat got a 200 JSON page and
    retried forever. A colliding route must be refused at start, naming the path."""
    config = tmp_path / "tmy.yaml"
    config.write_text(
        "adapters:\n"
        "  console: {enabled: false}\n"
        "  http: {listen: '127.0.0.1:0'}\n"
        "  onebot: {enabled: true, path: /healthz}\n"
    )
    settings = load_settings(config, env={}).with_(
        rules=tmp_path / "rules", store=f"sqlite:///{tmp_path / 'db.sqlite'}"
    )
    (tmp_path / "rules").mkdir()
    with pytest.raises((AdapterError, ConfigError), match="/healthz"):
        async with serving(settings=settings):
            pass
