"""Discord: the discord.py adapter driven through discord.py's own objects, no network.

Inbound messages are built from gateway payloads by discord.py's own state
(``ConnectionState.parse_message_create``, ``discord.Message(state=, channel=,
data=)``); outbound calls go through discord.py's real HTTP client, pointed at
a fake REST API on loopback (``discord.http.Route.BASE``). The rules run in
the real engine with a real SQLite store.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yarl
from aiohttp import BodyPartReader, WSMsgType, web

from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tmy import metrics
from tmy.adapters import discord_adapter as mod
from tmy.adapters.discord_adapter import (
    MAX_TEXT,
    DiscordAdapter,
    DiscordConfig,
    from_settings,
    split_message,
    strip_mention,
)
from tmy.config import Settings, load_settings
from tmy.errors import AdapterError, ConfigError
from tmy.message import Message, Reply, Target
from tmy.testing import Bot, serving

discord = mod.discord

TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.Gabcde.fake-discord-token-for-tests"
BOT_ID = 1100000000000000001
USER_ID = 2200000000000000002
OTHER_BOT_ID = 3300000000000000003
GUILD_ID = 4400000000000000004
CHANNEL_ID = 5500000000000000005
DM_ID = 6600000000000000006
ROLE_ID = 7700000000000000007

BOT_USER = {
    "id": str(BOT_ID),
    "username": "tmybot",
    "discriminator": "0",
    "global_name": None,
    "avatar": None,
    "bot": True,
}
ALICE = {
    "id": str(USER_ID),
    "username": "alice",
    "discriminator": "0",
    "global_name": "Alice A.",
    "avatar": None,
}
OTHER_BOT = {
    "id": str(OTHER_BOT_ID),
    "username": "otherbot",
    "discriminator": "0",
    "global_name": None,
    "avatar": None,
    "bot": True,
}
GUILD = {
    "id": str(GUILD_ID),
    "name": "test guild",
    "owner_id": str(USER_ID),
    "roles": [
        {
            "id": str(GUILD_ID),
            "name": "@everyone",
            "permissions": "0",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
        },
        {
            "id": str(ROLE_ID),
            "name": "tmybot",
            "permissions": "0",
            "position": 1,
            "color": 0,
            "hoist": False,
            "managed": True,
            "mentionable": False,
            "tags": {"bot_id": str(BOT_ID)},
        },
    ],
    "channels": [
        {
            "id": str(CHANNEL_ID),
            "type": 0,
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
        }
    ],
    "members": [
        {
            "user": BOT_USER,
            "roles": [str(ROLE_ID)],
            "flags": 0,
            "joined_at": "2024-01-01T00:00:00+00:00",
        }
    ],
    "member_count": 2,
}

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
  - id: shout
    triggers: [shout]
    steps:
      - {plugin: ADJUST, input: "@everyone @here <@&7700000000000000007> <@2200000000000000002> hi"}
  - id: long
    triggers: [long]
    steps:
      - plugin: ADJUST
        input: "?= 'intro\\n```py\\n' + 'print(12345678)\\n' * 280 + '```\\nthe end'"
"""

# what discord.py sends for NO_MENTIONS: nothing parsed; replied_user absent means false for Discord
NO_PINGS = {"parse": []}
REPLY_NO_PINGS = {"parse": [], "replied_user": False}  # a reply says so explicitly

_ids = iter(range(9000000000000000000, 9100000000000000000))


def msg_payload(
    content: str,
    *,
    author: dict[str, Any] = ALICE,
    guild: bool = True,
    mentions: list[dict[str, Any]] | None = None,
    reply_to: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A MESSAGE_CREATE payload as the gateway sends it."""
    data: dict[str, Any] = {
        "id": str(next(_ids)),
        "channel_id": str(CHANNEL_ID if guild else DM_ID),
        "author": author,
        "content": content,
        "timestamp": "2024-05-01T12:00:00.000000+00:00",
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": mentions or [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 19 if reply_to else 0,
        "flags": 0,
    }
    if guild:
        data["guild_id"] = str(GUILD_ID)
        data["member"] = {
            "roles": [],
            "joined_at": "2024-01-01T00:00:00+00:00",
            "nick": None,
            "flags": 0,
        }
    if reply_to is not None:
        data["message_reference"] = {
            "message_id": reply_to["id"],
            "channel_id": reply_to["channel_id"],
        }
        data["referenced_message"] = reply_to
    return data


async def read_body(request: web.Request) -> dict[str, Any]:
    """A JSON body, or a multipart one (uploads): its ``payload_json`` with the files
    added as ``_files`` [(file name, content type, bytes)]."""
    if not request.content_type.startswith("multipart/"):
        return dict(await request.json())
    body: dict[str, Any] = {}
    files: list[tuple[str, str, bytes]] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        assert isinstance(part, BodyPartReader)
        if part.name == "payload_json":
            body.update(json.loads(await part.text()))
        else:
            ctype = part.headers.get("Content-Type", "")
            files.append((part.filename or "", ctype, bytes(await part.read())))
    body["_files"] = files
    return body


def _json(data: Any, status: int = 200) -> web.Response:
    # exactly ``application/json``: discord.py parses nothing else (aiohttp adds a charset)
    return web.Response(
        body=json.dumps(data).encode(), status=status, headers={"Content-Type": "application/json"}
    )


class FakeDiscord:
    """Discord's REST API on loopback: the few routes the adapter uses, and what was posted."""

    def __init__(self) -> None:
        self.me_status = 200
        self.fail_sends: dict[str, Any] | None = None  # (status, body) for message posts
        self.posts: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.me_calls = 0
        # channel id -> Event: posts to that channel hang until it is set (a channel held back
        # by its rate limit, or a slow API)
        self.hold: dict[str, asyncio.Event] = {}
        app = web.Application()
        app.router.add_get("/api/v10/users/@me", self.me)
        app.router.add_post("/api/v10/channels/{cid}/messages", self.create_message)
        app.router.add_get("/api/v10/channels/{cid}", self.get_channel)
        app.router.add_patch("/api/v10/channels/{cid}/messages/{mid}", self.edit_message)
        app.router.add_get("/api/v10/channels/{cid}/messages/{mid}", self.get_message)
        app.router.add_post("/api/v10/channels/{cid}/typing", self.typing)
        app.router.add_post("/api/v10/interactions/{iid}/{itoken}/callback", self.interaction)
        self.edits: list[tuple[str, dict[str, Any]]] = []  # (message id, body) of each edit
        self.typed: list[str] = []  # channel ids a typing indicator was sent to
        self.acks: list[tuple[str, dict[str, Any]]] = []  # (interaction id, callback body)
        self.stored: dict[str, dict[str, Any]] = {}  # message id -> payload, for GET
        app.router.add_get("/api/v10/users/{uid}", self.get_user)
        app.router.add_post("/api/v10/users/@me/channels", self.open_dm)
        app.router.add_get("/api/v10/oauth2/applications/@me", self.application)
        app.router.add_get("/gateway", self.gateway)
        self.gateway_mode = "ready"  # "4014": refuse the privileged intents; "4014-members": those
        self.identifies: list[dict[str, Any]] = []  # every IDENTIFY, one per connection
        self.identify: dict[str, Any] | None = None
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()  # dispatches to push
        self.runner = web.AppRunner(app)
        self.base = ""

    async def __aenter__(self) -> FakeDiscord:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}/api/v10"
        self.gateway_url = f"ws://127.0.0.1:{port}/gateway"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()

    async def me(self, request: web.Request) -> web.Response:
        self.me_calls += 1
        if request.headers.get("Authorization") != f"Bot {TOKEN}" or self.me_status == 401:
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        if self.me_status != 200:
            return _json({"message": "Unknown", "code": 10000}, status=self.me_status)
        return _json(BOT_USER)

    async def create_message(self, request: web.Request) -> web.Response:
        body = await read_body(request)
        cid = request.match_info["cid"]
        if self.fail_sends is not None:
            return _json(self.fail_sends, status=self.fail_sends["status"])
        if cid in self.hold:
            await self.hold[cid].wait()
        await self.posts.put((cid, body))
        data = msg_payload(body.get("content", ""), author=BOT_USER, guild=False)
        data["channel_id"] = cid
        return _json(data)

    async def edit_message(self, request: web.Request) -> web.Response:
        body = await read_body(request)
        self.edits.append((request.match_info["mid"], body))
        data = msg_payload(body.get("content", ""), author=BOT_USER, guild=False)
        data.update(id=request.match_info["mid"], channel_id=request.match_info["cid"])
        return _json(data)

    async def get_message(self, request: web.Request) -> web.Response:
        found = self.stored.get(request.match_info["mid"])
        if found is None:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        return _json(found)

    async def typing(self, request: web.Request) -> web.Response:
        self.typed.append(request.match_info["cid"])
        return web.Response(status=204)

    async def interaction(self, request: web.Request) -> web.Response:
        body = await read_body(request)
        self.acks.append((request.match_info["iid"], body))
        return _json({"interaction": {"id": request.match_info["iid"], "type": 3}})

    async def get_channel(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        if cid == "404":
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        return _json(
            {
                "id": cid,
                "type": 0,
                "name": "elsewhere",
                "position": 3,
                "guild_id": str(GUILD_ID),
                "permission_overwrites": [],
            }
        )

    async def get_user(self, request: web.Request) -> web.Response:
        return _json({**ALICE, "id": request.match_info["uid"]})

    async def open_dm(self, request: web.Request) -> web.Response:
        body = await request.json()
        user = {**ALICE, "id": str(body["recipient_id"])}
        return _json({"id": str(DM_ID), "type": 1, "recipients": [user], "last_message_id": None})

    async def application(self, request: web.Request) -> web.Response:
        return _json(
            {
                "id": str(BOT_ID),
                "name": "tmybot",
                "description": "",
                "icon": None,
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": ALICE,
                "verify_key": "00",
                "flags": 0,
            }
        )

    async def gateway(self, request: web.Request) -> web.WebSocketResponse:
        """The gateway: HELLO, wait for IDENTIFY, then READY and queued events (or close 4014)."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 45000}})
        identify = None
        while identify is None:  # a heartbeat (op 1) comes first
            frame = await ws.receive_json()
            if frame["op"] == 2:
                identify = self.identify = frame["d"]
        self.identifies.append(identify)
        members = identify["intents"] & discord.Intents(members=True).value
        if self.gateway_mode == "4014" or (self.gateway_mode == "4014-members" and members):
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return ws
        seq = 1
        ready = {
            "v": 10,
            "user": BOT_USER,
            "guilds": [],
            "session_id": "s1",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(BOT_ID), "flags": 0},
        }
        await ws.send_json({"op": 0, "t": "READY", "s": seq, "d": ready})
        reader = asyncio.ensure_future(ws.receive())
        while not ws.closed:
            getter = asyncio.ensure_future(self.events.get())
            done, _ = await asyncio.wait([reader, getter], return_when="FIRST_COMPLETED")
            if getter in done:
                seq += 1
                event = getter.result()
                await ws.send_json({"op": 0, "t": event["t"], "s": seq, "d": event["d"]})
            else:
                getter.cancel()
                if reader.result().type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.ERROR):
                    break
                reader = asyncio.ensure_future(ws.receive())
        reader.cancel()
        return ws

    async def next_post(self, timeout: float = 10.0) -> tuple[str, dict[str, Any]]:
        return await asyncio.wait_for(self.posts.get(), timeout)


@asynccontextmanager
async def faked(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """A FakeDiscord that discord.py's REST calls and gateway connections go to."""
    async with FakeDiscord() as f:
        monkeypatch.setattr(discord.http.Route, "BASE", f.base)  # restored after the test
        monkeypatch.setattr(
            discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(f.gateway_url)
        )
        yield f


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with faked(monkeypatch) as f:
        yield f


class Driven:
    """The adapter's real client with a logged-in HTTP session and a cached guild, no gateway."""

    def __init__(self, fake: FakeDiscord, adapter: DiscordAdapter, bot: Bot) -> None:
        self.fake = fake
        self.adapter = adapter
        self.bot = bot
        self.seen: list[Message] = []
        self.fail_next = False
        # answers instead of the engine when set (events before the engine knew them)
        self.respond: Callable[[Message], Awaitable[Reply]] | None = None

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("boom")
        if self.respond is not None:
            return await self.respond(message)
        return await self.bot.engine.handle(message)

    @property
    def state(self) -> Any:
        assert self.adapter.client is not None
        return self.adapter.client._connection

    async def deliver(self, payload: dict[str, Any]) -> None:
        """Hand one message to the adapter's on_message and wait for its run to finish."""
        channel, _ = self.state._get_guild_channel(payload)
        await self.adapter.on_message(
            discord.Message(state=self.state, channel=channel, data=payload)
        )
        assert await self.adapter.settle(10)


@asynccontextmanager
async def driven(
    fake: FakeDiscord,
    *,
    rules: str = RULES,
    guild: dict[str, Any] = GUILD,
    settings: dict[str, Any] | None = None,
    **config: Any,
) -> AsyncIterator[Driven]:
    """The adapter (``config``: its DiscordConfig fields) on a Bot with ``rules`` (and
    ``settings``), its client logged in to the fake, ``guild`` cached."""
    async with Bot({"r.yaml": rules}, **(settings or {})) as bot:
        adapter = DiscordAdapter(DiscordConfig(**config), token=TOKEN)
        d = Driven(fake, adapter, bot)
        client = adapter.bind(d.handle)
        await client._async_setup_hook()  # what login() does first: bind the client to this loop
        user = await client.http.static_login(TOKEN)
        state = client._connection
        state.user = discord.ClientUser(state=state, data=user)
        state._add_guild_from_data(guild)
        try:
            yield d
        finally:
            await adapter.stop()


# -- inbound and replies -----------------------------------------------------------------------


async def test_a_guild_mention_is_stripped_satisfies_mention_rules_and_is_replied_to(
    fake: FakeDiscord,
) -> None:
    async with driven(fake) as d:
        payload = msg_payload(f"<@{BOT_ID}> ping", mentions=[BOT_USER])
        await d.deliver(payload)
        (m,) = d.seen
        assert m.text == "ping" and m.mentions_bot and not m.private
        assert (m.platform, m.chat, m.user, m.user_name) == (
            "discord",
            str(CHANNEL_ID),
            str(USER_ID),
            "Alice A.",
        )
        assert (m.self_id, m.message_id, m.reply_to) == (str(BOT_ID), payload["id"], None)
        assert isinstance(m.raw, discord.Message)
        cid, body = await fake.next_post()
        assert cid == str(CHANNEL_ID) and body["content"] == "pong"
        assert body["message_reference"]["message_id"] == int(payload["id"])
        assert body["message_reference"]["fail_if_not_exists"] is False
        assert body["allowed_mentions"] == REPLY_NO_PINGS


async def test_without_a_mention_a_mention_rule_stays_silent_in_a_guild(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        await d.deliver(msg_payload("ping"))
        assert d.seen[0].text == "ping" and not d.seen[0].mentions_bot
        assert fake.posts.empty()
        # the nickname form <@!id> and the bot's managed role count as mentions too
        await d.deliver(msg_payload(f"<@!{BOT_ID}>, ping"))
        await d.deliver(msg_payload(f"<@&{ROLE_ID}> ping"))
        assert [(m.text, m.mentions_bot) for m in d.seen[1:]] == [("ping", True), ("ping", True)]
        assert (await fake.next_post())[1]["content"] == "pong"
        assert (await fake.next_post())[1]["content"] == "pong"


async def test_a_reply_to_the_bots_message_counts_as_addressed(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        ours = msg_payload("an earlier answer", author=BOT_USER)
        theirs = msg_payload("something alice said")
        await d.deliver(msg_payload("ping", reply_to=ours))
        await d.deliver(msg_payload("ping", reply_to=theirs))
        assert [(m.mentions_bot, m.reply_to) for m in d.seen] == [
            (True, ours["id"]),
            (False, theirs["id"]),
        ]
        assert (await fake.next_post())[1]["content"] == "pong"
        assert fake.posts.empty()


async def test_a_dm_is_private_and_needs_no_mention(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        await d.deliver(msg_payload("ping", guild=False))
        (m,) = d.seen
        assert m.private and m.chat == str(DM_ID) and not m.mentions_bot
        cid, body = await fake.next_post()
        assert cid == str(DM_ID) and body["content"] == "pong"


async def test_gateway_payloads_reach_the_rules_through_discord_py_state(fake: FakeDiscord) -> None:
    """MESSAGE_CREATE parsed by discord.py's ConnectionState dispatches to the adapter."""
    async with driven(fake) as d:
        d.state.parse_message_create(msg_payload("echo hello there"))
        _, body = await fake.next_post()
        assert body["content"] == f"discord|{CHANNEL_ID}|{USER_ID}|Alice A.|hello there"


def dropped(what: str) -> float:
    """tmy_chat_dropped{adapter="discord", what=…} so far."""
    labels = {"adapter": "discord", "what": what}
    return metrics.REGISTRY.get_sample_value("tmy_chat_dropped_total", labels) or 0.0


async def test_a_held_back_channel_has_a_bounded_queue_and_delays_no_other(
    fake: FakeDiscord, log_file: Path
) -> None:
    before = dropped("reply")
    async with driven(fake, max_pending_per_chat=4) as d:
        fake.hold[str(CHANNEL_ID)] = asyncio.Event()  # the guild channel's sends hang

        async def arrive(payload: dict[str, Any]) -> None:
            channel, _ = d.state._get_guild_channel(payload)
            message = discord.Message(state=d.state, channel=channel, data=payload)
            await d.adapter.on_message(message)

        for i in range(40):  # one after another: each runs, its reply queues
            await arrive(msg_payload(f"echo busy{i}"))
            async with asyncio.timeout(5):
                while len(d.seen) <= i or d.adapter._inbound.in_flight:
                    await asyncio.sleep(0.005)
        # 1 in flight (hanging), 4 waiting, the rest dropped oldest first
        assert dropped("reply") - before == 40 - 4 - 1
        assert d.adapter.health()["waiting"]["replies"] == 4
        await arrive(msg_payload("ping", guild=False))  # a DM meanwhile: answered at once
        cid, body = await fake.next_post(timeout=3)
        assert (cid, body["content"]) == (str(DM_ID), "pong")
        fake.hold[str(CHANNEL_ID)].set()
        assert await d.adapter.settle(10)
        posted = [fake.posts.get_nowait()[1]["content"] for _ in range(fake.posts.qsize())]
        assert [p.rsplit("|", 1)[1] for p in posted] == [
            "busy0",
            *[f"busy{i}" for i in range(36, 40)],
        ]
    lines = [e for e in read_log(log_file) if e["event"] == "discord.chat_dropped"]
    assert lines and lines[0]["chat"] == str(CHANNEL_ID) and lines[0]["what"] == "reply"


async def test_bots_and_the_bot_itself_are_ignored(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        await d.deliver(msg_payload("echo from a bot", author=OTHER_BOT))
        await d.deliver(msg_payload("echo from myself", author=BOT_USER))
        await d.deliver(msg_payload(f"<@{BOT_ID}>", mentions=[BOT_USER]))  # nothing left to match
        assert d.seen == []
        assert fake.posts.empty()


async def test_a_reply_can_never_ping_everyone_roles_or_users(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        await d.deliver(msg_payload("shout"))
        _, body = await fake.next_post()
        assert body["content"].startswith("@everyone @here")
        assert body["allowed_mentions"] == REPLY_NO_PINGS
        # and sends on the bot's own initiative carry the same
        await d.adapter.send(Target("discord", str(CHANNEL_ID)), "@everyone look")
        _, body = await fake.next_post()
        assert body["allowed_mentions"] == NO_PINGS


async def test_a_long_reply_is_split_with_code_blocks_balanced(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        payload = msg_payload("long")
        await d.deliver(payload)
        bodies = [(await fake.next_post())[1] for _ in range(3)]
        assert fake.posts.empty()
        texts = [b["content"] for b in bodies]
        assert sum(len(t) for t in texts) > 4500
        assert all(len(t) <= MAX_TEXT for t in texts)
        assert all(t.count("```") % 2 == 0 for t in texts)
        assert texts[0].startswith("intro\n```py\n") and texts[0].endswith("\n```")
        assert texts[1].startswith("```py\nprint(") and texts[1].endswith("\n```")
        assert texts[2].startswith("```py\nprint(") and texts[2].endswith("```\nthe end")
        code = "".join(t.removeprefix("intro\n") for t in texts)
        assert code.count("print(12345678)") == 280
        # only the first piece is a reply to the message
        assert bodies[0]["message_reference"]["message_id"] == int(payload["id"])
        assert "message_reference" not in bodies[1] and "message_reference" not in bodies[2]


async def test_health_follows_ready_disconnect_and_resume(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        client = d.adapter.client
        assert client is not None
        assert d.adapter.health()["state"] == "starting"
        for event, state in (
            ("ready", "connected"),
            ("disconnect", "reconnecting"),
            ("resumed", "connected"),
        ):
            client.dispatch(event)
            await wait_state(d.adapter, state, 5)
        report = d.adapter.health()
        assert report["bot_id"] == str(BOT_ID) and report["shards"] == 1
        assert report["last_event"] is not None and "latency_ms" in report


# -- sending on the bot's own initiative --------------------------------------------------------


async def test_send_posts_to_a_channel_id(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        await d.adapter.send(Target("discord", str(CHANNEL_ID)), "cached channel")
        cid, body = await fake.next_post()
        assert cid == str(CHANNEL_ID) and body["content"] == "cached channel"
        assert body["allowed_mentions"] == NO_PINGS and "message_reference" not in body
        # a channel not in the cache is fetched first
        await d.adapter.send(Target("discord", "8800000000000000008"), "fetched channel")
        cid, body = await fake.next_post()
        assert cid == "8800000000000000008" and body["content"] == "fetched channel"


async def test_send_to_a_user_opens_a_dm(fake: FakeDiscord) -> None:
    async with driven(fake) as d:
        await d.adapter.send(Target("discord", "", user=str(USER_ID)), "psst")
        cid, body = await fake.next_post()
        assert cid == str(DM_ID) and body["content"] == "psst"


async def test_an_error_in_one_message_does_not_stop_the_adapter(
    fake: FakeDiscord, log_file: Path
) -> None:
    async with driven(fake) as d:
        d.fail_next = True
        await d.deliver(msg_payload("ping", guild=False))
        await d.deliver(msg_payload("ping", guild=False))
        assert (await fake.next_post())[1]["content"] == "pong"
        assert fake.posts.empty()
    assert any(e.get("event") == "discord.message_failed" for e in read_log(log_file))


async def test_a_refused_send_names_status_and_code_and_is_logged(
    fake: FakeDiscord, log_file: Path
) -> None:
    async with driven(fake) as d:
        fake.fail_sends = {"message": "Missing Permissions", "code": 50013, "status": 403}
        with pytest.raises(AdapterError) as info:
            await d.adapter.send(Target("discord", str(CHANNEL_ID)), "hello")
        text = str(info.value)
        assert "HTTP 403" in text and "code 50013" in text and "Missing Permissions" in text
        # a failed reply is logged the same way and does not stop the adapter
        await d.deliver(msg_payload("ping", guild=False))
        fake.fail_sends = None
        await d.deliver(msg_payload("ping", guild=False))
        assert (await fake.next_post())[1]["content"] == "pong"
        with pytest.raises(AdapterError, match="HTTP 404, code 10003"):
            await d.adapter.send(Target("discord", "404"), "nowhere")
    failed = [e for e in read_log(log_file) if e.get("event") == "discord.send_failed"]
    assert [(e["status"], e["code"]) for e in failed] == [(403, 50013), (403, 50013), (404, 10003)]


async def test_send_refuses_bad_targets_and_an_unconnected_adapter(fake: FakeDiscord) -> None:
    adapter = DiscordAdapter(token=TOKEN)
    with pytest.raises(AdapterError, match="not connected"):
        await adapter.send(Target("discord", str(CHANNEL_ID)), "hi")
    async with driven(fake) as d:
        with pytest.raises(AdapterError, match="channel id"):
            await d.adapter.send(Target("discord", "general"), "hi")
        with pytest.raises(AdapterError, match="empty"):
            await d.adapter.send(Target("discord", str(CHANNEL_ID)), "  ")


# -- connecting: tokens, retries, the daemon ---------------------------------------------------


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")


async def test_a_refused_token_fails_the_adapter_without_raising(fake: FakeDiscord) -> None:
    fake.me_status = 401
    adapter = DiscordAdapter(token=TOKEN)
    await adapter.start(_no_handle)  # returns at once
    await wait_state(adapter, "failed")
    error = adapter.health()["error"]
    assert "Discord refused the token (401)" in error and "DISCORD_TOKEN" in error
    assert TOKEN not in error
    calls = fake.me_calls
    await asyncio.sleep(0.2)
    assert fake.me_calls == calls  # a refused token is not retried
    await adapter.stop()
    assert adapter.health()["state"] == "failed"


async def test_a_full_connection_through_a_fake_gateway(fake: FakeDiscord) -> None:
    """start(): login over REST, IDENTIFY with the message content intent, READY, a DM answered."""
    async with Bot({"r.yaml": RULES}) as bot:
        adapter = DiscordAdapter(token=TOKEN)
        adapter.guild_ready_timeout = 0.05
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "connected")
            assert fake.identify is not None and fake.identify["token"] == TOKEN
            assert fake.identify["intents"] & discord.Intents(message_content=True).value
            assert adapter.health()["bot_id"] == str(BOT_ID)
            await fake.events.put({"t": "MESSAGE_CREATE", "d": msg_payload("ping", guild=False)})
            cid, body = await fake.next_post()
            assert cid == str(DM_ID) and body["content"] == "pong"
        finally:
            await adapter.stop()
        assert adapter.health()["state"] == "stopped"


async def test_a_refused_message_content_intent_fails_with_the_portal_hint(
    fake: FakeDiscord,
) -> None:
    fake.gateway_mode = "4014"
    adapter = DiscordAdapter(token=TOKEN)
    await adapter.start(_no_handle)
    await wait_state(adapter, "failed")
    assert "MESSAGE CONTENT INTENT" in adapter.health()["error"]
    await adapter.stop()


async def test_stop_does_not_wait_out_a_backoff_pause(fake: FakeDiscord) -> None:
    fake.me_status = 404
    adapter = DiscordAdapter(token=TOKEN)
    adapter.backoff_base = adapter.backoff_cap = 300.0
    await adapter.start(_no_handle)
    await wait_state(adapter, "reconnecting")
    async with asyncio.timeout(10):
        await adapter.stop()
    assert adapter.health()["state"] == "stopped"


async def test_a_missing_token_fails_with_a_clear_error() -> None:
    settings = Settings(adapters={"discord": {"enabled": True}})
    adapter = from_settings(settings, env={})
    assert adapter is not None
    await adapter.start(_no_handle)
    report = adapter.health()
    assert report["state"] == "failed" and "DISCORD_TOKEN" in report["error"]
    await adapter.stop()


async def test_other_errors_are_retried_with_backoff(fake: FakeDiscord) -> None:
    fake.me_status = 404
    adapter = DiscordAdapter(token=TOKEN)
    adapter.backoff_base, adapter.backoff_cap = 0.02, 0.05
    await adapter.start(_no_handle)
    await wait_state(adapter, "reconnecting")
    assert "HTTP 404, code 10000" in adapter.health()["error"]
    async with asyncio.timeout(10):
        while fake.me_calls < 3:
            await asyncio.sleep(0.01)
    fake.me_status = 401
    await wait_state(adapter, "failed")
    await adapter.stop()


def test_max_pending_per_chat_is_read_from_the_config_file_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text("adapters:\n  discord: {enabled: true, max_pending_per_chat: 7}\n")
    settings = load_settings(config=str(config), env={}, rules=str(tmp_path))
    adapter = from_settings(settings, env={})
    assert adapter is not None and adapter.config.max_pending_per_chat == 7
    assert DiscordConfig().max_pending_per_chat == 20
    for bad in (0, "5", True, 10**6):
        with pytest.raises(ConfigError, match="max_pending_per_chat"):
            DiscordConfig.from_section({"max_pending_per_chat": bad})


def test_from_settings_applies_defaults_and_picks_the_client_class() -> None:
    assert from_settings(Settings()) is None
    assert from_settings(Settings(adapters={"discord": {"enabled": False}})) is None
    env = {"DISCORD_TOKEN": f" {TOKEN}\n", "MY_TOKEN": "other-token-value-123"}
    adapter = from_settings(Settings(adapters={"discord": {"enabled": True}}), env=env)
    assert adapter is not None and adapter.token == TOKEN and adapter.config.shards == 1
    assert type(adapter._new_client()) is discord.Client
    section = {"enabled": True, "token_env": "MY_TOKEN", "shards": "auto"}
    adapter = from_settings(Settings(adapters={"discord": section}), env=env)
    assert adapter is not None and adapter.token == "other-token-value-123"
    client = adapter._new_client()
    assert isinstance(client, discord.AutoShardedClient) and client.shard_count is None
    adapter = from_settings(Settings(adapters={"discord": {"enabled": True, "shards": 3}}), env=env)
    assert adapter is not None
    client = adapter._new_client()
    assert isinstance(client, discord.AutoShardedClient) and client.shard_count == 3
    assert client.intents.message_content and client.intents.guild_messages
    mentions = client.allowed_mentions
    assert mentions is not None and mentions.to_dict()["parse"] == []
    assert not (mentions.everyone or mentions.roles or mentions.users or mentions.replied_user)
    with pytest.raises(ConfigError, match="shards"):
        DiscordConfig.from_section({"shards": 0})


async def test_the_daemon_keeps_serving_when_discord_refuses_the_token(
    fake: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(RULES)
    fake.me_status = 401
    monkeypatch.setenv("DISCORD_TOKEN", TOKEN)
    settings = load_settings(
        env={},
        rules=str(rules),
        plugins=str(tmp_path / "none"),
        store=f"sqlite:///{tmp_path / 'tmy.db'}",
        http_listen="127.0.0.1:0",
        console=False,
        adapters={"discord": {"enabled": True}},
    )
    async with serving(settings=settings) as daemon:
        base = f"http://127.0.0.1:{daemon.http.port}"
        async with httpx.AsyncClient(base_url=base) as client:
            async with asyncio.timeout(10):
                while True:
                    report = (await client.get("/healthz")).json()
                    if report["adapters"]["discord"]["state"] == "failed":
                        break
                    await asyncio.sleep(0.02)
            assert "Discord refused the token (401)" in report["adapters"]["discord"]["error"]
            assert report["status"] == "degraded"
            answer = (await client.post("/v1/messages", json={"text": "echo still here"})).json()
            assert answer["answer"].endswith("|still here")
        with pytest.raises(AdapterError, match="not connected"):
            await daemon.send(Target("discord", str(CHANNEL_ID)), "hi")


# -- text ----------------------------------------------------------------------------------------


def test_strip_mention() -> None:
    assert strip_mention(f"<@{BOT_ID}> ping", BOT_ID) == ("ping", True)
    assert strip_mention(f"<@!{BOT_ID}>: ping", BOT_ID) == ("ping", True)
    assert strip_mention(f"hey <@{BOT_ID}> ping me", BOT_ID) == ("hey ping me", True)
    assert strip_mention(f"ping <@{BOT_ID}>", BOT_ID) == ("ping", True)
    assert strip_mention(f"line one <@{BOT_ID}>\nline two", BOT_ID) == ("line one\nline two", True)
    assert strip_mention(f"<@{USER_ID}> ping", BOT_ID) == (f"<@{USER_ID}> ping", False)
    assert strip_mention(f"<@&{ROLE_ID}> ping", BOT_ID, ROLE_ID) == ("ping", True)
    assert strip_mention(f"<@&{ROLE_ID}> ping", BOT_ID) == (f"<@&{ROLE_ID}> ping", False)
    assert strip_mention(f"<@{BOT_ID}>1 ping", BOT_ID + 1) == (f"<@{BOT_ID}>1 ping", False)


def _fences_balanced(piece: str) -> bool:
    return piece.count("```") % 2 == 0


def test_split_short_text_is_one_piece_and_blank_is_none() -> None:
    assert split_message("hello") == ["hello"]
    assert split_message("x" * MAX_TEXT) == ["x" * MAX_TEXT]
    assert split_message("") == [] and split_message(" \n \n") == []


def test_split_cuts_on_line_breaks() -> None:
    lines = [f"line {i:04d} " + "y" * 40 for i in range(150)]
    pieces = split_message("\n".join(lines))
    assert len(pieces) > 1 and all(len(p) <= MAX_TEXT for p in pieces)
    assert "\n".join(pieces).split("\n") == lines  # every cut is at a line break
    assert all(len(p) > MAX_TEXT - 60 for p in pieces[:-1])  # pieces are filled


def test_split_hard_cuts_a_line_longer_than_the_limit() -> None:
    pieces = split_message("a" * 4500)
    assert [len(p) for p in pieces] == [1996, 1996, 508]
    assert "".join(pieces) == "a" * 4500
    pieces = split_message("short\n" + "b" * 2500 + "\ntail")
    assert pieces[0] == "short" and all(len(p) <= MAX_TEXT for p in pieces)
    assert "".join(pieces[1:]).replace("\n", "") == "b" * 2500 + "tail"


def test_split_closes_and_reopens_code_blocks_with_their_language() -> None:
    code = "\n".join(f"    value_{i} = compute({i})  # a comment" for i in range(120))
    text = f"Here:\n```python\n{code}\n```\nAnd after.\n```\n{code}\n```"
    pieces = split_message(text)
    assert len(pieces) >= 3
    for i, piece in enumerate(pieces):
        assert len(piece) <= MAX_TEXT, i
        assert _fences_balanced(piece), piece[-60:]
    assert pieces[0].startswith("Here:\n```python\n")
    # every piece after a cut inside the first block reopens it as python
    inner = [p for p in pieces[1:] if "value_" in p and p.startswith("```")]
    assert inner and all(p.split("\n", 1)[0] in ("```python", "```") for p in inner)
    assert pieces[1].startswith("```python\n")
    # stripping the added fences gives back the original lines
    joined = "\n".join(pieces)
    assert joined.count("value_119 = compute(119)") == 2
    assert "And after." in joined


def test_split_respects_the_limit_including_added_fences() -> None:
    for width in (1, 7, 50, 199, 1995, 1996, 1997, 1999, 2000, 2001, 2500):
        text = "```js\n" + "\n".join("z" * width for _ in range(12)) + "\n```"
        pieces = split_message(text)
        assert all(len(p) <= MAX_TEXT for p in pieces), width
        assert all(_fences_balanced(p) for p in pieces), width
        assert all(p.startswith("```js") for p in pieces), width
        stripped = [re.sub(r"^```js\n|\n```$", "", p) for p in pieces]
        assert "".join(stripped).replace("\n", "") == "z" * width * 12, width


def test_split_small_limits_and_odd_fences() -> None:
    text = "\n".join(["```"] + [f"row {i}" for i in range(40)] + ["```", "done"])
    pieces = split_message(text, limit=100)
    assert all(len(p) <= 100 and _fences_balanced(p) for p in pieces)
    assert pieces[-1].endswith("done")
    # an inline ```one-liner``` does not open a block; a fence in mid-line does (as Discord renders)
    assert split_message("use ```x``` here") == ["use ```x``` here"]
    body = "see ```py\n" + "\n".join("q" * 60 for _ in range(5)) + "\n``` end"
    pieces = split_message(body, limit=150)
    assert all(len(p) <= 150 and _fences_balanced(p) for p in pieces)
    assert pieces[1].startswith("```py\n")
    # a language tag that is not one word is not repeated
    pieces = split_message("```not a tag\n" + "\n".join("w" * 50 for _ in range(5)), limit=130)
    assert pieces[1].startswith("```\n")
    with pytest.raises(ValueError):
        split_message("x", limit=20)


def test_split_random_texts_keep_every_line_and_balance_every_piece() -> None:
    rng = random.Random(8)
    for _ in range(300):
        limit = rng.choice([120, 300, MAX_TEXT])
        out: list[str] = []
        open_block = False
        for _ in range(rng.randint(1, 120)):
            if rng.random() < 0.12 and not (out and out[-1].startswith("```")):
                out.append("```" if open_block else rng.choice(["```", "```py", "```c++"]))
                open_block = not open_block
            else:
                out.append("w" * rng.randint(0, limit // 2 - 20))
        if open_block:
            out.extend(["w", "```"])
        text = "\n".join(out)
        pieces = split_message(text, limit=limit)
        assert all(len(p) <= limit and _fences_balanced(p) and p.strip() for p in pieces)
        # no piece is an empty code block, and no text line is lost or reordered
        assert not any(re.fullmatch(r"```[\w+]*\n```", p) for p in pieces)

        def words(s: str) -> list[str]:
            return [ln for ln in s.split("\n") if ln.strip() and not ln.startswith("```")]

        assert [w for p in pieces for w in words(p)] == words(text)
