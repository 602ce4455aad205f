"""QQ's WebSocket gateway: one connection, identified or resumed, with its heartbeats.

QQ announced the gateway's retirement for new bots (webhooks replace it) but still
runs it for bots that have it. One :meth:`Gateway.run` is one connection:
``GET /gateway/bot`` gives the URL; the gateway's op 10 Hello gives the heartbeat
interval; then op 6 Resume (when a ``session_id`` and sequence number are kept from
a previous connection: QQ replays what was missed, then sends ``RESUMED``) or op 2
Identify (``token: "QQBot <access_token>"``, :data:`INTENTS`, one shard) answered
by ``READY`` with the session id and the bot's user. Heartbeats (op 1 with the
last ``s``) go out every interval, answered by op 11. Op 0 dispatches are handed
on with their ``s`` remembered; op 7 asks to reconnect (resume), op 9 says the
session is invalid (identify again). The adapter's loop reconnects with backoff
when :meth:`run` returns or raises.

Close codes: 4004 (bad token) fetches a new token, and the third in a row
without a READY between is a refusal; 4006/4007/4008/4009 and
4900–4913 drop the session (identify next time); 4010–4014 (shards, version,
intents: ``all_messages`` on a public bot is 4014), 4914 (the bot is offline, in
the sandbox) and 4915 (banned) are refusals QQ says not to retry:
:class:`~tmy.errors.AdapterError`. A frame that is not a JSON object is logged and
skipped, never the end of the connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from tmy.adapters.qq.api import QQApi
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.qq")

GUILDS = 1 << 0
GUILD_MEMBERS = 1 << 1
DIRECT_MESSAGE = 1 << 12
GROUP_AND_C2C_EVENT = 1 << 25
PUBLIC_GUILD_MESSAGES = 1 << 30
# guild @-messages, guild DMs, group @-messages and C2C, guild members (joins, leaves)
INTENTS = GUILDS | GUILD_MEMBERS | DIRECT_MESSAGE | GROUP_AND_C2C_EVENT | PUBLIC_GUILD_MESSAGES
GUILD_MESSAGES = 1 << 9  # every channel message: private (私域) bots only (``all_messages``)
MAX_TOKEN_REFUSALS = 3  # 4004s, each with a new token, before the gateway counts as refused
SESSION_LOST = frozenset({4006, 4007, 4008, 4009, *range(4900, 4914)})
# QQ's table (websocket error codes): neither resume nor identify may be retried
REFUSED = {
    4010: "invalid shard",
    4011: "the bot is in too many guilds for one shard",
    4012: "invalid API version",
    4013: "invalid intents",
    4014: "intents this bot may not ask for (all_messages: true needs a private (私域) bot)",
    4914: "the bot is offline (sandbox only?)",
    4915: "the bot is banned",
}

Dispatch = Callable[[str, Any, str], Awaitable[None]]


class Gateway:
    """The gateway session that survives reconnects (id, last ``s``) and one connection."""

    def __init__(self, api: QQApi, intents: int, dispatch: Dispatch) -> None:
        self.api = api
        self.intents = intents
        self.dispatch = dispatch  # (t, d, payload id): one op 0 event
        self.session_id = ""
        self.seq: int | None = None
        self.user: dict[str, Any] = {}
        self.ready = asyncio.Event()  # set on READY / RESUMED of the current connection
        self.resumed = 0  # connections resumed (health, tests)
        self.token_refusals = 0  # 4004 closes since the last READY / RESUMED
        self.close_code: int | None = None  # of the last connection (health's error)
        self._acked = True  # the last heartbeat was answered (op 11)

    async def run(self) -> None:
        """One connection until it ends; raises AdapterError for a refusal."""
        self.ready.clear()
        answer = await self.api.call("GET", "/gateway/bot")
        url = answer.data.get("url") if answer.ok and isinstance(answer.data, dict) else None
        if not url:
            if answer.status in (401, 403):
                raise AdapterError(f"qq: the gateway was refused ({answer.describe()})")
            raise aiohttp.ClientError(f"no gateway URL ({answer.describe()})")
        async with self.api.session.ws_connect(url, autoping=True) as ws:
            hello = await ws.receive_json(timeout=30)
            if hello.get("op") != 10:
                raise aiohttp.ClientError(f"expected Hello (op 10), got op {hello.get('op')}")
            interval = float((hello.get("d") or {}).get("heartbeat_interval", 41250)) / 1000
            await self._login(ws)
            beat = asyncio.create_task(self._heartbeat(ws, interval), name="qq-heartbeat")
            try:
                await self._read(ws)
            finally:
                beat.cancel()
                await asyncio.gather(beat, return_exceptions=True)
            self._closed(ws.close_code)

    async def _login(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        token = await self.api.token.get()
        if self.session_id and self.seq is not None:
            d: dict[str, Any] = {"token": f"QQBot {token}", "session_id": self.session_id,
                                 "seq": self.seq}  # fmt: skip
            await ws.send_json({"op": 6, "d": d})
            return
        d = {"token": f"QQBot {token}", "intents": self.intents, "shard": [0, 1],
             "properties": {"$os": "linux", "$browser": "tmy", "$device": "tmy"}}  # fmt: skip
        await ws.send_json({"op": 2, "d": d})

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse, interval: float) -> None:
        """Op 1 every interval; a heartbeat still unanswered at the next one closes the
        connection (a dead link QQ no longer hears), to be resumed."""
        self._acked = True
        while not ws.closed:
            await asyncio.sleep(interval)
            if not self._acked:
                log.warning("qq.heartbeat_unanswered", interval=interval)
                await ws.close()
                return
            self._acked = False
            await ws.send_json({"op": 1, "d": self.seq})

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                continue
            try:
                payload = json.loads(frame.data)
            except (ValueError, RecursionError):
                payload = None
            if not isinstance(payload, dict):
                log.warning("qq.bad_frame", size=len(frame.data))
                continue
            op = payload.get("op")
            if op == 0:
                if isinstance(payload.get("s"), int):
                    self.seq = payload["s"]
                await self._event(payload)
            elif op == 11:
                self._acked = True
            elif op == 7:
                log.info("qq.reconnect_asked")
                return
            elif op == 9:
                log.info("qq.session_invalid", resumable=bool(payload.get("d")))
                if not payload.get("d"):
                    self.session_id, self.seq = "", None
                return

    async def _event(self, payload: dict[str, Any]) -> None:
        kind, d = str(payload.get("t") or ""), payload.get("d")
        if kind == "READY" and isinstance(d, dict):
            self.token_refusals = 0
            self.session_id = str(d.get("session_id") or "")
            self.user = d.get("user") or {}
            self.ready.set()
        elif kind == "RESUMED":
            self.token_refusals = 0
            self.resumed += 1
            self.ready.set()
        else:
            try:
                await self.dispatch(kind, d, str(payload.get("id") or ""))
            except Exception as exc:  # one bad event must not cost the connection
                log.exception("qq.dispatch_failed", kind=kind, error=repr(exc))

    def _closed(self, code: int | None) -> None:
        """What a close code means for the next connection (or a refusal)."""
        log.info("qq.gateway_closed", close_code=code)
        self.close_code = code
        if code in REFUSED:
            raise AdapterError(f"qq: the gateway closed with {code}: {REFUSED[code]}")
        if code == 4004:
            self.token_refusals += 1
            if self.token_refusals >= MAX_TOKEN_REFUSALS:
                raise AdapterError(
                    f"qq: the gateway refused the access token {self.token_refusals} times in "
                    "a row (close 4004), a new one asked for each time: the bot may not use "
                    "the WebSocket gateway (QQ keeps it for older bots); use mode: webhook"
                )
            self.api.token.invalidate(self.api.token.current)
        if code in SESSION_LOST or code == 4004:
            self.session_id, self.seq = "", None
