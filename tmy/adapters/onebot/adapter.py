"""The OneBot v11 adapter: QQ (NapCat, LLOneBot, Lagrange) talking to tmy's rules.

**Reverse** (the default): the implementation connects to
``ws://<tmy>/onebot/v11/ws`` on the daemon's one HTTP listener. Before the
upgrade tmy checks, in order: the access token (``Authorization: Bearer <t>``
— ``Token <t>`` too, as go-cqhttp sent it — or ``?access_token=<t>``; 401 when
missing, 403 when wrong, compared in constant time), ``X-Self-ID`` (400 when
missing or not an id) and ``X-Client-Role``. Only a **Universal** client is
served (events and API on one socket, what NapCat, LLOneBot and Lagrange use);
``API`` or ``Event`` clients are refused with 400 because tmy could not answer
on an event-only socket; a missing role is taken as Universal. Several bot
accounts may be connected at once; a new connection for an account replaces
(and closes) the old one.

**Forward**: tmy connects to the implementation's WebSocket server (``url``),
sends the token as ``Authorization: Bearer``, learns the account from the
lifecycle ``connect`` event (or any event's ``self_id``), and reconnects with
capped exponential backoff and jitter when the socket drops or goes silent.

**Inbound**: each ``message`` event is queued for its chat and runs as its
own task, so a long LLM run never stops the socket reader (which must keep
reading to receive the answers to our own ``send_msg`` actions). Chats are
served fairly (:mod:`tmy.adapters.fairness`): at most :data:`MAX_RUNS` runs of
this adapter (all accounts together) are in the engine at once, at most
:data:`MAX_RUNS_PER_CHAT` of them from one chat, slots go round-robin over the
chats that have messages waiting, and at most ``max_pending_per_chat``
messages wait per chat (:data:`MAX_WAITING` in all): past that the chat's
oldest waiting message is dropped (``onebot.chat_dropped``, the
``tmy_chat_dropped`` metric). A message id seen again within
:data:`DEDUP_WINDOW` seconds (a replay after a reconnect, or the same account on
two transports) runs once: the claim is an atomic ``update`` in the store, so it
also holds across daemons sharing Redis. If the store cannot be reached the
message runs anyway (answering twice beats never answering).

**Outbound**: ``send_msg`` with the message as an array of segments (so no
text is ever read as a CQ code); sends to one chat keep at least
``send_interval`` apart (QQ's risk control punishes bursts) without delaying
other chats: each chat's replies wait in that chat's own queue (at most
``max_pending_per_chat``; past that the oldest is dropped, logged and
counted), a reply waiting for its chat's turn holds no adapter-wide slot, and
the :data:`MAX_SENDS` sends in flight go round-robin over the chats; replies longer than
:data:`~tmy.adapters.onebot.codec.MAX_TEXT_PER_MESSAGE` go out as several
messages. ``send(target, …)`` on the bot's own initiative uses the most
recently connected account.

**Anonymous** group messages (``user_id`` 80000000 with an ``anonymous``
object) are keyed on the anonymous id: ``USER`` is ``anonymous:<id>``, so two
anonymous senders never share memory or variables. ``anonymous: ignore``
drops them instead.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import re
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, fields
from typing import Any

import aiohttp
from aiohttp import web

from tmy import metrics, redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.fairness import ChatQueues, PendingSend
from tmy.adapters.http import parse_listen
from tmy.adapters.onebot.codec import (
    parse_cq,
    read_message,
    reply_segments,
    segments_of,
    split_text,
)
from tmy.adapters.onebot.connection import (
    CLOSE_TIMEOUT,
    MAX_FRAME_BYTES,
    ActionFailed,
    Connection,
)
from tmy.config import Settings
from tmy.errors import AdapterError, ConfigError, StoreError
from tmy.logs import get_logger, preview
from tmy.message import Message, Target
from tmy.store.base import MISSING, Store

log = get_logger("tmy.adapter.onebot")

DEDUP_WINDOW = 300.0  # seconds a message id is remembered (store key dedup/onebot/<self>/<id>)
MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one chat (the rest stay free for the other chats)
MAX_WAITING = 1000  # messages (and, separately, replies) waiting in all chats together
MAX_SENDS = 32  # send_msg actions in flight at once (all chats)
MAX_SENT_IDS = 1000  # ids of sent messages remembered per account (a reply to one = a mention)
HEALTHY_SESSION = 10.0  # forward: a session this long without a failure frame resets the backoff

# account, user, group ids: QQ numbers, or the string ids of other OneBot platforms
_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")
_LOOPBACK_NAMES = ("localhost", "")
ANONYMOUS_PREFIX = "anonymous:"  # USER of an anonymous group sender: anonymous:<anonymous.id>


@dataclass(frozen=True, slots=True)
class OneBotConfig:
    """``adapters.onebot`` with its defaults (see config/tmy.yaml for each key)."""

    mode: str = "reverse"
    path: str = "/onebot/v11/ws"
    url: str = "ws://127.0.0.1:3001"
    access_token: str = ""
    heartbeat_timeout: float = 60.0
    send_interval: float = 0.5
    action_timeout: float = 10.0
    quote_reply: bool = False
    at_sender: bool = False
    max_pending_per_chat: int = 20
    anonymous: str = "key"

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> OneBotConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in section.items() if k in known and v is not None})
        if config.mode not in ("reverse", "forward"):
            raise ConfigError(
                f"adapters.onebot.mode must be reverse or forward (got {config.mode!r})"
            )
        if config.mode == "reverse" and not config.path.startswith("/"):
            raise ConfigError(f"adapters.onebot.path must start with '/' (got {config.path!r})")
        if config.mode == "forward" and not config.url.startswith(("ws://", "wss://")):
            raise ConfigError(
                f"adapters.onebot.url must be a ws:// or wss:// URL (got {config.url!r})"
            )
        cap = config.max_pending_per_chat
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_WAITING:
            raise ConfigError(
                f"adapters.onebot.max_pending_per_chat must be a whole number from 1 to "
                f"{MAX_WAITING} (got {cap!r})"
            )
        if config.anonymous not in ("key", "ignore"):
            raise ConfigError(
                f"adapters.onebot.anonymous must be key or ignore (got {config.anonymous!r})"
            )
        return config


def from_settings(settings: Settings, store: Store | None = None) -> OneBotAdapter | None:
    """The adapter ``adapters.onebot`` describes, or None when it is not enabled."""
    section = settings.adapters.get("onebot") or {}
    if not section.get("enabled"):
        return None
    config = OneBotConfig.from_section(section)
    if config.mode == "reverse" and not config.access_token and _exposed(settings.http_listen):
        log.warning(
            "onebot.no_access_token",
            listen=settings.http_listen,
            hint="anyone who reaches this port can speak as any QQ user: set "
            "adapters.onebot.access_token (or TMY_ONEBOT_TOKEN) here and in the implementation",
        )
    return OneBotAdapter(config, store=store, shutdown_grace=settings.shutdown_grace)


class OneBotAdapter:
    """OneBot v11 over WebSocket, reverse or forward; see the module docstring."""

    name = "onebot"
    # forward-mode reconnect pauses: first ~backoff_base, doubling up to backoff_cap (tests shrink)
    backoff_base = 1.0
    backoff_cap = 30.0
    healthy_after = HEALTHY_SESSION  # forward: seconds a session must last to reset the backoff

    def __init__(
        self,
        config: OneBotConfig | None = None,
        *,
        store: Store | None = None,
        shutdown_grace: float = 30.0,
    ) -> None:
        self.config = config or OneBotConfig()
        self.store = store  # the de-duplication window; None keeps it in this process only
        self.shutdown_grace = shutdown_grace  # how long stop() lets replies in flight go out
        self._handle: Handler | None = None
        self._health = AdapterHealth()
        self._bots: dict[str, Connection] = {}  # account -> live connection, most recent last
        self._conns: set[Connection] = set()  # every open socket, accounts known or not
        self._sent: dict[str, OrderedDict[str, None]] = {}  # account -> ids of sent messages
        self._seen: OrderedDict[str, float] = OrderedDict()  # dedup without a store
        redact.add(self.config.access_token)  # a secret: masked in every log line and error
        cap = self.config.max_pending_per_chat
        # keyed (account, chat): messages waiting to run, replies waiting for their chat's turn
        self._inbound: ChatQueues[tuple[Message, dict[str, Any]]] = ChatQueues(
            self.name, "message", self._run, per_chat=cap, total=MAX_WAITING,
            in_flight=MAX_RUNS, per_chat_in_flight=MAX_RUNS_PER_CHAT,
        )  # fmt: skip
        self._outbound: ChatQueues[_Outgoing] = ChatQueues(
            self.name, "reply", self._send_piece, per_chat=cap, total=MAX_WAITING,
            in_flight=MAX_SENDS, interval=self.config.send_interval,
            on_drop=_Outgoing.dropped, on_fail=_Outgoing.failed,
        )  # fmt: skip
        self._backoff = Backoff(self.backoff_base, self.backoff_cap)
        self._aux: set[asyncio.Task[Any]] = set()  # closing replaced sockets
        self._forward: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._stopping = False
        self._connected_before: set[str] = set()  # accounts (reverse) / "" (forward), for metrics

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """The reverse WebSocket endpoint (with and without a trailing slash); none in forward."""
        if self.config.mode != "reverse":
            return []
        path = self.config.path.rstrip("/")
        paths = [path, path + "/"] if path else ["/"]
        return [web.get(p, self._accept, allow_head=False) for p in paths]

    async def start(self, handle: Handler) -> None:
        self._handle = handle
        self._stopping = False
        self._inbound.accepting = self._outbound.accepting = True  # again after a stop()
        if self.config.mode == "forward":
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
            )
            self._health.set("starting")
            self._forward = asyncio.create_task(self._forward_loop(), name="onebot-forward")
        else:
            self._health.set("starting", "waiting for a OneBot implementation to connect")
        log.info("onebot.started", mode=self.config.mode, endpoint=self._endpoint())

    async def stop(self) -> None:
        """Take no new messages, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = True
        self._inbound.accepting = False
        deadline = time.monotonic() + self.shutdown_grace
        await self._inbound.join(self.shutdown_grace)  # runs end; their replies are queued
        await self._outbound.join(deadline - time.monotonic())
        await self._inbound.close()
        await self._outbound.close()
        if self._forward is not None:
            self._forward.cancel()
            await asyncio.gather(self._forward, return_exceptions=True)
            self._forward = None
        for conn in list(self._conns):
            await conn.close("tmy is shutting down", code=aiohttp.WSCloseCode.GOING_AWAY)
        for task in list(self._aux):
            task.cancel()
        await asyncio.gather(*self._aux, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._health.set("stopped")

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["mode"] = self.config.mode
        report["endpoint"] = self._endpoint()
        report["self_ids"] = list(self._bots)
        report["waiting"] = {"messages": self._inbound.waiting, "replies": self._outbound.waiting}
        return report

    # -- sending -------------------------------------------------------------------------------

    async def send(self, target: Target, text: str) -> None:
        """Post ``text`` to ``group:<id>`` or ``private:<id>`` (or ``target.user``).

        In a group, ``target.user`` (when given) is @-mentioned, as
        :class:`~tmy.adapters.base.Target` promises. The most recently
        connected bot account sends it.
        """
        chat = target.chat or (f"private:{target.user}" if target.user else "")
        kind, _, ident = chat.partition(":")
        if kind not in ("group", "private") or not _ID.fullmatch(ident):
            raise AdapterError(
                f"onebot: the target chat must be 'group:<id>' or 'private:<id>' (got {chat!r})"
            )
        if not text.strip():
            raise AdapterError("onebot: refusing to send an empty message")
        at = target.user if kind == "group" and target.user else None
        if at is not None and not _ID.fullmatch(at):
            raise AdapterError(f"onebot: the target user must be an account id (got {at!r})")
        if not self._bots:
            raise AdapterError("onebot: no bot account connected")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue_reply(next(reversed(self._bots)), chat, text, at=at, done=done)
        await done

    def _queue_reply(
        self,
        self_id: str,
        chat: str,
        text: str,
        *,
        quote: Any = None,
        at: str | None = None,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        """Queue ``text`` for ``chat``: its pieces go out paced, fairly among the chats."""
        kind, _, ident = chat.partition(":")
        id_key = "group_id" if kind == "group" else "user_id"
        pieces = [
            # the quote and the @ go with the first piece only
            reply_segments(piece, quote=quote if i == 0 else None, at=at if i == 0 else None)
            for i, piece in enumerate(split_text(text))
        ]
        where = {"message_type": kind, id_key: _num(ident)}
        self._outbound.put((self_id, chat), _Outgoing(where, pieces, done))

    async def _send_piece(self, key: Hashable, out: _Outgoing) -> float | None:
        """``send_msg`` the next piece of ``out`` (a ChatQueues work: 0 = more pieces to go)."""
        self_id, chat = key  # type: ignore[misc]
        conn = self._bots.get(self_id)
        try:
            if conn is None:
                raise AdapterError(f"onebot: bot account {self_id} is not connected")
            data = await conn.call("send_msg", {**out.where, "message": out.pieces[out.index]})
        except AdapterError as exc:
            log.warning(
                "onebot.send_failed",
                self_id=self_id,
                chat=chat,
                retcode=exc.retcode if isinstance(exc, ActionFailed) else None,
                error=str(exc),
            )
            out.finish(exc)
            return None
        except asyncio.CancelledError:
            out.finish(AdapterError(f"onebot: tmy stopped before the message to {chat} went out"))
            raise
        if isinstance(data, dict) and data.get("message_id") is not None:
            self._remember_sent(self_id, str(data["message_id"]))
        out.index += 1
        if out.index < len(out.pieces):
            return 0.0  # the next piece, after this chat's send_interval
        out.finish(None)
        return None

    def _remember_sent(self, self_id: str, message_id: str) -> None:
        ids = self._sent.setdefault(self_id, OrderedDict())
        ids[message_id] = None
        if len(ids) > MAX_SENT_IDS:
            ids.popitem(last=False)

    # -- connections -------------------------------------------------------------------------

    async def _accept(self, request: web.Request) -> web.StreamResponse:
        """The reverse endpoint: check the handshake, then serve the socket until it ends."""
        refused = self._refusal(request)
        if refused is not None:
            status, why = refused
            log.warning("onebot.refused", status=status, reason=why, peer=request.remote)
            return web.json_response({"error": why}, status=status)
        ws = web.WebSocketResponse(
            autoping=False, max_msg_size=MAX_FRAME_BYTES, timeout=CLOSE_TIMEOUT
        )
        if not ws.can_prepare(request).ok:
            return web.json_response(
                {"error": "this is a OneBot v11 reverse WebSocket endpoint: connect with ws://"},
                status=400,
            )
        await ws.prepare(request)
        conn = self._connection(ws, request.headers["X-Self-ID"].strip(), request.remote or "?")
        self._count_connect(conn.self_id)
        self._register(conn)
        why = "closed"
        try:
            why = await conn.run(self._on_event)
        finally:
            self._drop(conn, why)
        return ws

    def _refusal(self, request: web.Request) -> tuple[int, str] | None:
        """(status, why) when a reverse connection must be refused before the upgrade."""
        if self._stopping or self._handle is None:
            return 503, "tmy is not accepting OneBot connections right now"
        token = self.config.access_token
        if token:
            given = _given_token(request)
            if given is None:
                return 401, "missing access token: send 'Authorization: Bearer <token>'"
            if not hmac.compare_digest(given.encode(errors="surrogateescape"), token.encode()):
                return 403, "wrong access token"
        self_id = request.headers.get("X-Self-ID", "").strip()
        if not self_id:
            return 400, "missing X-Self-ID header (the bot account's QQ number)"
        if not _ID.fullmatch(self_id):
            return 400, f"X-Self-ID {self_id[:70]!r} is not an account id"
        role = request.headers.get("X-Client-Role", "Universal").strip()
        if role.lower() != "universal":
            return 400, (
                f"X-Client-Role {role[:20]!r} is not supported: tmy needs one Universal "
                "connection (events and API on one socket)"
            )
        return None

    async def _forward_loop(self) -> None:
        """Forward mode: connect, serve, and reconnect with capped backoff until stopped."""
        assert self._session is not None
        backoff = self._backoff = Backoff(self.backoff_base, self.backoff_cap)
        token = self.config.access_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        url = self.config.url
        while not self._stopping:
            try:
                ws = await self._session.ws_connect(
                    url,
                    headers=headers,
                    autoping=False,
                    max_msg_size=MAX_FRAME_BYTES,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT),
                )
            except aiohttp.WSServerHandshakeError as exc:
                why = f"{url} refused the connection with HTTP {exc.status}"
                if exc.status in (401, 403):
                    why += " (check adapters.onebot.access_token against the implementation's)"
                log.error("onebot.connect_failed", url=url, status=exc.status, error=why)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                why = f"cannot connect to {url}: {exc or type(exc).__name__}"
                log.warning("onebot.connect_failed", url=url, error=why)
            except Exception as exc:  # never let the reconnect loop die
                why = f"cannot connect to {url}: {exc!r}"
                log.exception("onebot.connect_failed", url=url, error=why)
            else:
                conn = self._connection(ws, "", url)
                self._conns.add(conn)
                self._health.set("connected")
                self._count_connect("")
                log.info("onebot.connected", url=url)
                why = "closed"
                started = time.monotonic()
                try:
                    why = await conn.run(self._on_event)
                finally:
                    await conn.close(why)
                    self._drop(conn, why)
                if conn.failure is not None:
                    why = f"{why}; the implementation said: {conn.failure}"
                elif time.monotonic() - started >= self.healthy_after:
                    backoff.reset()  # a healthy session: start over from a short pause
            if self._stopping:
                break
            self._health.set("reconnecting", why)
            delay = backoff.next()
            log.warning(
                "onebot.reconnecting", url=url, reason=why, attempt=backoff.attempt,
                retry_in=round(delay, 2),
            )  # fmt: skip
            await asyncio.sleep(delay)

    def _count_connect(self, account: str) -> None:
        """Metrics: a socket was established; a reconnect when this account had one before."""
        again = account in self._connected_before
        if not again and len(self._connected_before) < metrics.MAX_LABEL_VALUES:
            self._connected_before.add(account)
        metrics.adapter_connected(self.name, reconnect=again)

    def _connection(self, ws: Any, self_id: str, peer: str) -> Connection:
        return Connection(
            ws,
            self_id=self_id,
            peer=peer,
            heartbeat_timeout=self.config.heartbeat_timeout,
            action_timeout=self.config.action_timeout,
        )

    def _register(self, conn: Connection) -> None:
        """``conn`` now serves its account; an older connection for it is closed."""
        self._conns.add(conn)
        old = self._bots.pop(conn.self_id, None)
        self._bots[conn.self_id] = conn  # re-inserted: the most recently connected is last
        self._health.set("connected")
        log.info("onebot.account_connected", self_id=conn.self_id, peer=conn.peer)
        if old is not None and old is not conn:
            log.warning("onebot.replaced", self_id=conn.self_id, old=old.peer, new=conn.peer)
            task = asyncio.create_task(old.close("replaced by a newer connection"))
            self._aux.add(task)
            task.add_done_callback(self._aux.discard)

    def _drop(self, conn: Connection, why: str) -> None:
        self._conns.discard(conn)
        if conn.self_id and self._bots.get(conn.self_id) is conn:
            del self._bots[conn.self_id]
        if not self._stopping:
            log.warning(
                "onebot.disconnected", self_id=conn.self_id, peer=conn.peer, reason=why,
                failure=conn.failure,
            )  # fmt: skip
        if self._stopping:
            self._health.set("stopped")
        elif self._bots:
            self._health.set("connected")
        elif self.config.mode == "reverse":
            self._health.set("reconnecting", f"no OneBot implementation connected ({why})")

    # -- events --------------------------------------------------------------------------------

    def _on_event(self, conn: Connection, event: dict[str, Any]) -> None:
        """One frame from a socket: learn the account, consume meta events, queue messages."""
        if "post_type" not in event:  # not an event: a failure an implementation sent unasked
            self._failure_frame(conn, event)
            return
        self._health.event()
        if not conn.self_id:  # forward: the lifecycle connect event (or any event) names it
            self_id = event.get("self_id")
            if not _is_id(self_id):
                return
            conn.self_id = str(self_id)
            self._register(conn)
        post_type = event.get("post_type")
        if post_type != "message" or self._stopping:
            return  # meta events (heartbeat, lifecycle), notices, requests, own sent messages
        message = self._message(conn.self_id, event)
        if message is not None:
            self._inbound.put((conn.self_id, message.chat), (message, event))

    def _failure_frame(self, conn: Connection, frame: dict[str, Any]) -> None:
        """Log what an implementation said outside any event (a refused token, say) and keep it
        as the session's failure, so the close reason and the reconnect backoff know."""
        detail = next(
            (str(frame[k]) for k in ("wording", "message", "msg", "error") if frame.get(k)), ""
        )
        retcode = frame.get("retcode")
        status = frame.get("status")
        failed = status == "failed" or retcode not in (None, 0, 1) or bool(frame.get("error"))
        text = redact.redact(
            f"status {status}, retcode {retcode}" + (f": {detail}" if detail else "")
            if failed
            else preview(frame)
        )
        if failed:
            conn.failure = text
        log.warning(
            "onebot.failure_frame" if failed else "onebot.unknown_frame",
            self_id=conn.self_id,
            peer=conn.peer,
            retcode=retcode,
            error=text,
        )

    async def _run(self, key: Hashable, incoming: tuple[Message, dict[str, Any]]) -> None:
        """Answer one message (a ChatQueues work): dedup, the engine, then queue the reply."""
        self_id, chat = key  # type: ignore[misc]
        message, event = incoming
        try:
            if not await self._first_delivery(self_id, message.message_id):
                log.info("onebot.duplicate", self_id=self_id, message_id=message.message_id)
                return None
            if message.reply_to is not None and message.reply_to in self._sent.get(self_id, ()):
                message.mentions_bot = True  # quotes a send whose id arrived after the event
            assert self._handle is not None
            reply = await self._handle(message)
            if not reply.text:
                return None
            group = not message.private
            anonymous = message.user.startswith(ANONYMOUS_PREFIX)
            self._queue_reply(
                self_id,
                chat,
                reply.text,
                quote=event.get("message_id") if group and self.config.quote_reply else None,
                at=message.user if group and self.config.at_sender and not anonymous else None,
            )
        except Exception:
            log.exception("onebot.message_failed", self_id=self_id, event=event.get("message_id"))
        return None

    def _message(self, self_id: str, event: dict[str, Any]) -> Message | None:
        """The engine's Message for a ``message`` event, or None when it is not one we answer."""
        kind = event.get("message_type")
        user_id = event.get("user_id")
        if kind not in ("group", "private") or not _is_id(user_id):
            log.debug("onebot.ignored", reason="not a private or group message", kind=kind)
            return None
        user = str(user_id)
        if user == self_id:
            return None  # the bot's own message reported back
        if kind == "group":
            group_id = event.get("group_id")
            if not _is_id(group_id):
                log.warning("onebot.ignored", reason="group message without a group_id")
                return None
            chat = f"group:{group_id}"
            anonymous = event.get("anonymous")
            if anonymous is not None or event.get("sub_type") == "anonymous":
                # all anonymous senders share user_id 80000000: never let them share its identity
                if self.config.anonymous == "ignore":
                    log.debug("onebot.ignored", reason="anonymous (adapters.onebot.anonymous)")
                    return None
                anon_id = _anonymous_id(anonymous)
                if anon_id is None:
                    log.warning(
                        "onebot.ignored", reason="anonymous message without an anonymous id",
                        chat=chat,
                    )  # fmt: skip
                    return None
                user = ANONYMOUS_PREFIX + anon_id
        else:
            chat = f"private:{user}"
        segments = segments_of(event.get("message"))
        if not segments and isinstance(event.get("raw_message"), str):
            segments = parse_cq(event["raw_message"])
        parsed = read_message(segments, self_id, self._sent.get(self_id, ()))
        message_id = event.get("message_id")
        return Message(
            parsed.text,
            user=user,
            chat=chat,
            platform="onebot",
            user_name=_display_name(event) or user,
            private=kind == "private",
            raw=event,
            mentions_bot=parsed.mentions_bot,
            reply_to=parsed.reply_to,
            self_id=self_id,
            message_id="" if message_id is None else str(message_id),
        )

    async def _first_delivery(self, self_id: str, message_id: str) -> bool:
        """True the first time this account's ``message_id`` is seen within the window."""
        if not message_id:
            return True
        key = f"dedup/onebot/{self_id}/{message_id}"
        if self.store is None:
            return self._first_local(key)
        try:
            return bool(await self.store.update(key, _claim, ttl=DEDUP_WINDOW))
        except StoreError as exc:
            log.warning("onebot.dedup_unavailable", key=key, error=str(exc))
            return True

    def _first_local(self, key: str) -> bool:
        now = time.monotonic()
        while self._seen and next(iter(self._seen.values())) < now:
            self._seen.popitem(last=False)
        if key in self._seen:
            return False
        self._seen[key] = now + DEDUP_WINDOW
        return True

    def _endpoint(self) -> str:
        return self.config.path if self.config.mode == "reverse" else self.config.url


class _Outgoing(PendingSend):
    """One reply (or ``send``) waiting in its chat's queue: its pieces and who waits for it."""

    __slots__ = ("index", "pieces", "where")
    platform = "onebot"

    def __init__(
        self, where: dict[str, Any], pieces: list[list[Any]], done: asyncio.Future[None] | None
    ) -> None:
        self.where = where  # message_type and group_id / user_id
        self.pieces = pieces  # each piece's segments
        self.index = 0  # the next piece to send
        super().__init__(done)  # send() waits on it; None for replies


def _claim(current: Any) -> tuple[Any, bool]:
    """Store update: mark the key seen; the result says whether it was new."""
    return True, current is MISSING


def _given_token(request: web.Request) -> str | None:
    """The token from ``Authorization: Bearer|Token <t>``, else ``?access_token=``."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() in ("bearer", "token") and value.strip():
        return value.strip()
    query = request.query.get("access_token", "")
    return query or None


def _anonymous_id(anonymous: Any) -> str | None:
    """The sender's anonymous id (``anonymous.id``, an int64), or None when there is none."""
    if not isinstance(anonymous, dict):
        return None
    value = anonymous.get("id")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _ID.fullmatch(value):
        return value
    return None


def _display_name(event: dict[str, Any]) -> str:
    anonymous = event.get("anonymous")
    if isinstance(anonymous, dict) and anonymous.get("name"):
        return str(anonymous["name"])
    sender = event.get("sender")
    if not isinstance(sender, dict):
        return ""
    return str(sender.get("card") or sender.get("nickname") or "")


def _is_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def _num(ident: str) -> int | str:
    """QQ ids go out as numbers (the spec's int64); other platforms' string ids as they are."""
    return int(ident) if ident.isdigit() else ident


def _exposed(listen: str) -> bool:
    """True when the HTTP listener is reachable from other machines."""
    try:
        host, _ = parse_listen(listen)
    except AdapterError:
        return False
    if host in _LOOPBACK_NAMES:
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True
