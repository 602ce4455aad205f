"""The Feishu / Lark adapter: group and private (p2p) chats talk to tmy's rules.

**Library.** Written on aiohttp (already the daemon's HTTP stack), not on the
official ``lark-oapi`` SDK, although its pins do not conflict: its long
connection client (``lark.ws.Client.start()``) blocks, and runs on an event
loop the module makes at import (``asyncio.get_event_loop()`` +
``run_until_complete``), which cannot run inside tmy's running loop; its async
API calls fetch the tenant token with the *blocking* ``requests`` library
(stalling every chat while it waits) and open a new HTTP client per request,
and its token manager reports a refused ``app_secret`` only as a failed call,
where tmy must show ``failed`` once; and importing it costs ~2 s. What tmy
needs of it is small and written here: the token (:mod:`.api`), the long
connection's protobuf frames (:mod:`.frames`, checked in the tests against the
SDK's generated ``pbbp2_pb2.Frame``), AES decryption and signatures
(:mod:`.crypto`, on ``cryptography``).

**Receiving.** First ``tenant_access_token`` (a refused ``app_secret``: state
``failed``, nothing retried) and ``GET /open-apis/bot/v3/info`` (the bot's
``open_id``, to see its mentions). ``mode: websocket`` (the default): the long
connection (:mod:`.longconn`), reconnected after a loss with capped exponential
backoff and jitter (state ``reconnecting``, then ``connected``; the pauses start
short again only after a connection served :attr:`FeishuAdapter.stable_after`
seconds). Credentials refused later (a token refresh after the secret was reset)
also make the state ``failed``, and close the long connection. ``mode:
webhook``: Feishu POSTs events to ``/feishu/events`` on the daemon's listener
(:mod:`.webhook`: verification token, encrypt key, signature; a bad one 401/403
and nothing runs). Every event is deduplicated by its ``event_id``, and a
message by its ``message_id`` too (:class:`tmy.adapters.dedup.Deliveries`:
Feishu redelivers an event not acknowledged in time); what it becomes is
:mod:`.incoming`; each is queued for its chat (:mod:`tmy.adapters.fairness`)
and answered by :mod:`.replies`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tmy import redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler, cancel_tasks
from tmy.adapters.dedup import Deliveries
from tmy.adapters.fairness import ChatLanes
from tmy.adapters.feishu.admins import ChatAdmins
from tmy.adapters.feishu.api import Rest
from tmy.adapters.feishu.incoming import Incoming, read_event
from tmy.adapters.feishu.longconn import LongConnection
from tmy.adapters.feishu.replies import MAX_FILE, Answering
from tmy.adapters.feishu.sending import QueuedReply
from tmy.adapters.feishu.webhook import open_request
from tmy.adapters.replymedia import MediaLoader
from tmy.config.feishu import FeishuConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger, preview
from tmy.store.base import Store

log = get_logger("tmy.adapter.feishu")

WEBHOOK_PATH = "/feishu/events"
MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one chat
MAX_PENDING = 1000  # messages waiting in all chats; the webhook then answers 503
MAX_SENDS = 32  # send requests in flight at once (all chats)
SEND_INTERVAL = 0.25  # seconds between two messages to one chat (Feishu: 5 per second)


class FeishuAdapter(Answering):
    """Feishu / Lark over its server API; see the module docstring."""

    name = "feishu"
    backoff_base = 1.0  # reconnect pauses: first ~backoff_base, doubling up to backoff_cap
    backoff_cap = 60.0
    # a long connection that lasted this long resets the reconnect pauses; a shorter one (a
    # socket closed as soon as it opens) lets them grow: opening proves nothing yet
    stable_after = 30.0

    def __init__(
        self,
        config: FeishuConfig | None = None,
        *,
        app_id: str = "",
        app_secret: str = "",
        verification_token: str = "",
        encrypt_key: str = "",
        store: Store | None = None,
        shutdown_grace: float = 30.0,
        rules_dir: Path | None = None,
        send_interval: float = SEND_INTERVAL,
        media_private_hosts: Collection[str] = (),
    ) -> None:
        self.config = config or FeishuConfig()
        self.app_id, self.app_secret = app_id, app_secret
        self.verification_token, self.encrypt_key = verification_token, encrypt_key
        for secret in (app_secret, verification_token, encrypt_key):
            redact.add(secret)
        self.shutdown_grace = shutdown_grace
        self._rest: Rest | None = None
        self._conn: LongConnection | None = None
        self._handle: Handler | None = None
        self._health = AdapterHealth()
        self._runner: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None  # the long connection, once refused
        self._stopping = False
        # a reply's pictures and files, fetched with limits.media_private_hosts as elsewhere
        self._loader = MediaLoader(rules_dir, MAX_FILE, private_hosts=media_private_hosts)
        self.bot_open_id = ""
        self.bot_name = ""
        self._deliveries = Deliveries(store, self.name)
        self._lanes: ChatLanes[Incoming, QueuedReply] = ChatLanes(
            self.name, self._answer, self._send_step, per_chat=self.config.max_pending_per_chat,
            total=MAX_PENDING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
            interval=send_interval,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound
        self._admins: ChatAdmins | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """``POST /feishu/events`` in webhook mode; none for the long connection."""
        return [web.post(WEBHOOK_PATH, self._webhook)] if self.config.mode == "webhook" else []

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; bad credentials show as ``failed``.

        A second call before :meth:`stop` does nothing: it would open a second long
        connection (each event taken twice) and leave the first one to stop() unseen."""
        if self._rest is not None and not self._stopping:
            log.info("feishu.already_started")
            return
        self._handle = handle
        self._stopping = False
        self._lanes.open()
        self._health.set("starting")
        missing = self._missing()
        if missing:
            self._fail(missing)
            return
        self._rest = Rest(self.config.api_base, self.app_id, self.app_secret)
        self._rest.on_refused = self._refused
        self._conn = LongConnection(self._rest, self._deliver_payload)
        if self.config.admins_from:
            self._admins = ChatAdmins(self._rest, self.config.admins_from)
        self._runner = asyncio.create_task(self._run(), name="feishu")
        log.info("feishu.started", mode=self.config.mode, api_base=self.config.api_base)

    def _missing(self) -> str:
        c = self.config
        needed = [
            ("app_id", self.app_id, c.app_id_env),
            ("app_secret", self.app_secret, c.app_secret_env),
        ]
        if c.mode == "webhook":
            needed.append(("verification_token", self.verification_token, c.verification_token_env))
        for key, value, env in needed:
            if not value:
                return (
                    f"no {key}: set adapters.feishu.{key} or the environment variable {env} "
                    "(the app's Credentials / Events page in the developer console)"
                )
        return ""

    async def stop(self) -> None:
        """Take no new events, let replies in flight go out, then close: all within
        ``shutdown_grace``. Closing the long connection (up to close_timeout when Feishu
        never answers the close) counts against the grace; the replies go on meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.shutdown_grace
        self._stopping = True
        if self._conn is not None:
            await self._conn.close()
        await cancel_tasks(self._runner)
        self._runner = None
        if self._closing is not None:
            await asyncio.gather(self._closing, return_exceptions=True)
            self._closing = None
        await self._lanes.drain(max(0.0, deadline - loop.time()))
        if self._rest is not None:
            await self._rest.close()
        await self._loader.aclose()
        self._health.stopped()

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["mode"] = self.config.mode
        report["app_id"] = self.app_id or None
        report["bot_open_id"] = self.bot_open_id or None
        report["bot_name"] = self.bot_name or None
        report["waiting"] = self._lanes.waiting()
        return report

    def _fail(self, why: str) -> None:
        log.error("feishu.failed", error=self._health.failed(why))

    def _refused(self, why: str) -> None:
        """The credentials were refused — at start, or later by a token refresh (a secret
        reset in the console; in webhook mode nothing reconnects to notice it). A long
        connection is closed: events that cannot be answered stay unacknowledged, and
        Feishu delivers them again once the secret is fixed and tmy restarted."""
        self._fail(f"{why}; check app_id/app_secret ({self.config.app_secret_env})")
        if self._conn is not None:
            self._closing = asyncio.get_running_loop().create_task(self._conn.close())

    # -- connecting --------------------------------------------------------------------------

    async def _run(self) -> None:
        """Identify the bot, then hold the long connection (or serve the webhook) until stopped."""
        assert self._rest is not None and self._conn is not None
        rest, conn = self._rest, self._conn
        backoff = Backoff(self.backoff_base, self.backoff_cap, self.stable_after)
        while not self._stopping:
            try:
                if not self.bot_open_id:
                    await self._identify(rest)
                if self.config.mode == "webhook":
                    self._connected()
                    return  # events now arrive on the route
                url = await conn.endpoint()
                backoff.connected()
                await conn.serve(url, self._connected)
                backoff.ended()  # the pauses start short again only after it served a while
                if rest.refused is not None:
                    return  # refused while connected: failed already (Rest.on_refused)
                if not self._stopping:
                    await self._pause(backoff, "the long connection was closed")
            except AdapterError as exc:
                if rest.refused is not None:
                    if self._health.state != "failed":  # a pause came between
                        self._refused(rest.refused)
                    return  # failed (Rest.on_refused), not retried
                await self._pause(backoff, str(exc))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                await self._pause(backoff, f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # never let the reconnect loop die
                log.exception("feishu.run_crashed", error=conn.scrub(repr(exc)))
                await self._pause(backoff, repr(exc))

    async def _identify(self, rest: Rest) -> None:
        answer = await rest.call("GET", "/open-apis/bot/v3/info")
        bot = answer.body.get("bot") if answer.ok else None
        if not isinstance(bot, dict) or not bot.get("open_id"):
            raise AdapterError(
                f"feishu: bot/v3/info failed ({answer.describe()}); is the "
                "app's bot capability enabled?"
            )
        self.bot_open_id = str(bot["open_id"])
        self.bot_name = str(bot.get("app_name") or "")

    def _connected(self) -> None:
        if self._health.connected(self.name):
            log.info("feishu.connected", mode=self.config.mode, bot=self.bot_name)

    async def _pause(self, backoff: Backoff, why: str) -> None:
        if self._conn is not None:
            why = self._conn.scrub(why)  # /healthz shows it: no connection ticket in it
        self._health.set("reconnecting", why)
        delay = backoff.next()
        log.warning("feishu.reconnecting", error=why, retry_in=round(delay, 2))
        await asyncio.sleep(delay)

    # -- receiving ---------------------------------------------------------------------------

    async def _webhook(self, request: web.Request) -> web.Response:
        """One webhook POST: checked before anything runs, answered at once.

        The URL verification is answered whatever the state (it needs only the
        verification token and encrypt key: the console's check works while the
        app's secret is still being set up); an event before the bot is identified
        (or after it failed, or while stopping) gets 503, and Feishu delivers it again.
        """
        body = await request.read()
        opened = open_request(body, request.headers, self.verification_token, self.encrypt_key)
        if opened.status != 200:
            log.warning(
                "feishu.webhook_refused",
                status=opened.status,
                peer=request.remote,
                error=opened.reply.get("error"),
            )
            return web.json_response(opened.reply, status=opened.status)
        if opened.event is None:
            return web.json_response(opened.reply)
        ready = self._handle is not None and self._rest is not None and bool(self.bot_open_id)
        if self._stopping or not ready or self._health.state == "failed":
            return web.json_response({"error": "the Feishu adapter is not ready"}, status=503)
        if self._inbound.full:
            return web.json_response({"error": "busy, deliver again later"}, status=503)
        await self._dispatch(opened.event)
        return web.json_response(opened.reply)

    async def _deliver_payload(self, payload: bytes) -> None:
        """One event from the long connection (its JSON bytes)."""
        try:
            envelope = json.loads(payload)
        except (ValueError, RecursionError):  # RecursionError: nested past ~1,000 levels
            log.warning("feishu.bad_event", payload=preview(payload.decode(errors="replace")))
            return
        if isinstance(envelope, dict):
            await self._inbound.room()
            await self._dispatch(envelope)

    async def _dispatch(self, envelope: dict[str, Any]) -> None:
        """Deduplicate one event and queue what it holds for its chat."""
        header = envelope.get("header") or {}
        event_id = str(header.get("event_id") or "") if isinstance(header, dict) else ""
        if not await self._deliveries.first(self.app_id, f"event:{event_id}" if event_id else ""):
            log.info("feishu.duplicate", event_id=event_id)
            return
        self._health.event()
        try:
            found = read_event(envelope, self.bot_open_id, self.app_id, self.config.api_base)
        except Exception as exc:
            log.exception("feishu.event_failed", event_id=event_id, error=repr(exc))
            return
        for incoming in found:
            mid = incoming.message.message_id
            if mid and not await self._deliveries.first(self.app_id, mid):
                log.info("feishu.duplicate", message_id=mid)
                continue
            self._inbound.put(incoming.chat_id or incoming.message.chat, incoming)
