"""A fake Feishu / Lark open platform on loopback, written from open.feishu.cn's documents.

It answers as open.feishu.cn does (``{"code": 0, "msg": …}``, a non-zero ``code`` with
Feishu's HTTP status): the tenant access token (for the right app_id/app_secret only, else
code 10014; every other ``/open-apis/`` call needs a live token, else 99991663), the bot's
info, sending and replying (recorded, :meth:`FakeFeishu.next_sent`; :attr:`flood` answers the
next ones HTTP 429 / code 99991400 with ``x-ogw-ratelimit-reset``), image upload, message and
chat lookups. The long connection: ``/callback/ws/endpoint`` (AppID/AppSecret checked) and a
WebSocket whose frames are encoded and decoded with the **official SDK's** generated
``pbbp2_pb2.Frame`` (the reference tmy's codec is checked against): pings answered with
pongs, events pushed as data frames (:meth:`push`), acknowledgements recorded
(:meth:`acked`), :meth:`drop` cuts it (:attr:`hangup`, :attr:`frozen`: a server closing each
connection at once, or never reading one again). Webhook requests are built by
:meth:`webhook_request`: AES-256-CBC with sha256(encrypt_key) and a random IV, signed
``X-Lark-Signature`` = sha256(timestamp + nonce + encrypt_key + body).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import itertools
import json
import os
import time
from typing import Any

from aiohttp import WSMsgType, web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

APP_ID = "cli_a1b2c3d4e5f6"
APP_SECRET = "fake-app-secret-0123456789"
VERIFICATION_TOKEN = "fake-verification-token"
ENCRYPT_KEY = "fake-encrypt-key"
BOT_OPEN_ID = "ou_bot0000000000000000000000000"
USER = "ou_ann000000000000000000000000"
BOB = "ou_bob000000000000000000000000"
GROUP = "oc_group0000000000000000000000"
P2P = "oc_p2p00000000000000000000000"
TICKET = "-tkt-5f0e2a9c-"  # in each long connection's access_key and ticket


def encrypt(plain: bytes, key: str) -> str:
    """Feishu's event encryption: AES-256-CBC, key sha256(key), a random IV in front."""
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    data = padder.update(plain) + padder.finalize()
    enc = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + enc.update(data) + enc.finalize()).decode()


def lark_signature(timestamp: str, nonce: str, key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + key).encode() + body).hexdigest()


@functools.cache
def _sdk_frame() -> Any:
    """lark-oapi's Frame, imported on first use (lark_oapi takes ~2 s to import)."""
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame

    return Frame


class FakeFeishu:
    """One fake open platform; ``base`` is what ``api_base`` should be set to."""

    def __init__(self) -> None:
        self.app_id, self.app_secret = APP_ID, APP_SECRET
        self.token_ttl = 7200
        self.tokens: dict[str, float] = {}  # token -> expiry (time.time())
        self.token_requests = 0
        self.token_glitches = 0  # the next token requests get a gateway's page (HTTP 200)
        self.used_tokens: list[str] = []  # the token of each authorised call
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.flood = 0  # the next sends refused with 429 / 99991400
        self.flood_reset: float = 1
        self.refused_sends: list[float] = []  # time.monotonic() of each refused send
        self.messages: dict[str, dict[str, Any]] = {}  # message id -> GET message item
        self.chats: dict[str, dict[str, Any]] = {}  # chat id -> chat info
        self.images: dict[str, bytes] = {}
        self.sockets: list[web.WebSocketResponse] = []
        self.connections = self.pings = 0
        self.answer_pings = True  # False: a connection gone silent (no pong comes back)
        self.hangup = False  # True: each long connection is closed as soon as it opens
        self.frozen = False  # True: a new long connection is never read (nor closed) again
        self.refuse_upgrade = False  # True: the WebSocket handshake is answered 403
        self.ping_interval: float = 120
        self.acks: dict[str, dict[str, Any]] = {}  # frame message_id -> ack payload
        self._acked = asyncio.Condition()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base = ""

    # -- server -------------------------------------------------------------------------------

    async def __aenter__(self) -> FakeFeishu:
        app = web.Application(middlewares=[self._authorised])
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_get("/open-apis/bot/v3/info", self._bot_info)
        app.router.add_post("/open-apis/im/v1/messages", self._send)
        app.router.add_post("/open-apis/im/v1/messages/{id}/reply", self._reply)
        app.router.add_get("/open-apis/im/v1/messages/{id}", self._get_message)
        app.router.add_post("/open-apis/im/v1/images", self._image)
        app.router.add_get("/open-apis/im/v1/chats/{id}", self._chat)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.frozen = False
        for ws in list(self.sockets):
            await ws.close()
        assert self._runner is not None
        await self._runner.cleanup()

    @staticmethod
    def _error(status: int, code: int, msg: str, **headers: str) -> web.Response:
        return web.json_response({"code": code, "msg": msg}, status=status, headers=headers)

    @web.middleware
    async def _authorised(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every ``/open-apis/`` call but the token's needs a live tenant access token."""
        if request.path.startswith("/open-apis/") and not request.path.startswith(
            "/open-apis/auth/"
        ):
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if self.tokens.get(token, 0) <= time.time():
                return self._error(400, 99991663, "Invalid access token for authorization")
            self.used_tokens.append(token)
        return await handler(request)

    async def _token(self, request: web.Request) -> web.Response:
        self.token_requests += 1
        if self.token_glitches > 0:
            self.token_glitches -= 1
            return web.Response(text="<html>upstream busy</html>", content_type="text/html")
        body = await request.json()
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return self._error(400, 10014, "app secret invalid")
        token = f"t-{next(self._ids):06d}-fake"
        self.tokens[token] = time.time() + self.token_ttl
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": self.token_ttl}
        )

    async def _bot_info(self, request: web.Request) -> web.Response:
        bot = {"open_id": BOT_OPEN_ID, "app_name": "tmy test bot", "activate_status": 2}
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    # -- messages -----------------------------------------------------------------------------

    async def _record(self, request: web.Request, record: dict[str, Any]) -> web.Response:
        if self.flood > 0:
            self.flood -= 1
            self.refused_sends.append(time.monotonic())
            limit = {"x-ogw-ratelimit-limit": "5", "x-ogw-ratelimit-reset": str(self.flood_reset)}
            return self._error(429, 99991400, "request trigger frequency limit", **limit)
        body = await request.json()
        record.update(msg_type=body["msg_type"], content=json.loads(body["content"]))
        record["uuid"] = body.get("uuid")
        message_id = f"om_bot_{next(self._ids)}"
        chat = record.get("receive_id") or self.messages.get(record.get("message_id", ""), {}).get(
            "chat_id", ""
        )
        self.messages[message_id] = {
            "message_id": message_id,
            "chat_id": chat,
            "msg_type": body["msg_type"],
            "body": {"content": body["content"]},
            "sender": {"id": self.app_id, "id_type": "app_id", "sender_type": "app"},
        }
        record["sent_id"] = message_id
        await self.sent.put(record)
        return web.json_response(
            {"code": 0, "msg": "success", "data": {"message_id": message_id, "chat_id": chat}}
        )

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        kind = request.query.get("receive_id_type")
        record = {"kind": "send", "receive_id": body.get("receive_id"), "receive_id_type": kind}
        return await self._record(request, record)

    async def _reply(self, request: web.Request) -> web.Response:
        body = await request.json()
        if request.match_info["id"] not in self.messages:
            return self._error(400, 230011, "The message was withdrawn.")
        return await self._record(
            request,
            {
                "kind": "reply",
                "message_id": request.match_info["id"],
                "reply_in_thread": body.get("reply_in_thread", False),
            },
        )

    async def _get_message(self, request: web.Request) -> web.Response:
        item = self.messages.get(request.match_info["id"])
        if item is None:
            return self._error(400, 230001, "message not found")
        return web.json_response({"code": 0, "msg": "success", "data": {"items": [item]}})

    async def _image(self, request: web.Request) -> web.Response:
        form = await request.post()
        image = form["image"]
        key = f"img_v3_{next(self._ids)}"
        self.images[key] = image.file.read()  # type: ignore[union-attr]
        return web.json_response({"code": 0, "msg": "success", "data": {"image_key": key}})

    async def _chat(self, request: web.Request) -> web.Response:
        chat = self.chats.get(request.match_info["id"])
        if chat is None:
            return self._error(400, 232011, "chat not found")
        return web.json_response({"code": 0, "msg": "success", "data": chat})

    async def next_sent(self, timeout: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            return await self.sent.get()

    # -- the long connection ------------------------------------------------------------------

    async def _endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return web.json_response({"code": 403, "msg": "app id or secret invalid"})
        ws = self.base.replace("http://", "ws://")
        n = next(self._ids)  # Feishu's URL carries the connection's credentials too
        url = f"{ws}/ws?device_id=dev-{n}&access_key=ak{n}{TICKET}&service_id=42&ticket={TICKET}{n}"
        config = {"ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30}
        config["PingInterval"] = self.ping_interval
        data = {"URL": url, "ClientConfig": config}
        return web.json_response({"code": 0, "msg": "ok", "data": data})

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_upgrade:
            return web.json_response({"code": 403, "msg": "ticket expired"}, status=403)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        if self.hangup:
            await ws.close()
            return ws
        self.sockets.append(ws)
        while self.frozen:  # until __aexit__ thaws it
            await asyncio.sleep(0.05)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    await self._client_frame(ws, msg.data)
        finally:
            if ws in self.sockets:
                self.sockets.remove(ws)
        return ws

    async def _client_frame(self, ws: web.WebSocketResponse, data: bytes) -> None:
        frame = _sdk_frame()()
        frame.ParseFromString(data)
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == 0 and headers.get("type") == "ping":
            self.pings += 1
            if not self.answer_pings:
                return
            pong = _sdk_frame()(SeqID=0, LogID=0, service=frame.service, method=0)
            pong.headers.add(key="type", value="pong")
            pong.payload = json.dumps({"PingInterval": self.ping_interval}).encode()
            await ws.send_bytes(pong.SerializeToString())
        elif frame.method == 1:
            async with self._acked:
                self.acks[headers.get("message_id", "")] = json.loads(frame.payload)
                self._acked.notify_all()

    async def connected(self, timeout: float = 20.0) -> web.WebSocketResponse:
        # 20 s: the first connection of a test process imports lark-oapi (~2 s on a fast
        # idle machine, past 5 s on a slow one running the whole suite)
        async with asyncio.timeout(timeout):
            while not self.sockets:
                await asyncio.sleep(0.01)
        return self.sockets[-1]

    async def push(self, envelope: dict[str, Any], parts: int = 1) -> str:
        """Send one event over the long connection (in ``parts`` frames); its frame id."""
        frame_id = f"frame-{next(self._ids)}"
        payload = json.dumps(envelope).encode()
        size = -(-len(payload) // parts)
        for seq in range(parts):
            headers = [("type", "event"), ("message_id", frame_id), ("sum", str(parts))]
            headers += [("seq", str(seq)), ("trace_id", "trace")]
            await self.push_frame(headers, payload[seq * size : (seq + 1) * size])
        return frame_id

    async def push_frame(self, headers: list[tuple[str, str]], payload: bytes) -> None:
        """One data frame with exactly these headers (``sum``/``seq`` as given)."""
        frame = _sdk_frame()(SeqID=0, LogID=0, service=42, method=1, payload=payload)
        for key, value in headers:
            frame.headers.add(key=key, value=value)
        await (await self.connected()).send_bytes(frame.SerializeToString())

    async def acked(self, frame_id: str, timeout: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout), self._acked:
            await self._acked.wait_for(lambda: frame_id in self.acks)
            return self.acks[frame_id]

    async def drop(self) -> None:
        """Cut every long connection (the network went away)."""
        for ws in list(self.sockets):
            await ws.close()

    # -- events -------------------------------------------------------------------------------

    def envelope(
        self, event_type: str, event: dict[str, Any], event_id: str = ""
    ) -> dict[str, Any]:
        header = {
            "event_id": event_id or f"ev-{next(self._ids)}",
            "event_type": event_type,
            "create_time": str(int(time.time() * 1000)),
            "token": VERIFICATION_TOKEN,
            "app_id": self.app_id,
            "tenant_key": "tenant-1",
        }
        return {"schema": "2.0", "header": header, "event": event}

    def message(
        self,
        text: str,
        *,
        chat: str = GROUP,
        chat_type: str = "group",
        sender: str = USER,
        mentions: list[dict[str, Any]] | None = None,
        parent_id: str = "",
        thread_id: str = "",
        message_type: str = "text",
        content: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """An ``im.message.receive_v1`` envelope (the message is known to GET messages too)."""
        message_id = f"om_user_{next(self._ids)}"
        body = json.dumps(content if content is not None else {"text": text})
        message = {
            "message_id": message_id,
            "root_id": parent_id,
            "parent_id": parent_id,
            "create_time": str(int(time.time() * 1000)),
            "chat_id": chat,
            "thread_id": thread_id,
            "chat_type": chat_type,
            "message_type": message_type,
            "content": body,
            "mentions": mentions or [],
        }
        self.messages[message_id] = {
            "message_id": message_id,
            "chat_id": chat,
            "msg_type": message_type,
            "body": {"content": body},
            "sender": {"id": sender, "id_type": "open_id", "sender_type": "user"},
        }
        sender_info = {"sender_id": {"open_id": sender}, "sender_type": "user", "tenant_key": "t1"}
        return self.envelope("im.message.receive_v1", {"sender": sender_info, "message": message})

    @staticmethod
    def mention(key: str, open_id: str, name: str) -> dict[str, Any]:
        return {"key": key, "id": {"open_id": open_id}, "name": name}

    def member_added(
        self, user: str, name: str, chat: str = GROUP, operator: str = BOB
    ) -> dict[str, Any]:
        event = {
            "chat_id": chat,
            "operator_id": {"open_id": operator},
            "external": False,
            "users": [{"name": name, "tenant_key": "tenant-1", "user_id": {"open_id": user}}],
        }
        return self.envelope("im.chat.member.user.added_v1", event)

    def webhook_request(
        self,
        payload: dict[str, Any],
        *,
        key: str = "",
        token: str | None = None,
        sign: str | None = None,
    ) -> tuple[bytes, dict[str, str]]:
        """(body, headers) of Feishu's POST of ``payload``: encrypted and signed with ``key``
        when given (``sign`` replaces the signature; ``token`` the verification token)."""
        payload = json.loads(json.dumps(payload))
        if token is not None:
            if "header" in payload:
                payload["header"]["token"] = token
            else:
                payload["token"] = token
        body = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if key:
            body = json.dumps({"encrypt": encrypt(body, key)}).encode()
            timestamp, nonce = str(int(time.time())), f"nonce-{next(self._ids)}"
            headers["X-Lark-Request-Timestamp"] = timestamp
            headers["X-Lark-Request-Nonce"] = nonce
            headers["X-Lark-Signature"] = sign or lark_signature(timestamp, nonce, key, body)
        return body, headers
