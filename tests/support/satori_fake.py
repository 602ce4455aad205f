"""A fake Satori server (the SDK side of satori.chat's protocol) on loopback, for tests.

Written from the protocol's documentation (protocol/events, protocol/api, resources/*):

* **Events** at ``{path}/v1/events`` (WebSocket): the client must send ``IDENTIFY``
  (op 3) first; a wrong token is answered by closing with code 4004 "invalid token"
  (as Koishi's server plugin does); otherwise ``READY`` (op 4, ``{logins,
  proxy_urls}``), and when IDENTIFY carried an ``sn``, every buffered event after it
  (session recovery). ``PING`` (op 1) is answered ``PONG`` (op 2). Events (op 0) carry
  ``sn``, ``type``, ``timestamp`` and ``login: {sn, platform, user}``.
* **API** at ``POST {path}/v1/{resource}.{method}``: ``Authorization: Bearer`` checked
  (403 "invalid token"), ``Satori-Platform`` + ``Satori-User-ID`` must name a login (403
  "login not found"); every call is recorded. ``message.create`` answers a list of
  Message; ``message.get``, ``guild.member.get`` (from :attr:`members`),
  ``user.channel.create``, ``friend.approve``, ``guild.approve``,
  ``guild.member.approve``, ``login.get``; anything else 404. :attr:`fail` queues
  answers (status, headers, text) for a method: a 429 with ``Retry-After``; a method in
  :attr:`stalled` is recorded and then never answered (a hung server) until the fake stops.
* **Proxy** at ``GET {path}/v1/proxy/{url}``: ``internal:`` URLs served from :attr:`files`.

It serves two logins by default: QQ (``10001``) and Discord (``20002``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import WSMsgType, web

from tests.support.adapters import wait_state
from tmy.adapters.satori import SatoriAdapter, SatoriConfig
from tmy.message import Message, Reply
from tmy.testing import Bot

TOKEN = "satori-test-token"
QQ_BOT = "10001"
DISCORD_BOT = "20002"
ALICE = {"id": "501", "name": "alice", "nick": "Alice"}
BOB = {"id": "502", "name": "bob"}
GROUP = "g900"  # a QQ group: its guild and its one channel share the id
APPROVALS = ("friend.approve", "guild.approve", "guild.member.approve")


def login(platform: str, user_id: str, sn: int, name: str = "tmy") -> dict[str, Any]:
    return {"sn": sn, "platform": platform, "user": {"id": user_id, "name": name},
            "status": 1, "adapter": platform, "features": ["message.create"]}  # fmt: skip


class FakeSatori:
    """One fake server; ``base`` is what ``api_base`` should be set to."""

    def __init__(self, token: str = TOKEN, path: str = "/satori") -> None:
        self.token = token
        self.path = path
        self.logins = [login("qq", QQ_BOT, 1), login("discord", DISCORD_BOT, 2)]
        self.buffer: list[dict[str, Any]] = []  # events sent, for session recovery
        self.identifies: list[dict[str, Any]] = []  # IDENTIFY bodies, in order
        self.refused = 0  # connections closed for a wrong token
        self.calls: list[dict[str, Any]] = []  # {method, platform, user, body, auth}
        self.fail: dict[str, list[tuple[int, dict[str, str], str]]] = {}
        self.stalled: set[str] = set()  # methods recorded, then left unanswered until exit
        self._unstall = asyncio.Event()
        self.members: dict[tuple[str, str], dict[str, Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self.pings = 0
        self.proxy_urls: list[str] = []  # READY's: URLs the proxy route fetches
        self.close_after_ready = False  # close each connection right after READY
        self.close_on_identify: tuple[int, bytes] | None = None  # close so instead of READY
        self.upgrade_status: int | None = None  # refuse the WebSocket upgrade with this
        self._taken = 0  # message.create calls next_sent has handed out
        self._sn = itertools.count(1)
        self._ids = itertools.count(1)
        self._sockets: list[web.WebSocketResponse] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.base = ""

    async def __aenter__(self) -> FakeSatori:
        app = web.Application()
        app.router.add_get(f"{self.path}/v1/events", self._events)
        app.router.add_get(f"{self.path}/v1/proxy/{{url:.+}}", self._proxy)
        app.router.add_post(f"{self.path}/v1/{{method}}", self._api)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}{self.path}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._unstall.set()
        await self.drop()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the event service ---------------------------------------------------------------------

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if self.upgrade_status is not None:
            self.refused += 1
            return web.Response(status=self.upgrade_status, text="invalid token")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        try:
            first = await ws.receive(timeout=10)
            frame = json.loads(first.data) if first.type == WSMsgType.TEXT else {}
        except (TimeoutError, ValueError):
            await ws.close(code=4000, message=b"invalid message")
            return ws
        if frame.get("op") != 3:
            await ws.close(code=4000, message=b"identify first")
            return ws
        body = frame.get("body") or {}
        self.identifies.append(body)
        if self.close_on_identify is not None:  # LLOneBot on a wrong path: 1008 invalid address
            self.refused += 1
            await self._notify()
            await ws.close(code=self.close_on_identify[0], message=self.close_on_identify[1])
            return ws
        if self.token and body.get("token") != self.token:
            self.refused += 1
            await self._notify()
            await ws.close(code=4004, message=b"invalid token")
            return ws
        await ws.send_json({"op": 4, "body": {"logins": self.logins,
                                              "proxy_urls": self.proxy_urls}})  # fmt: skip
        try:
            for event in self.buffer if isinstance(body.get("sn"), int) else ():
                if event["sn"] > body["sn"]:
                    await ws.send_json({"op": 0, "body": event})
        except ConnectionError:  # the client refused a replayed frame (too large)
            return ws
        if self.close_after_ready:
            await self._notify()
            await ws.close(code=1001, message=b"going away")
            return ws
        self._sockets.append(ws)
        await self._notify()
        async for msg in ws:
            if msg.type == WSMsgType.TEXT and json.loads(msg.data).get("op") == 1:
                self.pings += 1
                await ws.send_json({"op": 2, "body": {}})
        if ws in self._sockets:
            self._sockets.remove(ws)
        return ws

    async def emit(self, type: str, platform: str = "qq", **resources: Any) -> dict[str, Any]:
        """Push one event to every identified client (and keep it for session recovery)."""
        sn = next(self._sn)
        who = next(item for item in self.logins if item["platform"] == platform)
        event = {"sn": sn, "type": type, "timestamp": int(time.time() * 1000) + sn,
                 "login": {"sn": who["sn"], "platform": platform, "user": who["user"]},
                 **resources}  # fmt: skip
        self.buffer.append(event)
        await self.push(event)
        return event

    async def push(self, event: dict[str, Any]) -> None:
        """Send ``event`` as it is (a duplicate, a login event) to every identified client."""
        for ws in list(self._sockets):
            try:
                await ws.send_json({"op": 0, "body": event})
            except ConnectionError:  # the client went away meanwhile (a frame it refused)
                self._sockets.remove(ws)

    async def push_raw(self, frame: str) -> None:
        """Send ``frame`` as it is (not JSON, not a signal …) to every identified client."""
        for ws in list(self._sockets):
            await ws.send_str(frame)

    async def message(
        self,
        content: str,
        *,
        platform: str = "qq",
        channel: str = GROUP,
        user: dict[str, Any] | None = None,
        private: bool = False,
        message_id: str | None = None,
        member: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A user writes ``content`` (Satori elements) in ``channel``."""
        message_id = message_id or f"in{next(self._ids)}"
        user = user or ALICE
        self.messages[message_id] = {"id": message_id, "content": content, "user": user}
        resources: dict[str, Any] = {
            "channel": {"id": channel, "type": 1 if private else 0},
            "message": {"id": message_id, "content": content},
            "user": user,
        }
        if not private:
            resources["guild"] = {"id": channel}
            resources["member"] = member or {"nick": user.get("nick") or user["name"]}
        return await self.emit("message-created", platform, **resources)

    async def drop(self) -> None:
        """Close every client's connection from the server side (a lost connection)."""
        for ws in list(self._sockets):
            await ws.close(code=1001, message=b"going away")
        self._sockets.clear()

    async def add_login(self, platform: str, user_id: str) -> None:
        new = login(platform, user_id, len(self.logins) + 1)
        self.logins.append(new)
        await self.push({"sn": next(self._sn), "type": "login-added",
                         "timestamp": int(time.time() * 1000), "login": new})  # fmt: skip

    # -- the API -------------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        auth = request.headers.get("Authorization", "")
        if self.token and auth != f"Bearer {self.token}":
            return web.Response(status=403, text="invalid token")
        platform = request.headers.get("Satori-Platform", "")
        user = request.headers.get("Satori-User-ID", "")
        me = next((x for x in self.logins
                   if x["platform"] == platform and x["user"]["id"] == user), None)  # fmt: skip
        if me is None:
            return web.Response(status=403, text="login not found")
        body = await request.json()
        self.calls.append({"method": method, "platform": platform, "user": user, "body": body})
        await self._notify()
        if method in self.stalled:
            await self._unstall.wait()
        queued = self.fail.get(method)
        if queued:
            status, headers, text = queued.pop(0)
            return web.Response(status=status, headers=headers, text=text)
        return self._answer(method, body, me)

    def _answer(self, method: str, body: dict[str, Any], me: dict[str, Any]) -> web.Response:
        if method == "message.create":
            sent = {"id": f"out{next(self._ids)}", "content": body["content"]}
            self.messages[sent["id"]] = {**sent, "user": me["user"]}
            return web.json_response([sent])
        if method == "message.get":
            found = self.messages.get(body.get("message_id", ""))
            return web.json_response(found) if found else web.Response(status=404)
        if method == "guild.member.get":
            key = (body.get("guild_id", ""), body.get("user_id", ""))
            return web.json_response(self.members.get(key, {"user": {"id": key[1]}}))
        if method == "user.channel.create":
            return web.json_response({"id": f"private:{body['user_id']}", "type": 1})
        if method in APPROVALS:
            return web.json_response({})
        if method == "login.get":
            return web.json_response(me)
        return web.Response(status=404, text="method not found")

    async def _proxy(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["url"])
        return (
            web.Response(body=data, content_type="image/png") if data else web.Response(status=404)
        )

    # -- what tests wait for -------------------------------------------------------------------

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["method"] == method]

    async def wait_calls(
        self, method: str, count: int = 1, timeout: float = 10
    ) -> list[dict[str, Any]]:
        """The first ``count`` calls of ``method``, once there are that many."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.calls_of(method)) >= count)
        return self.calls_of(method)[:count]

    async def next_sent(self, timeout: float = 10) -> dict[str, Any]:
        """The next ``message.create`` not yet taken by this method."""
        calls = await self.wait_calls("message.create", self._taken + 1, timeout)
        self._taken += 1
        return calls[-1]

    async def nothing_sent(self, wait: float = 0.3) -> None:
        before = len(self.calls_of("message.create"))
        await asyncio.sleep(wait)
        assert len(self.calls_of("message.create")) == before, self.calls_of("message.create")

    async def wait_identified(self, count: int = 1, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.identifies) >= count)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


# -- the adapter driven against the fake, with the real engine -------------------------------------


class Driven:
    """The adapter started against a fake; ``seen`` keeps each Message the engine got."""

    def __init__(self, fake: FakeSatori, adapter: SatoriAdapter, bot: Bot) -> None:
        self.fake, self.adapter, self.bot = fake, adapter, bot
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)

    async def state(self, state: str, timeout: float = 10) -> dict[str, Any]:
        """The adapter's health once it reaches ``state``."""
        await wait_state(self.adapter, state, timeout)
        return self.adapter.health()


def make_adapter(base: str, token: str = TOKEN, **config: Any) -> SatoriAdapter:
    adapter = SatoriAdapter(SatoriConfig(enabled=True, api_base=base, **config), token=token)
    adapter.backoff_base, adapter.backoff_cap, adapter.send_interval = 0.02, 0.1, 0.0
    return adapter


@asynccontextmanager
async def driven(
    rules: str, *, token: str = TOKEN, connected: bool = True, **config: Any
) -> AsyncIterator[Driven]:
    """A fake server, a Bot with ``rules`` and the adapter between them (its store the Bot's)."""
    async with FakeSatori() as fake, Bot({"r.yaml": rules}) as bot:
        adapter = make_adapter(fake.base, token, **config)
        adapter._deliveries.store = bot.engine.services.store
        d = Driven(fake, adapter, bot)
        await adapter.start(d.handle)
        try:
            if connected:
                await d.state("connected")
            yield d
        finally:
            await adapter.stop()
