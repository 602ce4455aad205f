"""Matrix: the mautrix-based adapter against a fake homeserver on loopback.

The fake (tests/support/matrix_fake.py) answers the client-server API as a
homeserver does (tokens checked, 401 M_UNKNOWN_TOKEN, 429 M_LIMIT_EXCEEDED with
retry_after_ms, a long-polling /sync); the rules run in the real engine with a
real SQLite store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.adapters import wait_state
from tests.support.matrix_fake import FakeHomeserver
from tests.support.matrix_fake_rooms import ANN, BOB, BOT, TOKEN
from tmy.adapters.matrix import Credentials, MatrixAdapter, MatrixConfig
from tmy.errors import AdapterError
from tmy.message import Message, Reply, Target
from tmy.testing import Bot

RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{PLATFORM}|{CHAT}|{USER}|{USER_NAME}|{QUESTION}"}
  - id: ping
    triggers: [ping]
    mention: true
    steps:
      - {plugin: ADJUST, input: pong}
  - id: where-private
    triggers: [where]
    private: true
    steps:
      - {plugin: ADJUST, input: private}
  - id: where-group
    triggers: [where]
    private: false
    steps:
      - {plugin: ADJUST, input: group}
  - id: long
    triggers: [long]
    steps:
      - {plugin: ADJUST, input: "?= ('word ' * 3000).strip()"}
  - id: wide
    triggers: [wide]
    steps:
      - {plugin: ADJUST, input: {text: "?= '&' * 20000", mention: "{USER}"}}
  - id: quotes
    triggers: [quotes]
    steps:
      - {plugin: ADJUST, input: {text: "?= '\\"' * 20000", mention: "{USER}"}}
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "Welcome {USER_NAME} ({EVENT_RAW})"}
"""


def token(value: str = TOKEN) -> Credentials:
    return Credentials(user_id="", access_token=value, password="")


def make_adapter(fake: FakeHomeserver, given: Credentials | None = None, store: Any = None,
                 **config: Any) -> MatrixAdapter:  # fmt: skip
    adapter = MatrixAdapter(MatrixConfig(enabled=True, api_base=fake.base, **config),
                            credentials=given or token(), store=store)  # fmt: skip
    adapter.backoff_base, adapter.backoff_cap = 0.02, 0.1
    adapter.poll_timeout = 0.5
    return adapter


class Served:
    def __init__(self, fake: FakeHomeserver, adapter: MatrixAdapter, bot: Bot) -> None:
        self.fake, self.adapter, self.bot = fake, adapter, bot
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)


@asynccontextmanager
async def served(fake: FakeHomeserver, **kw: Any) -> AsyncIterator[Served]:
    async with Bot({"r.yaml": RULES}) as bot:
        adapter = make_adapter(fake, store=bot.app.store, **kw)
        s = Served(fake, adapter, bot)
        await adapter.start(s.handle)
        try:
            await wait_state(adapter, "connected")
            yield s
        finally:
            await adapter.stop()


async def test_a_mention_in_a_group_room_is_answered_in_that_room_quoting_it() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB)
        async with served(fake) as s:
            await fake.message(room, ANN, "ping")  # mention: true, and no mention: not run
            sent = await fake.message(room, ANN, "Tmy: ping", **{"m.mentions": {"user_ids": [BOT]}})
            answer = await fake.next_sent()
            await fake.message(room, ANN, "echo hi")
            echo = await fake.next_sent()
    assert answer["room"] == room and answer["content"]["body"] == "pong"
    assert answer["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": sent["event_id"]}}
    assert s.seen[1].mentions_bot and s.seen[1].text == "ping"
    assert echo["content"]["body"] == f"matrix|{room}|{ANN}|Ann|hi"


async def test_a_legacy_pill_and_a_reply_to_the_bot_are_mentions() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB)
        async with served(fake) as s:
            await fake.message(room, ANN, f"{BOT}: ping")
            first = await fake.next_sent()
            quote = f"> <{BOT}> pong\n\nping"
            relates = {"m.in_reply_to": {"event_id": first["id"]}}
            await fake.message(room, BOB, quote, **{"m.relates_to": relates})
            second = await fake.next_sent()
    assert first["content"]["body"] == second["content"]["body"] == "pong"
    assert [m.text for m in s.seen] == ["ping", "ping"]
    assert s.seen[1].reply_to == first["id"]


async def test_a_message_in_a_thread_is_answered_in_the_thread() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB)
        async with served(fake):
            root = await fake.message(room, ANN, "a thread")
            thread = {"rel_type": "m.thread", "event_id": root["event_id"], "is_falling_back": True,
                      "m.in_reply_to": {"event_id": root["event_id"]}}  # fmt: skip
            asked = await fake.message(room, ANN, "echo in thread", **{"m.relates_to": thread})
            sent = await fake.next_sent()
    assert sent["content"]["body"].endswith("|in thread")
    assert sent["content"]["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": root["event_id"],
        "is_falling_back": False,
        "m.in_reply_to": {"event_id": asked["event_id"]},
    }


async def test_a_direct_message_is_private_and_not_quoted() -> None:
    async with FakeHomeserver() as fake:
        dm = fake.room("dm", ANN)  # two members: a DM
        listed = fake.room("listed", ANN, BOB)
        fake.direct = {BOB: [listed]}  # m.direct marks it as a DM although it has three
        async with served(fake) as s:
            await fake.message(dm, ANN, "where")
            first = await fake.next_sent()
            await fake.message(listed, BOB, "where")
            second = await fake.next_sent()
            await fake.message(dm, ANN, "ping")  # mention: true is met in a private chat
            third = await fake.next_sent()
    assert [first["content"]["body"], second["content"]["body"]] == ["private", "private"]
    assert "m.relates_to" not in first["content"]
    assert third["content"]["body"] == "pong" and s.seen[0].private


async def test_a_long_reply_is_split_into_events_under_the_limit() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with served(fake):
            await fake.message(room, ANN, "long")
            pieces = [await fake.next_sent(), await fake.next_sent()]
            await fake.nothing_sent()
    bodies = [p["content"]["body"] for p in pieces]
    assert all(len(b) <= 8000 for b in bodies)
    assert " ".join(bodies) == ("word " * 3000).strip()


async def test_a_long_reply_with_a_pill_stays_under_the_event_size_limit() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with served(fake):
            await fake.message(room, ANN, "wide")
            pieces = [await fake.next_sent() for _ in range(3)]  # 8000 + 8000 + 4000
            await fake.nothing_sent()
    first = pieces[0]["content"]
    assert first["m.mentions"] == {"user_ids": [ANN]} and first["body"].startswith("Ann &")
    assert first["formatted_body"].count("&amp;") == 8000  # 40 KB of HTML: accepted
    assert "".join(p["content"]["body"] for p in pieces) == "Ann " + "&" * 20000


async def test_a_rate_limited_send_waits_retry_after_and_goes_out_once() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        fake.send_limits, fake.retry_after_ms = 2, 100
        async with served(fake):
            await fake.message(room, ANN, "echo slow")
            sent = await fake.next_sent()
            await fake.nothing_sent()
    assert sent["content"]["body"].endswith("|slow")
    assert fake.count("PUT", "/send/") == 3  # two 429s, then the event


async def test_a_rate_limited_and_failing_sync_reconnects() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with served(fake) as s:
            fake.sync_faults = ["500", "drop", "429", "500"]
            await wait_state(s.adapter, "reconnecting")
            await wait_state(s.adapter, "connected")
            await fake.message(room, ANN, "echo back")
            sent = await fake.next_sent()
    assert sent["content"]["body"].endswith("|back")
    assert not fake.sync_faults


async def test_first_start_skips_history_and_a_restart_replays_nothing(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'tmy.db'}"
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        await fake.message(room, ANN, "echo old history")
        for _ in range(2):  # the same store file, a new adapter each time
            async with Bot({"r.yaml": RULES}, store=store) as bot:
                adapter = make_adapter(fake, store=bot.app.store)
                seen: list[str] = []

                async def handle(message: Message, bot: Bot = bot, seen: list[str] = seen) -> Reply:
                    seen.append(message.text)
                    return await bot.engine.handle(message)

                await adapter.start(handle)
                await wait_state(adapter, "connected")
                await fake.message(room, ANN, f"echo new {len(fake.sent)}")
                await fake.next_sent()
                await fake.nothing_sent(0.2)
                await adapter.stop()
                assert seen == [f"echo new {len(fake.sent) - 1}"]
    assert [e["content"]["body"].rsplit("|", 1)[1] for e in fake.sent] == ["new 0", "new 1"]


async def test_an_invite_is_accepted_and_a_member_join_reaches_the_event_rule() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("new", ANN, bot=False)
        async with served(fake):
            await fake.invite(room, ANN)
            async with asyncio.timeout(10):
                while fake.rooms[room].members[BOT]["membership"] != "join":
                    await asyncio.sleep(0.01)
            await fake.join(room, BOB)
            sent = await fake.next_sent()
    assert sent["room"] == room
    assert sent["content"]["body"] == "Welcome Bob (m.room.member)"


async def test_typing_shows_while_a_run_works() -> None:
    release = asyncio.Event()

    async def slow(message: Message) -> Reply:
        await release.wait()
        return Reply("finally", rule="slow", trace_id="t")

    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        adapter = make_adapter(fake)
        adapter.typing_after = 0.01
        await adapter.start(slow)
        await wait_state(adapter, "connected")
        await fake.message(room, ANN, "think hard")
        async with asyncio.timeout(10):
            while not fake.count("PUT", f"/rooms/{room}/typing/{BOT}"):
                await asyncio.sleep(0.01)
        release.set()
        sent = await fake.next_sent()
        await adapter.stop()
    assert sent["content"]["body"] == "finally"
    assert fake.typing[0] and not fake.typing[-1]  # typing, then no longer once answered


async def test_send_to_a_room_and_its_errors() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("group", ANN, BOB)
        async with served(fake) as s:
            await s.adapter.send(Target("matrix", room), "from cron")
            assert (await fake.next_sent())["content"]["body"] == "from cron"
            with pytest.raises(AdapterError, match="room id"):
                await s.adapter.send(Target("matrix", "general"), "hi")
            with pytest.raises(AdapterError, match="M_FORBIDDEN"):
                await s.adapter.send(Target("matrix", "!nowhere:example.org"), "hi")


async def test_send_to_a_user_goes_to_their_dm_room() -> None:
    async with FakeHomeserver() as fake:
        dm = fake.room("dm", ANN)
        fake.direct = {ANN: [dm]}
        async with served(fake) as s:
            await s.adapter.send(Target("matrix", "", ANN), "just for you")
            sent = await fake.next_sent()
            with pytest.raises(AdapterError, match="no DM room with"):
                await s.adapter.send(Target("matrix", "", BOB), "hi")
    assert (sent["room"], sent["content"]["body"]) == (dm, "just for you")


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")
