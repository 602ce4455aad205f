"""One WebSocket connection to a Satori server's event service, ``{api_base}/v1/events``.

The protocol's steps: within 10 s of connecting send ``IDENTIFY`` (op 3, body
``{token, sn}``; ``sn`` is the last event's sequence number of an earlier
connection, so the server pushes what happened while tmy was away — session
recovery), get ``READY`` (op 4: ``logins``, ``proxy_urls``), send ``PING`` (op 1)
every 10 s and get ``PONG`` (op 2), take ``EVENT`` (op 0) and ``META`` (op 5:
new ``proxy_urls``). ``sequence`` is sent beside ``sn`` for servers older than
Satori 1.1, which read that name.

A server refuses a wrong token by closing before READY (Koishi: code 4004
"invalid token") or by refusing the upgrade (401/403):
:attr:`Ended.refused` then says why, and the adapter shows ``failed`` instead of
trying again. Anything else that ends a connection (the server going away, no
frame for three ping intervals) is a lost connection to reconnect.

An event frame larger than :attr:`EventStream.max_frame` closes the connection
(code 1009). Resuming from the last ``sn`` would replay that same event and close
again, forever, with nothing after it ever delivered; so after such a close the
next IDENTIFY resumes one ``sn`` further, past the event that could not be read
(``sn`` only grows, and every earlier event was read: the skip loses that one
event and no other).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tmy.adapters.satori.api import SatoriHttp
from tmy.logs import get_logger, preview

log = get_logger("tmy.adapter.satori")

EVENT, PING, PONG, IDENTIFY, READY, META = 0, 1, 2, 3, 4, 5
REFUSING_CODES = frozenset({1008, 4001, 4003, 4004})  # close codes saying "not authorised"
REFUSING_WORDS = ("token", "auth", "forbidden")


@dataclass(slots=True)
class Ended:
    """How a connection ended: after READY or not, refused (why) or just lost (why)."""

    ready: bool
    why: str
    refused: bool = False


class EventStream:
    """The event service of one server: :meth:`connect` runs one connection to its end."""

    identify_timeout = 10.0  # seconds the upgrade may take, and READY after IDENTIFY
    max_frame = 32 * 1024 * 1024  # bytes of one frame (aiohttp's default 4 MB is an inline picture)
    ping_interval = 10.0  # seconds between PINGs (the protocol's)

    def __init__(
        self,
        http: SatoriHttp,
        *,
        on_ready: Callable[[dict[str, Any]], None],
        on_event: Callable[[dict[str, Any]], None],
        on_meta: Callable[[dict[str, Any]], None],
    ) -> None:
        self.http = http
        self.on_ready = on_ready
        self.on_event = on_event
        self.on_meta = on_meta
        self.sn: int | None = None  # the last event's sn: resume from it after a reconnect

    @property
    def url(self) -> str:
        base = self.http.api_base
        scheme = "wss" + base[5:] if base.startswith("https") else "ws" + base[4:]
        return f"{scheme}/v1/events"

    async def connect(self) -> Ended:
        """Connect, identify, read until the connection ends. Network errors raise
        (aiohttp.ClientError, OSError); a refused upgrade is ``Ended(refused=True)``."""
        headers = {"Authorization": f"Bearer {self.http.token}"} if self.http.token else {}
        try:
            async with asyncio.timeout(self.identify_timeout):  # a server that never answers
                ws = await self.http.session.ws_connect(
                    self.url, headers=headers, autoping=True, heartbeat=None,
                    timeout=aiohttp.ClientWSTimeout(ws_close=5.0), max_msg_size=self.max_frame,
                )  # fmt: skip
        except aiohttp.WSServerHandshakeError as exc:
            refused = exc.status in (401, 403)
            return Ended(False, f"the upgrade was refused (HTTP {exc.status})", refused)
        except TimeoutError:
            return Ended(False, f"no answer to the upgrade within {self.identify_timeout:g} s")
        async with ws:
            body = {"token": self.http.token, "sn": self.sn, "sequence": self.sn}
            await ws.send_json({"op": IDENTIFY, "body": body})
            pinger = asyncio.create_task(self._ping(ws), name="satori-ping")
            try:
                return await self._read(ws)
            finally:
                pinger.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pinger

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> Ended:
        ready = False
        while True:
            wait = self.ping_interval * 3 if ready else self.identify_timeout
            try:
                msg = await ws.receive(timeout=wait)
            except TimeoutError:
                return Ended(ready, f"no frame from the server for {wait:g} s")
            if msg.type == aiohttp.WSMsgType.TEXT:
                ready = self._frame(msg.data) or ready
                continue
            if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                            aiohttp.WSMsgType.CLOSED):  # fmt: skip
                code = msg.data if msg.type == aiohttp.WSMsgType.CLOSE else ws.close_code
                reason = str(msg.extra or "") if msg.type == aiohttp.WSMsgType.CLOSE else ""
                said = f": {reason}" if reason else ""
                why = f"the server closed the connection (code {code}{said})"
                refused = not ready and (
                    code in REFUSING_CODES or any(w in reason.lower() for w in REFUSING_WORDS)
                )
                return Ended(ready, why, refused)
            if msg.type == aiohttp.WSMsgType.ERROR:
                if ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
                    self._skip_unreadable()
                return Ended(ready, f"the connection failed: {msg.data or ws.exception()!r}")

    def _skip_unreadable(self) -> None:
        """The frame after ``sn`` was too large to read: resume past it next time."""
        log.warning("satori.event_too_large", after_sn=self.sn, limit=self.max_frame)
        if self.sn is not None:  # None: nothing to resume from, so nothing replays it
            self.sn += 1

    def _frame(self, data: str) -> bool:
        """Handle one signal; True when it was READY."""
        try:
            frame = json.loads(data)
            op, body = frame.get("op"), frame.get("body")
        except (ValueError, AttributeError, RecursionError):  # not JSON, not an object, too deep
            log.warning("satori.bad_frame", frame=preview(data))
            return False
        body = body if isinstance(body, dict) else {}
        if op == EVENT:
            sn = body.get("sn", body.get("id"))
            if isinstance(sn, int) and not isinstance(sn, bool):
                self.sn = sn
            self.on_event(body)
        elif op == READY:
            self.on_ready(body)
            return True
        elif op == META:
            self.on_meta(body)
        return False

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
            while not ws.closed:
                await asyncio.sleep(self.ping_interval)
                await ws.send_json({"op": PING, "body": {}})
