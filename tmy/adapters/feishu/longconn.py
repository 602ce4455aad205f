"""The long connection (``mode: websocket``): Feishu pushes events over a WebSocket tmy opens.

``POST {api_base}/callback/ws/endpoint`` with ``{"AppID", "AppSecret"}`` gives a
``wss://`` URL (its query names the ``service_id``) and a ``ClientConfig``
(``PingInterval`` seconds; its reconnect counts are Feishu's advice to its SDKs —
tmy reconnects with its own capped backoff with jitter instead, which also keeps
many daemons from reconnecting in step). On the socket every message is a
binary ``pbbp2.Frame`` (:mod:`~tmy.adapters.feishu.frames`):

* ``method`` 0 (control): ``type: ping`` is sent every ``PingInterval``
  seconds; ``type: pong`` may carry a new ``ClientConfig``;
* ``method`` 1 (data): ``type: event`` (or ``card``) carries the event JSON,
  split over several frames when ``sum`` > 1 (joined by ``message_id``/``seq``;
  more than :data:`MAX_PARTS` parts are not waited for);
  each is answered with the same frame whose payload is ``{"code": 200}`` —
  without that acknowledgement Feishu delivers the event again.

A connection that has answered no ping for :data:`MISSED_PONGS` intervals is
taken for dead (a network that drops packets closes nothing) and closed, so the
adapter reconnects. A non-zero ``code`` from the endpoint other than "busy" means
the credentials were refused (:attr:`Rest.refused`: the adapter shows ``failed``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlparse

import aiohttp

from tmy import redact
from tmy.adapters.feishu.api import Rest
from tmy.adapters.feishu.frames import CONTROL, DATA, Frame
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.feishu")

ENDPOINT_PATH = "/callback/ws/endpoint"
BUSY_CODES = frozenset({1, 1000040343})  # "system busy", "internal error": try again later
PARTS_KEPT = 5.0  # seconds the parts of a split event wait for the rest
MAX_PARTS = 1024  # a split event claiming more (``sum`` is read off the wire) is dropped
MISSED_PONGS = 3  # ping intervals without a pong before the connection is given up


class LongConnection:
    """One app's event WebSocket; ``deliver(payload)`` gets each event's JSON bytes."""

    close_timeout = 2.0  # seconds a closing socket waits for the peer's close (aiohttp: 10)

    def __init__(self, rest: Rest, deliver: Callable[[bytes], Awaitable[None]]) -> None:
        self.rest = rest
        self.deliver = deliver
        self.ping_interval = 120.0  # seconds; Feishu's ClientConfig replaces it
        self._parts: dict[str, tuple[float, list[bytes | None]]] = {}
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._last_pong = 0.0  # monotonic time of the last pong (or of the connection)
        self._url_secrets: tuple[str, ...] = ()  # the current URL's access_key and ticket

    async def endpoint(self) -> str:
        """The WebSocket URL for this app (AdapterError: refused, busy, or not understood)."""
        body = {"AppID": self.rest.app_id, "AppSecret": self.rest.app_secret}
        answer = await self.rest.request("POST", ENDPOINT_PATH, json_body=body, auth=False)
        if answer.refusal and answer.code not in BUSY_CODES:
            self.rest.refuse(f"Feishu refused the long connection ({answer.describe()})")
        if not answer.ok:  # busy, a rate limit, a gateway's page
            raise AdapterError(f"feishu: the event endpoint failed ({answer.describe()})")
        data = answer.data
        self._configure(data.get("ClientConfig"))
        url = data.get("URL")
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise AdapterError("feishu: the event endpoint gave no WebSocket URL")
        self._url_secrets = _url_secrets(url)
        return url

    def scrub(self, text: str) -> str:
        """``text`` without the connection's credentials: the URL's ``access_key`` and
        ``ticket`` (aiohttp names the URL in a refused handshake's error)."""
        for secret in self._url_secrets:
            text = text.replace(secret, redact.MASK)
        return text

    async def serve(self, url: str, opened: Callable[[], None]) -> None:
        """Receive until the connection ends (returns) or fails (raises aiohttp errors)."""
        await self.rest.open()
        assert self.rest.session is not None
        service = _service_id(url)
        timeout = aiohttp.ClientWSTimeout(ws_close=self.close_timeout)  # a stuck peer: no hang
        async with self.rest.session.ws_connect(
            url, max_msg_size=0, autoping=True, timeout=timeout
        ) as ws:
            self._ws = ws
            self._last_pong = time.monotonic()
            opened()
            pinger = asyncio.create_task(self._ping(ws, service), name="feishu-ping")
            try:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        await self._frame(ws, msg.data)
                    elif msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                        break
            finally:
                self._ws = None
                pinger.cancel()
                await asyncio.gather(pinger, return_exceptions=True)

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse, service: int) -> None:
        while not ws.closed:
            silent = time.monotonic() - self._last_pong
            if silent > MISSED_PONGS * self.ping_interval:
                log.warning("feishu.no_pong", silent=round(silent, 1))
                await ws.close()
                return
            frame = Frame(service=service, method=CONTROL, headers=[("type", "ping")])
            try:
                await ws.send_bytes(frame.encode())
            except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
                log.warning("feishu.ping_failed", error=str(exc))
                return
            await asyncio.sleep(self.ping_interval)

    async def _frame(self, ws: aiohttp.ClientWebSocketResponse, data: bytes) -> None:
        try:
            frame = Frame.decode(data)
        except AdapterError as exc:
            log.warning("feishu.bad_frame", error=str(exc))
            return
        kind = frame.header("type")
        if frame.method == CONTROL:
            if kind == "pong":
                self._last_pong = time.monotonic()
            if kind == "pong" and frame.payload:
                try:
                    self._configure(json.loads(frame.payload))
                except ValueError:
                    log.warning("feishu.bad_pong")
            return
        if frame.method != DATA or kind not in ("event", "card"):
            return
        started = time.monotonic()
        payload = self._joined(frame)
        if payload is None:
            return  # more parts to come
        try:
            await self.deliver(payload)
            code = 200
        except Exception as exc:  # the event is acknowledged as failed; Feishu may resend it
            log.exception("feishu.event_failed", error=repr(exc))
            code = 500
        took = int((time.monotonic() - started) * 1000)
        frame.headers.append(("biz_rt", str(took)))
        frame.payload = json.dumps({"code": code}).encode()
        await ws.send_bytes(frame.encode())

    def _joined(self, frame: Frame) -> bytes | None:
        """The whole payload of a (possibly split) data frame; None while parts are missing."""
        try:
            total, seq = int(frame.header("sum", "1")), int(frame.header("seq", "0"))
        except ValueError:
            total, seq = 1, 0
        if total <= 1:
            return frame.payload
        if total > MAX_PARTS:  # [None] * total would take the whole memory, or raise
            log.warning("feishu.bad_frame", error=f"an event split into {total} parts")
            return None
        now = time.monotonic()
        for key in [k for k, (t, _) in self._parts.items() if t < now]:
            del self._parts[key]
        key = frame.header("message_id")
        _, parts = self._parts.setdefault(key, (now + PARTS_KEPT, [None] * total))
        if 0 <= seq < len(parts):
            parts[seq] = frame.payload
        if any(p is None for p in parts):
            return None
        del self._parts[key]
        return b"".join(p for p in parts if p is not None)

    def _configure(self, config: Any) -> None:
        if isinstance(config, dict):
            ping = config.get("PingInterval")
            if isinstance(ping, int | float) and ping > 0:
                self.ping_interval = float(ping)


def _url_secrets(url: str) -> tuple[str, ...]:
    """The credential values in the WebSocket URL's query (``access_key``, ``ticket``)."""
    pairs = parse_qsl(urlparse(url).query)
    named = [v for k, v in pairs if k in ("access_key", "ticket") or redact.is_secret_name(k)]
    return tuple(sorted((v for v in named if len(v) >= redact.MIN_SECRET_CHARS), key=len)[::-1])


def _service_id(url: str) -> int:
    values = parse_qs(urlparse(url).query).get("service_id") or ["0"]
    try:
        return int(values[0])
    except ValueError:
        return 0
