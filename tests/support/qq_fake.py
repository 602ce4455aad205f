"""A fake of QQ's official bot API on loopback, for tests (written from bot.q.qq.com/wiki).

It serves what tmy uses, the way QQ documents it:

* ``POST /app/getAppAccessToken`` ``{"appId", "clientSecret"}`` → ``{"access_token",
  "expires_in"}`` (seconds, a string); a wrong app id or secret gets QQ's
  ``{"code", "message"}`` and no token. A token expires after :attr:`FakeQQ.lifetime`
  seconds (then the API answers 401), and :meth:`FakeQQ.revoke` ends every token now.
  :attr:`FakeQQ.token_busy` answers that many token requests HTTP 429.
* The OpenAPI checks ``Authorization: QQBot <token>`` and ``X-Union-Appid`` on every
  call (401 otherwise): ``GET /users/@me``, ``GET /gateway/bot``, the four send
  endpoints (recorded in :attr:`FakeQQ.sent`; a group/C2C reply repeating a
  ``msg_id`` + ``msg_seq`` pair is refused as QQ does), the rich-media upload
  ``POST /v2/{groups|users}/{id}/files`` and ``GET /guilds/{id}/channels``.
  :attr:`FakeQQ.rate_limited` answers that many sends with HTTP 429 / code 22009;
  :attr:`FakeQQ.lose_answers` takes that many sends but answers them 502.
* The WebSocket gateway at ``/websocket``: op 10 Hello, op 2 Identify (the token
  checked: close 4004 when bad; close 4014 when a public bot, ``private_bot = False``,
  asks for GUILD_MESSAGES) answered by ``READY``, op 6 Resume replaying the
  events after the given ``seq`` then ``RESUMED``, op 1 heartbeats answered by op 11.
  :meth:`FakeQQ.push` delivers a dispatch with the next ``s``; :meth:`FakeQQ.drop`
  cuts the connection (events pushed meanwhile wait for a resume).
* Webhooks: :meth:`FakeQQ.post_webhook` POSTs a payload to the bot's URL signed as
  QQ signs (ed25519 over timestamp + body, the key seeded with the secret repeated
  to 32 bytes).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

APP_ID = "102030405"
SECRET = "DG5g3B4j9X2KOErG"  # the secret of QQ's own validation example
BOT_ID = "11586990140073229091"
BOT_NAME = "tmy-test"
GROUP = "C9F778FE6ADF9D1D1DBE395BF744A33A"
MEMBER = "E4F4AEA33253A2797FB897C50B81D7ED"
USER = "A1B2C3D4E5F60718293A4B5C6D7E8F90"
GUILD = "18700000000001"
CHANNEL = "100010"
GUILD_MESSAGES = 1 << 9  # every channel message: private (私域) bots only
AUTHOR = {"id": "1234", "username": "ann", "avatar": "", "bot": False}


def qq_key(secret: str) -> Ed25519PrivateKey:
    """QQ's signing key: the secret repeated until 32 bytes is the ed25519 seed."""
    seed = secret
    while len(seed) < 32:
        seed = seed * 2
    return Ed25519PrivateKey.from_private_bytes(seed[:32].encode())


class FakeQQ:
    """One fake QQ (token endpoint, OpenAPI, gateway); ``base`` is the ``api_base``."""

    def __init__(self, app_id: str = APP_ID, secret: str = SECRET) -> None:
        self.app_id, self.secret = app_id, secret
        self.lifetime = 7200  # seconds a token lives
        self.heartbeat_interval = 30_000  # ms, in Hello
        self.tokens: dict[str, float] = {}  # token -> monotonic expiry
        self.token_requests = 0
        self.token_busy = 0  # the next token requests answered HTTP 429
        self.sent: list[dict[str, Any]] = []  # {"kind", "target", "body"} of accepted sends
        self.attempts: list[dict[str, Any]] = []  # every send request, accepted or not
        self.uploads: list[dict[str, Any]] = []
        self.refused: list[tuple[str, int]] = []  # (path, status) of API calls refused
        self.rate_limited = 0  # the next sends answered 429
        self.lose_answers = 0  # the next sends accepted, but answered 502 (the answer lost)
        self.gateway_refuses = False  # every Identify closed 4004, as for a bot without it
        self.private_bot = True  # a public (公域) bot is refused GUILD_MESSAGES: close 4014
        self.ops: list[int] = []  # ops received on the gateway, in order
        self.heartbeats: list[int | None] = []  # the ``d`` (last s) of each op 1
        self.events: list[dict[str, Any]] = []  # every dispatch pushed (for resumes)
        self.channels = [{"id": "ch-voice", "type": 2}, {"id": "ch-welcome", "type": 0}]
        self._seq = itertools.count(1)
        self._ids = itertools.count(1)
        self._ws: web.WebSocketResponse | None = None
        self._ws_seq = 0  # the last s the connected client got
        self._sessions: set[str] = set()
        self._connected = asyncio.Event()
        self._sent_event = asyncio.Event()
        self._seen_seqs: set[tuple[str, int]] = set()
        self._runner: web.AppRunner | None = None
        self._taken = 0  # sends next_sent handed out
        self.port = 0

    # -- server ------------------------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.base}/app/getAppAccessToken"

    async def __aenter__(self) -> FakeQQ:
        app = web.Application()
        app.router.add_post("/app/getAppAccessToken", self._token)
        app.router.add_get("/websocket", self._gateway)
        app.router.add_route("*", "/{path:.*}", self._api)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        assert self._runner is not None
        await self._runner.cleanup()

    def revoke(self) -> None:
        """Every token issued so far stops working (expired early)."""
        self.tokens.clear()

    async def _token(self, request: web.Request) -> web.Response:
        self.token_requests += 1
        body = await request.json()
        if self.token_busy > 0:
            self.token_busy -= 1
            return web.json_response({"code": 100001, "message": "too many requests"}, status=429)
        if body.get("appId") != self.app_id or body.get("clientSecret") != self.secret:
            return web.json_response({"code": 100016, "message": "invalid appid or secret"})
        token = f"tok-{next(self._ids)}"
        self.tokens[token] = time.monotonic() + self.lifetime
        return web.json_response({"access_token": token, "expires_in": str(self.lifetime)})

    def _authorised(self, header: str, appid: str | None = "") -> bool:
        scheme, _, token = header.partition(" ")
        expiry = self.tokens.get(token)
        ok_app = appid is None or appid == self.app_id
        return scheme == "QQBot" and expiry is not None and expiry > time.monotonic() and ok_app

    # -- OpenAPI -----------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        auth = request.headers.get("Authorization", "")
        if not self._authorised(auth, request.headers.get("X-Union-Appid")):
            self.refused.append((path, 401))
            return web.json_response({"code": 11244, "message": "token not exist or expire"},
                                     status=401)  # fmt: skip
        body = await request.json() if request.can_read_body else None
        parts = path.strip("/").split("/")
        if request.method == "GET" and path == "/users/@me":
            return web.json_response({"id": BOT_ID, "username": BOT_NAME, "bot": True})
        if request.method == "GET" and path in ("/gateway", "/gateway/bot"):
            return web.json_response({"url": f"ws://127.0.0.1:{self.port}/websocket", "shards": 1})
        if request.method == "GET" and parts[0] == "guilds" and parts[-1] == "channels":
            return web.json_response(self.channels)
        if request.method == "POST" and parts[-1] == "files":
            self.uploads.append({"target": parts[-2], "body": body})
            return web.json_response({"file_uuid": "u1", "file_info": f"FI-{len(self.uploads)}",
                                      "ttl": 3600})  # fmt: skip
        if request.method == "POST" and parts[-1] == "messages":
            return self._send(parts, body or {})
        return web.json_response({"code": 404, "message": "no such API"}, status=404)

    def _send(self, parts: list[str], body: dict[str, Any]) -> web.Response:
        kind = {"groups": "group", "users": "c2c", "channels": "channel", "dms": "dm"}[parts[-3]]
        record = {"kind": kind, "target": parts[-2], "body": body}
        self.attempts.append(record)
        if self.rate_limited > 0:
            self.rate_limited -= 1
            return web.json_response({"code": 22009, "message": "msg limit exceed"}, status=429)
        if kind in ("group", "c2c"):
            if body.get("msg_type") not in (0, 2, 3, 4, 7) or "content" not in body:
                return web.json_response({"code": 50006, "message": "bad body"}, status=400)
            if body.get("msg_id"):
                pair = (body["msg_id"], int(body.get("msg_seq") or 1))
                if pair in self._seen_seqs:
                    return web.json_response({"code": 40054005, "message": "消息被去重"},
                                             status=400)  # fmt: skip
                self._seen_seqs.add(pair)
        self.sent.append(record)
        self._sent_event.set()
        if self.lose_answers > 0:
            self.lose_answers -= 1
            return web.json_response({"message": "bad gateway"}, status=502)
        return web.json_response({"id": f"sent-{len(self.sent)}", "timestamp": int(time.time())})

    async def next_sent(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next accepted send not yet taken (waits for it)."""
        async with asyncio.timeout(timeout):
            while self._taken >= len(self.sent):
                self._sent_event.clear()
                await self._sent_event.wait()
        self._taken += 1
        return self.sent[self._taken - 1]

    async def nothing_sent(self, wait: float = 0.3) -> None:
        await asyncio.sleep(wait)
        assert self._taken >= len(self.sent), self.sent[self._taken :]

    # -- gateway -----------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval}})
        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                continue
            payload = json.loads(frame.data)
            self.ops.append(payload.get("op"))
            await self._on_op(ws, payload)
        if self._ws is ws:
            self._ws = None
            self._connected.clear()
        return ws

    async def _on_op(self, ws: web.WebSocketResponse, payload: dict[str, Any]) -> None:
        op, d = payload.get("op"), payload.get("d") or {}
        if op == 1:
            self.heartbeats.append(payload.get("d"))
            await ws.send_json({"op": 11})
        elif op in (2, 6) and (
            self.gateway_refuses or not self._authorised(str(d.get("token", "")), None)
        ):
            await ws.close(code=4004, message=b"invalid token")
        elif op == 2 and not self.private_bot and int(d.get("intents") or 0) & GUILD_MESSAGES:
            await ws.close(code=4014, message=b"disallowed intents")
        elif op == 2:
            session = f"session-{next(self._ids)}"
            self._sessions.add(session)
            ready = {"version": 1, "session_id": session, "shard": [0, 1],
                     "user": {"id": BOT_ID, "username": BOT_NAME, "bot": True}}  # fmt: skip
            self._attach(ws, 0)
            await self._deliver({"op": 0, "s": next(self._seq), "t": "READY", "d": ready})
        elif op == 6:
            if d.get("session_id") not in self._sessions:
                await ws.send_json({"op": 9, "d": False})
                return
            self._attach(ws, int(d.get("seq") or 0))
            for event in [e for e in self.events if e["s"] > int(d.get("seq") or 0)]:
                await ws.send_json(event)
            await self._deliver({"op": 0, "s": next(self._seq), "t": "RESUMED", "d": ""})

    def _attach(self, ws: web.WebSocketResponse, seq: int) -> None:
        self._ws, self._ws_seq = ws, seq
        self._connected.set()

    async def _deliver(self, payload: dict[str, Any]) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.send_json(payload)

    async def connected(self, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            await self._connected.wait()

    async def push(self, kind: str, d: dict[str, Any], event_id: str = "") -> dict[str, Any]:
        """A dispatch to the connected client (kept for a resume when none is)."""
        payload = {"op": 0, "s": next(self._seq), "t": kind, "d": d,
                   "id": event_id or f"{kind}:{next(self._ids)}"}  # fmt: skip
        self.events.append(payload)
        await self._deliver(payload)
        return payload

    async def send_raw(self, text: str) -> None:
        """A text frame exactly as given to the connected client (a malformed one, say)."""
        assert self._ws is not None
        await self._ws.send_str(text)

    async def post_api(self, path: str, body: dict[str, Any]) -> int:
        """POST to the fake's own OpenAPI with a fresh token, as another process of the bot
        would (the status it got)."""
        async with aiohttp.ClientSession() as client:
            async with client.post(
                self.token_url, json={"appId": self.app_id, "clientSecret": self.secret}
            ) as resp:
                token = (await resp.json())["access_token"]
            headers = {"Authorization": f"QQBot {token}", "X-Union-Appid": self.app_id}
            async with client.post(self.base + path, json=body, headers=headers) as resp:
                return resp.status

    def forget_sessions(self) -> None:
        """Sessions end on QQ's side: a resume is answered op 9 (invalid session)."""
        self._sessions.clear()

    async def drop(self) -> None:
        """Cut the gateway connection as a network failure would (no resume refused)."""
        ws, self._ws = self._ws, None
        self._connected.clear()
        if ws is not None:
            await ws.close(code=1011, message=b"lost")

    # -- webhooks ----------------------------------------------------------------------------

    def signed(self, body: bytes, timestamp: str | None = None) -> dict[str, str]:
        ts = timestamp or str(int(time.time()))
        signature = qq_key(self.secret).sign(ts.encode() + body).hex()
        return {"X-Signature-Ed25519": signature, "X-Signature-Timestamp": ts,
                "X-Signature-Method": "Ed25519", "X-Bot-Appid": self.app_id,
                "User-Agent": "QQBot-Callback", "Content-Type": "application/json"}  # fmt: skip

    async def post_webhook(
        self, url: str, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """POST ``payload`` to the bot as QQ does (signed unless ``headers`` are given)."""
        body = json.dumps(payload, ensure_ascii=False).encode()
        async with aiohttp.ClientSession() as client:
            sent_headers = self.signed(body) if headers is None else headers
            async with client.post(url, data=body, headers=sent_headers) as resp:
                return resp.status, await resp.json(content_type=None)


# -- payloads as QQ sends them ------------------------------------------------------------------


def group_at(text: str, msg_id: str = "", group: str = GROUP, member: str = MEMBER,
             **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"author": {"member_openid": member, "id": member}, "content": text,
            "group_openid": group, "group_id": group, "id": msg_id or f"ROBOT1.0_g{time.time_ns()}",
            "timestamp": "2023-11-06T13:37:18+08:00", **extra}  # fmt: skip


def c2c(text: str, msg_id: str = "", user: str = USER, **extra: Any) -> dict[str, Any]:
    return {"author": {"user_openid": user, "id": user}, "content": text,
            "id": msg_id or f"ROBOT1.0_c{time.time_ns()}",
            "timestamp": "2023-11-06T13:37:18+08:00", **extra}  # fmt: skip


def channel_message(text: str, msg_id: str = "", *, roles: tuple[str, ...] = ("1",),
                    mentions: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"author": AUTHOR, "channel_id": CHANNEL, "guild_id": GUILD, "content": text,
            "id": msg_id or f"08{time.time_ns()}", "seq": 101,
            "member": {"joined_at": "2021-04-12T16:34:42+08:00", "roles": list(roles)},
            "mentions": [{"id": m, "username": "x", "bot": m == BOT_ID} for m in mentions],
            "timestamp": "2021-05-20T15:14:58+08:00", **extra}  # fmt: skip


def member_add(user_id: str = "5555", nick: str = "Bob", op_user_id: str = "") -> dict[str, Any]:
    return {"guild_id": GUILD, "joined_at": "2021-04-12T16:34:42+08:00", "nick": nick,
            "op_user_id": op_user_id or user_id, "roles": ["1"],
            "user": {"id": user_id, "username": nick, "avatar": "", "bot": False}}  # fmt: skip
