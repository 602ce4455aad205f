"""A fake Slack on loopback, for tests: the Web API, Socket Mode and signed Events API posts.

Written from api.slack.com's documentation:

* **Web API** at ``/api/<method>`` (``base`` is what ``api_base`` should be): the
  token comes as ``Authorization: Bearer …`` (or a ``token`` parameter); parameters
  as a query string, a form or JSON. Answers are ``{"ok": true, …}``; a wrong token
  is ``{"ok": false, "error": "invalid_auth"}``, none ``not_authed``, as Slack
  answers (HTTP 200). Methods: ``auth.test``, ``apps.connections.open`` (app-level
  token only), ``chat.postMessage`` (recorded; :attr:`FakeSlack.flood` answers the
  next ones 429 with ``Retry-After`` and ``error: ratelimited``; an image block whose
  ``image_url`` is in :attr:`FakeSlack.broken_images` is ``invalid_blocks``, "downloading
  image failed", and nothing is posted), ``chat.update``,
  ``users.info`` (from :attr:`FakeSlack.users`), ``conversations.replies`` (from
  :attr:`FakeSlack.history`), ``files.getUploadURLExternal`` with the upload URL it
  gives and ``files.completeUploadExternal``; a method in :attr:`FakeSlack.stalled` is never
  answered (a hung Slack) until the fake stops; a file's ``url_private`` at
  ``/files/<id>`` answers only with the bot token.
* **Socket Mode**: ``apps.connections.open`` gives ``ws://…/link?ticket=…``; the
  socket greets with ``hello``; :meth:`FakeSlack.envelope` sends an envelope and
  waits for its acknowledgement (``{"envelope_id": …}``); :meth:`FakeSlack.drop`
  closes the connections (a lost connection), :meth:`FakeSlack.disconnect` sends a
  ``disconnect`` message.
* **Events API**: :meth:`FakeSlack.signed` signs a body for ``POST /slack/events``
  with the real v0 algorithm (``v0=`` HMAC-SHA256 of ``v0:<timestamp>:<body>``
  keyed with the signing secret).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import WSMsgType, web

BOT_TOKEN = "xoxb-1111-2222-fake-bot-token-for-tests"
APP_TOKEN = "xapp-1-A0APP-3333-fake-app-level-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5-fake"
TEAM = "T0TEAM001"
BOT_USER = "U0BOT0001"
BOT_ID = "B0BOT0001"
ANN = "U0ANN0001"
BOB = "U0BOB0002"
CHANNEL = "C0GENERAL1"
DM = "D0ANNDM01"
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})


class FakeSlack:
    """One fake Slack; ``base`` is its Web API root."""

    def __init__(self, bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.calls: list[tuple[str, dict[str, Any]]] = []  # every accepted call
        self.posted: list[dict[str, Any]] = []  # chat.postMessage params, in order
        self.flood: list[int] = []  # Retry-After of the next chat.postMessage calls: 429
        self.broken_images: set[str] = set()  # image_url Slack cannot fetch: invalid_blocks
        self.users: dict[str, dict[str, Any]] = {
            ANN: {"id": ANN, "name": "ann", "profile": {"display_name": "Ann"}},
            BOB: {"id": BOB, "name": "bob", "profile": {"real_name": "Bob Stone"}},
        }
        self.history: dict[str, dict[str, Any]] = {}  # ts -> message, for conversations.replies
        self.files: dict[str, bytes] = {}  # file id -> content, at /files/<id>
        self.uploads: dict[str, bytes] = {}  # uploaded file id -> bytes
        self.acks: list[str] = []
        self.stalled: set[str] = set()  # Web API methods left unanswered until the fake stops
        self.hung: list[tuple[str, dict[str, Any]]] = []  # the stalled calls received
        self._unstall = asyncio.Event()
        self.silent = False  # Socket Mode connections: greet, then read and answer nothing
        self.hangup = False  # Socket Mode connections: greet, then close at once
        self.sockets: list[web.WebSocketResponse] = []
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._taken = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> FakeSlack:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link", self._link)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}", self._file)
        self._runner = web.AppRunner(app, shutdown_timeout=0.05)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self._unstall.set()
        await self.drop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the Web API -----------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                params.update(await request.json())
            else:
                params.update(parse_qsl((await request.read()).decode()))
        token = params.pop("token", None)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth[len("Bearer ") :]
        if not token:
            return web.json_response({"ok": False, "error": "not_authed"})
        wanted = self.app_token if method in APP_TOKEN_METHODS else self.bot_token
        if not hmac.compare_digest(token.encode(), wanted.encode()):
            error = "not_allowed_token_type" if token in (self.bot_token, self.app_token) else ""
            return web.json_response({"ok": False, "error": error or "invalid_auth"})
        if method in self.stalled:  # a hung Slack: the call is never answered
            async with self._changed:
                self.hung.append((method, params))
                self._changed.notify_all()
            await self._unstall.wait()
        answer = getattr(self, "_" + method.replace(".", "_"), None)
        if answer is None:
            return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
        response = answer(params)
        if isinstance(response, web.StreamResponse):
            return response
        async with self._changed:
            self.calls.append((method, params))
            self._changed.notify_all()
        return web.json_response({"ok": True, **response})

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": "https://tmy-test.slack.com/", "team": "Tmy Test", "user": "tmy",
                "team_id": TEAM, "user_id": BOT_USER, "bot_id": BOT_ID}  # fmt: skip

    def _apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": f"ws://127.0.0.1:{self.port}/link?ticket=t{next(self._ids)}"}

    def _chat_postMessage(self, params: dict[str, Any]) -> Any:
        if self.flood:
            wait = self.flood.pop(0)
            body = {"ok": False, "error": "ratelimited"}
            return web.json_response(body, status=429, headers={"Retry-After": str(wait)})
        if not params.get("channel"):
            return web.json_response({"ok": False, "error": "channel_not_found"})
        for i, block in enumerate(params.get("blocks") or ()):
            if block.get("type") == "image" and block.get("image_url") in self.broken_images:
                why = f"downloading image failed [json-pointer:/blocks/{i}/image_url]"
                return web.json_response({"ok": False, "error": "invalid_blocks",
                                          "errors": [why]})  # fmt: skip
        ts = self.next_ts()
        self.posted.append({**params, "ts": ts, "at": time.monotonic()})
        message = {"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "ts": ts,
                   "text": params.get("text", "")}  # fmt: skip
        self.history[ts] = message
        return {"channel": params["channel"], "ts": ts, "message": message}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"channel": params.get("channel"), "ts": params.get("ts"), "text": params["text"]}

    def _users_info(self, params: dict[str, Any]) -> Any:
        user = self.users.get(str(params.get("user")))
        if user is None:
            return web.json_response({"ok": False, "error": "user_not_found"})
        return {"user": user}

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        first = self.history.get(str(params.get("ts")))
        return {"messages": [first] if first else [], "has_more": False}

    def _files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F0UP{next(self._ids):05d}"
        return {"upload_url": f"{self.root}/upload/{file_id}", "file_id": file_id}

    def _files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        files = json.loads(params.get("files") or "[]")
        return {"files": [{"id": f["id"], "title": f.get("title", "")} for f in files]}

    async def _upload(self, request: web.Request) -> web.Response:
        self.uploads[request.match_info["file_id"]] = await request.read()
        return web.Response(text=f"OK - {len(self.uploads[request.match_info['file_id']])}")

    async def _file(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(status=403)
        content = self.files.get(request.match_info["file_id"])
        if content is None:
            return web.Response(status=404)
        return web.Response(body=content, content_type="image/png")

    # -- Socket Mode ------------------------------------------------------------------------------

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        hello = {"type": "hello", "num_connections": len(self.sockets) + 1,
                 "debug_info": {"host": "fake-applink"},
                 "connection_info": {"app_id": "A0APP"}}  # fmt: skip
        await ws.send_json(hello)
        if self.hangup:
            await ws.close()
            return ws
        async with self._changed:
            self.sockets.append(ws)
            self._changed.notify_all()
        if self.silent:  # reads nothing, so answers no ping and no close
            try:
                await asyncio.Event().wait()
            finally:
                self.sockets.remove(ws)
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    ack = json.loads(frame.data)
                    async with self._changed:
                        self.acks.append(ack["envelope_id"])
                        self._changed.notify_all()
        finally:
            async with self._changed:
                if ws in self.sockets:
                    self.sockets.remove(ws)
                self._changed.notify_all()
        return ws

    async def connected(self, n: int = 1, timeout: float = 10.0) -> None:
        """Wait until ``n`` sockets are open."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.sockets) >= n)

    async def envelope(self, kind: str, payload: dict[str, Any], retry: int = 0) -> str:
        """Send an envelope on the newest socket and wait for its acknowledgement."""
        await self.connected()
        envelope_id = f"env-{next(self._ids)}"
        frame = {"envelope_id": envelope_id, "type": kind, "payload": payload,
                 "accepts_response_payload": False, "retry_attempt": retry,
                 "retry_reason": "timeout" if retry else ""}  # fmt: skip
        await self.sockets[-1].send_json(frame)
        async with asyncio.timeout(10), self._changed:
            await self._changed.wait_for(lambda: envelope_id in self.acks)
        return envelope_id

    async def frame(self, data: Any) -> None:
        """Send ``data`` as it is on the newest socket (a frame Slack would not send)."""
        await self.connected()
        await self.sockets[-1].send_json(data)

    async def event(self, event: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """An Events API event over Socket Mode (wrapped as Slack wraps it); the payload."""
        payload = self.callback(event)
        await self.envelope("events_api", payload, **kw)
        return payload

    async def drop(self) -> None:
        """Close every socket (the connection is lost)."""
        for ws in list(self.sockets):
            await ws.close()

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        for ws in list(self.sockets):
            await ws.send_json({"type": "disconnect", "reason": reason,
                                "debug_info": {"host": "fake-applink"}})  # fmt: skip

    # -- building events --------------------------------------------------------------------------

    def next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def callback(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` wrapped in an ``event_callback`` payload."""
        return {"token": "verification-token", "team_id": TEAM, "api_app_id": "A0APP",
                "event": event, "type": "event_callback", "event_id": f"Ev{next(self._ids):08d}",
                "event_time": int(time.time()),
                "authorizations": [{"team_id": TEAM, "user_id": BOT_USER,
                                    "is_bot": True}]}  # fmt: skip

    def message(
        self, text: str, *, channel: str = CHANNEL, user: str = ANN, **extra: Any
    ) -> dict[str, Any]:
        """A ``message`` event (``channel_type`` from the channel id)."""
        kinds = {"C": "channel", "G": "group", "D": "im"}
        return {"type": "message", "channel": channel, "user": user, "text": text,
                "ts": self.next_ts(), "channel_type": kinds.get(channel[0], "channel"),
                "event_ts": self.next_ts(), "team": TEAM, **extra}  # fmt: skip

    def button(
        self, value: str, carrier: dict[str, Any], *, user: str = BOB, channel: str = CHANNEL
    ) -> dict[str, Any]:
        """A ``block_actions`` payload: ``user`` pressed the button carrying ``value``."""
        return {"type": "block_actions", "user": {"id": user, "name": "bob", "team_id": TEAM},
                "api_app_id": "A0APP", "trigger_id": f"tr-{next(self._ids)}",
                "team": {"id": TEAM}, "channel": {"id": channel, "name": "general"},
                "container": {"type": "message", "message_ts": carrier["ts"],
                              "channel_id": channel, "is_ephemeral": False},
                "message": carrier, "response_url": f"{self.root}/respond",
                "actions": [{"type": "button", "action_id": "tmy_0_0", "block_id": "tmy_row_0",
                             "value": value, "action_ts": self.next_ts(),
                             "text": {"type": "plain_text", "text": value}}]}  # fmt: skip

    # -- what tests read ---------------------------------------------------------------------------

    async def wait_hung(self, n: int = 1, timeout: float = 10.0) -> None:
        """Wait until ``n`` stalled calls have come in."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.hung) >= n)

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [p for m, p in self.calls if m == method]

    async def wait_calls(self, method: str, n: int = 1, timeout: float = 10.0) -> list[Any]:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.calls_of(method)) >= n)
        return self.calls_of(method)

    async def next_post(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next chat.postMessage not yet taken (waits for it)."""
        taken = self._taken
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.posted) > taken)
        self._taken = taken + 1
        return self.posted[taken]

    async def nothing_posted(self, wait: float = 0.3) -> None:
        """Fail if a chat.postMessage not yet taken arrives within ``wait`` seconds."""
        await asyncio.sleep(wait)
        assert len(self.posted) == self._taken, self.posted[self._taken :]


def signed(
    body: bytes | str, *, secret: str = SIGNING_SECRET, timestamp: int | None = None
) -> dict[str, str]:
    """The headers Slack sends with ``body``: its timestamp and v0 signature."""
    raw = body.encode() if isinstance(body, str) else body
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + raw
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}
