"""The QQ adapter: QQ's official bot API (guild channels, groups, C2C) on aiohttp.

**Library.** None: ``qq-botpy`` has had no release in a year, and what tmy needs
is small — an access token (:mod:`~tmy.adapters.qq.api`), ed25519 webhook
signatures (:mod:`~tmy.adapters.qq.signing`, on ``cryptography``), the gateway
(:mod:`~tmy.adapters.qq.gateway`) and four send endpoints
(:mod:`~tmy.adapters.qq.sending`).

**Receiving.** ``mode: webhook`` (the default; QQ's current delivery): QQ POSTs
each event to ``/qq/webhook`` on the daemon's listener. Every request must carry
``X-Signature-Ed25519`` and ``X-Signature-Timestamp`` signing timestamp + body with
the key derived from the secret: missing → 401, wrong → 403, older than
:data:`MAX_AGE` → 401 (a replay), nothing runs. The one
exception is QQ's callback-URL validation (op 13), which QQ documents without
those headers: it is answered (``{plain_token, signature}``) only when its
``plain_token`` and ``event_ts`` are plain letters and digits, so the answer can
never be a signature over a forged event body. Dispatches (op 0) are answered
``{"op": 12}`` (HTTP Callback ACK) at once and run in the background.
``mode: websocket``: the gateway, reconnected with backoff and jitter, resumed
when QQ still holds the session (the pauses start short again only after a session
served :attr:`QQAdapter.stable_after` seconds: a gateway that sends READY and closes
at once is not called every second).

At start the access token is fetched: a refused app id / secret is ``failed``
(not retried in a loop; the rest of the daemon serves on); a network error or a
rate-limited token endpoint is ``reconnecting`` and retried. A token refused later
(a reply meets it: the secret was reset) is ``failed`` too, and webhook events are
then answered 503. Message ids are deduplicated in the store
(:class:`~tmy.adapters.dedup.Deliveries`): QQ documents that it may deliver the
same message twice. Each message runs in its chat's turn
(:class:`~tmy.adapters.fairness.ChatQueues`); replies are paced per chat
(:attr:`QQAdapter.send_interval`: QQ allows 5 messages a second per channel).
What a dispatch becomes is :mod:`~tmy.adapters.qq.incoming`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import aiohttp
from aiohttp import web

from tmy import redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler, cancel_tasks
from tmy.adapters.dedup import Deliveries
from tmy.adapters.fairness import ChatLanes
from tmy.adapters.qq.api import AccessToken, QQApi
from tmy.adapters.qq.gateway import GUILD_MESSAGES, INTENTS, Gateway
from tmy.adapters.qq.incoming import Incoming, read_dispatch
from tmy.adapters.qq.sending import QueuedReply, compose, send_piece
from tmy.adapters.qq.signing import signing_key, validation_answer, verify
from tmy.adapters.qq.webhook import MAX_AGE, age_of, json_object, validation
from tmy.config.qq import QQConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Outgoing, Target
from tmy.store.base import Store

log = get_logger("tmy.adapter.qq")

WEBHOOK_PATH = "/qq/webhook"
MAX_RUNS = 64
MAX_RUNS_PER_CHAT = 16
MAX_PENDING = 1000
MAX_SENDS = 32
MAX_SEQS = 4096  # msg_ids whose msg_seq counters are kept (replies come within minutes)
MAX_OWN = 4096  # ids of the bot's own guild messages kept (a reply quoting one addresses it)
REQUEST_TIMEOUT = 20.0
TARGET_KINDS = {"group": "group", "private": "c2c", "channel": "channel", "dm": "dm",
                "guild": "guild"}  # fmt: skip


class QQAdapter:
    """QQ's official bot API, webhook or gateway; see the module docstring."""

    name = "qq"
    backoff_base = 1.0  # reconnect pauses (tests shrink them)
    backoff_cap = 60.0
    # a gateway session that lasted this long resets the reconnect pauses; a shorter one (QQ
    # sending READY, then closing at once) lets them grow: READY proves nothing yet
    stable_after = 30.0
    rate_limit_wait = 1.0  # seconds a rate-limited send waits before it is tried again

    def __init__(
        self,
        config: QQConfig | None = None,
        *,
        app_id: str = "",
        secret: str = "",
        store: Store | None = None,
        shutdown_grace: float = 30.0,
        send_interval: float = 0.2,
    ) -> None:
        self.config = config or QQConfig()
        self.app_id, self.secret = app_id, secret
        redact.add(secret)
        self.shutdown_grace = shutdown_grace
        self._key = signing_key(secret) if secret else None
        self._deliveries = Deliveries(store, "qq")
        self._health = AdapterHealth()
        self._handle: Handler | None = None
        self._session: aiohttp.ClientSession | None = None
        self._api: QQApi | None = None
        self._gateway: Gateway | None = None
        self._me: dict[str, str] = {"app_id": app_id}
        self._runner: asyncio.Task[None] | None = None
        self._stopping = False
        self._seqs: OrderedDict[str, int] = OrderedDict()  # msg_id -> last msg_seq used
        self._own: OrderedDict[str, None] = OrderedDict()  # the bot's guild message ids
        self._lanes: ChatLanes[Incoming, QueuedReply] = ChatLanes(
            self.name, self._answer, self._send_step, per_chat=self.config.max_pending_per_chat,
            total=MAX_PENDING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
            interval=send_interval,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """``POST /qq/webhook`` in webhook mode; none with the gateway."""
        return [web.post(WEBHOOK_PATH, self._webhook)] if self.config.mode == "webhook" else []

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; bad credentials show as ``failed``, never raise.

        Started already (and not stopped): only ``handle`` is taken, no second connection."""
        self._handle = handle
        if self._runner is not None and not self._stopping:
            return
        self._stopping = False
        self._lanes.open()
        self._health.set("starting")
        for key, value in (("app_id", self.app_id), ("secret", self.secret)):
            if not value:
                env = getattr(self.config, f"{key}_env")
                self._fail(f"no {key}: set adapters.qq.{key} or the environment variable {env} "
                           "(AppID / AppSecret at q.qq.com, 开发设置)")  # fmt: skip
                return
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        self._session = aiohttp.ClientSession(timeout=timeout)
        token = AccessToken(self._session, self.config.token_url, self.app_id, self.secret)
        token.on_refused = self._token_refused
        self._api = QQApi(self._session, self.config.api_base, self.app_id, token)
        intents = INTENTS | (GUILD_MESSAGES if self.config.all_messages else 0)
        self._gateway = Gateway(self._api, intents, self._dispatch)
        self._runner = asyncio.create_task(self._run(), name="qq")
        log.info("qq.started", mode=self.config.mode, api_base=self.config.api_base)

    async def stop(self) -> None:
        """Take no new events, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = True
        await cancel_tasks(self._runner)
        self._runner = None
        await self._lanes.drain(self.shutdown_grace)
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._api = None
        self._health.stopped()

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["mode"] = self.config.mode
        report["app_id"] = self.app_id or None
        report["bot_id"] = self._me.get("id")
        report["username"] = self._me.get("username")
        report["waiting"] = self._lanes.waiting()
        if self._gateway is not None and self.config.mode == "websocket":
            report["resumed"] = self._gateway.resumed
        return report

    def _token_refused(self, why: str) -> None:
        """A token refused after the adapter connected (the secret was reset at q.qq.com):
        ``failed``, as at start; the start's own refusal is :meth:`_run`'s to report."""
        if self._health.state == "connected":
            self._fail(why)

    def _fail(self, why: str) -> None:
        log.error("qq.failed", error=self._health.failed(why))

    # -- connecting --------------------------------------------------------------------------

    async def _run(self) -> None:
        """Fetch the token and the bot's user, then (gateway) stay connected until stopped."""
        backoff = Backoff(self.backoff_base, self.backoff_cap, self.stable_after)
        assert self._api is not None and self._gateway is not None
        while not self._stopping:
            try:
                if self.config.mode == "webhook":
                    await self._api.token.get()
                    await self._whoami()
                    self._connected()
                    return  # events now arrive on the route
                watch = asyncio.create_task(self._watch_ready(backoff))
                try:
                    await self._gateway.run()
                finally:
                    watch.cancel()
                    backoff.ended()  # short pauses again only after a session served a while
                code = self._gateway.close_code
                raise ConnectionError(f"the gateway closed the connection (close code {code})")
            except AdapterError as exc:
                self._fail(str(exc))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # network trouble: never let the loop die
                pause = backoff.next()
                self._health.set("reconnecting", f"{type(exc).__name__}: {exc}"[:300])
                log.warning("qq.reconnecting", error=redact.redact(str(exc))[:300],
                            retry_in=round(pause, 2))  # fmt: skip
                await asyncio.sleep(pause)

    async def _watch_ready(self, backoff: Backoff) -> None:
        assert self._gateway is not None
        await self._gateway.ready.wait()
        user = self._gateway.user
        self._me.update(id=str(user.get("id") or ""), username=str(user.get("username") or ""))
        backoff.connected()
        self._connected()

    async def _whoami(self) -> None:
        """The bot's own user (``GET /users/@me``), for health and mention stripping."""
        assert self._api is not None
        answer = await self._api.call("GET", "/users/@me")
        if answer.ok and isinstance(answer.data, dict):
            self._me.update(id=str(answer.data.get("id") or ""),
                            username=str(answer.data.get("username") or ""))  # fmt: skip
        else:
            log.info("qq.whoami_failed", error=answer.describe())

    def _connected(self) -> None:
        if self._health.connected(self.name):
            log.info("qq.connected", mode=self.config.mode, bot_id=self._me.get("id"))

    # -- receiving ---------------------------------------------------------------------------

    async def _webhook(self, request: web.Request) -> web.Response:
        """One POST from QQ: check the signature, answer validation, ACK and queue a dispatch.

        Nothing of an unsigned body is parsed but QQ's validation request, and every
        parse failure (bad JSON, nesting too deep for the parser) is a 4xx, never a 500."""
        body = await request.read()
        signature = request.headers.get("X-Signature-Ed25519", "")
        timestamp = request.headers.get("X-Signature-Timestamp", "")
        if self._key is None:
            return web.json_response({"error": "the QQ adapter has no secret"}, status=503)
        if not signature or not timestamp:
            d = validation(json_object(body))  # QQ sends this one unsigned (module docstring)
            if d is not None:
                return web.json_response(validation_answer(self._key, *d))
            log.warning("qq.webhook_refused", status=401, peer=request.remote)
            return web.json_response({"error": "missing signature"}, status=401)
        if not verify(self._key, timestamp, body, signature):
            log.warning("qq.webhook_refused", status=403, peer=request.remote)
            return web.json_response({"error": "bad signature"}, status=403)
        age = age_of(timestamp)
        if age > MAX_AGE:  # a replay the message-id dedup may have forgotten
            log.warning("qq.webhook_stale", status=401, age=round(age), peer=request.remote,
                        hint="a replayed request, or this host's clock is wrong")  # fmt: skip
            return web.json_response({"error": "stale signature timestamp"}, status=401)
        payload = json_object(body)
        if payload is None:
            return web.json_response({"error": "not a QQ payload"}, status=400)
        if payload.get("op") == 13 and isinstance(payload.get("d"), dict):
            d = payload["d"]
            return web.json_response(validation_answer(
                self._key, str(d.get("event_ts", "")), str(d.get("plain_token", ""))))  # fmt: skip
        if payload.get("op") == 0:
            if self._stopping or self._handle is None or self._health.state != "connected":
                return web.json_response({"error": "the QQ adapter is not ready"}, status=503)
            if self._inbound.full:
                return web.json_response({"error": "busy, deliver again later"}, status=503)
            await self._dispatch(str(payload.get("t") or ""), payload.get("d"),
                                 str(payload.get("id") or ""))  # fmt: skip
        return web.json_response({"op": 12, "d": 0})

    async def _dispatch(self, kind: str, d: Any, event_id: str) -> None:
        """Queue one event for its chat (duplicates and what is not for the rules dropped)."""
        self._health.event()
        try:
            incoming = read_dispatch(kind, d, event_id, self._me, self.config.admins_from,
                                     self._own)  # fmt: skip
        except Exception as exc:
            log.exception("qq.event_failed", kind=kind, error=repr(exc))
            return
        if incoming is None:
            return
        first = incoming.message.message_id or event_id
        if not await self._deliveries.first(self.app_id, first):
            log.info("qq.duplicate", kind=kind, id=first)
            return
        self._inbound.put(incoming.chat, incoming)

    # -- answering ---------------------------------------------------------------------------

    async def _answer(self, chat: Hashable, incoming: Incoming) -> None:
        """Run the rules on one message or event and queue its reply (a ChatQueues work)."""
        message = incoming.message
        assert self._handle is not None
        try:
            reply = await self._handle(message)
            if not reply.text.strip() and not reply.outgoing:
                return None
            pieces = compose(incoming.kind, reply.text, reply.outgoing,
                             msg_id=incoming.msg_id, event_id=incoming.event_id)  # fmt: skip
            self._queue(incoming.kind, incoming.target, pieces, incoming.msg_id)
        except Exception as exc:
            log.exception("qq.message_failed", message_id=message.message_id, error=repr(exc))
        return None

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post to ``target.chat`` (``group:``, ``private:``, ``channel:``, ``dm:``, ``guild:``
        and the id) or the C2C chat of ``target.user``: an active message."""
        chat = target.chat.strip() or (f"private:{target.user.strip()}" if target.user else "")
        prefix, _, ident = chat.partition(":")
        kind = TARGET_KINDS.get(prefix)
        if kind is None or not ident:
            raise AdapterError(
                "qq: the target chat must be group:<group_openid>, private:<user_openid>, "
                f"channel:<channel_id>, dm:<guild_id> or guild:<guild_id> (got {chat!r})"
            )
        if not text.strip() and not outgoing:
            raise AdapterError("qq: refusing to send an empty message")
        if self._api is None or self._health.state == "failed":
            raise AdapterError(f"qq: not connected ({self._health.error or 'starting'})")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue(kind, ident, compose(kind, text, outgoing), "", done)
        await done

    def _queue(self, kind: str, target: str, pieces: list[Any], msg_id: str,
               done: asyncio.Future[None] | None = None) -> None:  # fmt: skip
        out = QueuedReply(kind, target, pieces, msg_id, done)
        out.backoff = Backoff(self.backoff_base, self.backoff_cap)
        out.rate_limit_wait = self.rate_limit_wait
        if not pieces:
            out.finish(None)
            return
        self._outbound.put(f"{kind}:{target}", out)

    async def _send_step(self, key: Hashable, out: QueuedReply) -> float | None:
        try:
            return await send_piece(self._api, out, self._next_seq)
        finally:
            for sent in out.sent_ids:  # guild messages: a reply quoting one mentions the bot
                self._own[sent] = None
                if len(self._own) > MAX_OWN:
                    self._own.popitem(last=False)
            out.sent_ids.clear()

    def _next_seq(self, msg_id: str) -> int:
        """The next ``msg_seq`` for a reply to ``msg_id`` (1, 2, …)."""
        seq = self._seqs.pop(msg_id, 0) + 1
        self._seqs[msg_id] = seq
        if len(self._seqs) > MAX_SEQS:
            self._seqs.popitem(last=False)
        return seq
