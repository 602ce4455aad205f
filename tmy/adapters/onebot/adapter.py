"""The OneBot v11 adapter: QQ (NapCat, LLOneBot, Lagrange) talking to tmy's rules.

**Reverse** (the default): the implementation connects to
``ws://<tmy>/onebot/v11/ws`` on the daemon's one HTTP listener; the handshake
is checked before the upgrade (:mod:`tmy.adapters.onebot.handshake`). Only a
**Universal** client is served (events and API on one socket, what NapCat,
LLOneBot and Lagrange use); ``API`` or ``Event`` clients are refused with 400
because tmy could not answer on an event-only socket. Several bot accounts may
be connected at once (:mod:`tmy.adapters.onebot.accounts`).

**Forward**: tmy connects to the implementation's WebSocket server (``url``),
sends the token as ``Authorization: Bearer``, learns the account from the
lifecycle ``connect`` event (or any event's ``self_id``), and reconnects with
capped exponential backoff and jitter when the socket drops or goes silent.

**Inbound**: each ``message`` event (:mod:`tmy.adapters.onebot.events`) is
queued for its chat (:mod:`tmy.adapters.onebot.answering`): a reply the engine gives
at once (a FAQ answer) is queued as the event is read; any other run goes on on a
task of its own, so a long LLM run never stops the socket reader (which must keep
reading to receive the answers to our own ``send_msg`` actions). Chats are served
fairly (:mod:`tmy.adapters.fairness`): at most :data:`MAX_RUNS` runs of this adapter
(all accounts together) are in the engine at once, at most :data:`MAX_RUNS_PER_CHAT` of
them from one chat,
slots go round-robin over the chats that have messages waiting, and at most
``max_pending_per_chat`` messages wait per chat (:data:`MAX_WAITING` in all):
past that the chat's oldest waiting message is dropped
(``onebot.chat_dropped``, the ``tmy_chat_dropped`` metric). A message
delivered twice runs once (:mod:`tmy.adapters.dedup`, checked as it arrives).

**Events**: notices and requests (:mod:`tmy.adapters.onebot.notices`) run
like messages, in their chat's queue; the reply's text goes to the event's
chat, and a request is then accepted or declined as the run decided
(:mod:`tmy.adapters.onebot.requests`). Each message carries ``api``
(:mod:`tmy.adapters.onebot.api`: media downloads, quotes) and a
``stream``: a ``stream: chunks`` LLM step's sentences go out as they are
written, each through the chat's paced queue, and the rest of the final reply
after them.

**Outbound**: :mod:`tmy.adapters.onebot.sending` (structured parts:
:mod:`tmy.adapters.onebot.outbound`). ``send(target, …)`` on the bot's own
initiative uses the most recently connected account.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tmy import redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler, cancel_tasks
from tmy.adapters.dedup import Arrivals, Deliveries
from tmy.adapters.fairness import ChatLanes
from tmy.adapters.onebot.accounts import Accounts
from tmy.adapters.onebot.answering import Answering
from tmy.adapters.onebot.api import OneBotApi, Recent
from tmy.adapters.onebot.connection import CLOSE_TIMEOUT, MAX_FRAME_BYTES, Connection
from tmy.adapters.onebot.events import ID, frame_failure, is_id, to_message
from tmy.adapters.onebot.forward import forward_loop
from tmy.adapters.onebot.handshake import refusal
from tmy.adapters.onebot.notices import to_event
from tmy.adapters.onebot.outbound import localize
from tmy.adapters.onebot.sending import Outgoing, send_step
from tmy.config.adapters import OneBotConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger, preview
from tmy.message import Message, Target
from tmy.message import Outgoing as Parts
from tmy.store.base import Store
from tmy.types import Answer, answer_of

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    import aiohttp
    from aiohttp import web

log = get_logger("tmy.adapter.onebot")

MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one chat (the rest stay free for the other chats)
MAX_WAITING = 1000  # messages (and, separately, replies) waiting in all chats together
MAX_SENDS = MAX_RUNS  # send_msg actions in flight at once (all chats): a reply of every run
HEALTHY_SESSION = 10.0  # forward: a session this long without a failure frame resets the backoff


class OneBotAdapter(Answering):
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
        rules_dir: Path | None = None,
        media_private_hosts: Collection[str] = (),
    ) -> None:
        self.config = config or OneBotConfig()
        self.store = store  # the de-duplication window; None keeps it in this process only
        self.shutdown_grace = shutdown_grace  # how long stop() lets replies in flight go out
        self.rules_dir = rules_dir  # where a reply's image/file paths are read from
        self.media_private_hosts = tuple(media_private_hosts)  # limits.media_private_hosts
        self._handle: Handler | None = None
        self._answer: Answer | None = None  # the handler's way to answer at once
        self._health = AdapterHealth()
        self._accounts = Accounts(self._health, reverse=self.config.mode == "reverse")
        self._deliveries = Deliveries(store, "onebot")
        self._recent = Recent()  # messages seen lately, for quotes (REPLY_TO)
        self._apis: dict[str, OneBotApi] = {}  # per account: Message.api
        redact.add(self.config.access_token)  # a secret: masked in every log line and error
        self._lanes: ChatLanes[tuple[Message, dict[str, Any]], Outgoing] = ChatLanes(
            self.name, self._run, partial(send_step, self._accounts, self._recent),
            per_chat=self.config.max_pending_per_chat,
            total=MAX_WAITING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
            interval=self.config.send_interval,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound
        # each message's first-delivery check, decided as it arrives (tmy.adapters.dedup);
        # a first delivery goes straight into its chat's queue
        self._arrivals: Arrivals[tuple[str, str], tuple[Message, dict[str, Any]]] = Arrivals(
            self._deliveries, self._inbound.put, self._replayed
        )
        self._backoff = Backoff(self.backoff_base, self.backoff_cap)
        self._forward: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """The reverse WebSocket endpoint (with and without a trailing slash); none in forward."""
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        if self.config.mode != "reverse":
            return []
        path = self.config.path.rstrip("/")
        paths = [path, path + "/"] if path else ["/"]
        return [web.get(p, self._accept, allow_head=False) for p in paths]

    async def start(self, handle: Handler) -> None:
        import aiohttp  # deferred: aiohttp is ~120 ms of every CLI start

        self._handle = handle
        self._answer = answer_of(handle)
        self._stopping = self._accounts.stopping = False
        self._lanes.open()  # again after a stop()
        if self.config.mode == "forward":
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
            )
            self._health.set("starting")
            self._forward = asyncio.create_task(forward_loop(self), name="onebot-forward")
        else:
            self._health.set("starting", "waiting for a OneBot implementation to connect")
        log.info("onebot.started", mode=self.config.mode, endpoint=self._endpoint())

    async def stop(self) -> None:
        """Take no new messages, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = self._accounts.stopping = True
        await self._lanes.drain(self.shutdown_grace)
        await self._arrivals.close()
        await cancel_tasks(self._forward)
        self._forward = None
        await self._accounts.close_all()
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._health.set("stopped")

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["mode"] = self.config.mode
        report["endpoint"] = self._endpoint()
        report["self_ids"] = list(self._accounts.bots)
        report["waiting"] = self._lanes.waiting()
        return report

    # -- sending -------------------------------------------------------------------------------

    async def send(self, target: Target, text: str, outgoing: Parts | None = None) -> None:
        """Post ``text`` (and ``outgoing``: images, files, mentions …) to ``group:<id>`` or
        ``private:<id>`` (or ``target.user``).

        In a group, ``target.user`` (when given) is @-mentioned, as
        :class:`~tmy.adapters.base.Target` promises. The most recently
        connected bot account sends it.
        """
        chat = target.chat or (f"private:{target.user}" if target.user else "")
        kind, _, ident = chat.partition(":")
        if kind not in ("group", "private") or not ID.fullmatch(ident):
            raise AdapterError(
                f"onebot: the target chat must be 'group:<id>' or 'private:<id>' (got {chat!r})"
            )
        at = target.user if kind == "group" and target.user else None
        if at is not None and not ID.fullmatch(at):
            raise AdapterError(f"onebot: the target user must be an account id (got {at!r})")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        local = await localize(outgoing, self.rules_dir, self.media_private_hosts)
        out = Outgoing.of(chat, text, at=at, done=done, parts=outgoing, local=local)
        if not text.strip() and not out.pieces:
            raise AdapterError("onebot: refusing to send an empty message")
        account = self._accounts.latest()
        if account is None:
            raise AdapterError("onebot: no bot account connected")
        self._outbound.put((account, chat), out)
        await done

    # -- connections -------------------------------------------------------------------------

    async def _accept(self, request: web.Request) -> web.StreamResponse:
        """The reverse endpoint: check the handshake, then serve the socket until it ends."""
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        if self._stopping or self._handle is None:
            refused: tuple[int, str] | None = (
                503, "tmy is not accepting OneBot connections right now",
            )  # fmt: skip
        else:
            refused = refusal(request, self.config.access_token)
        if refused is not None:
            status, why = refused
            log.warning("onebot.refused", status=status, reason=why, peer=request.remote)
            return web.json_response({"error": why}, status=status)
        # no permessage-deflate: the implementation runs beside tmy, where compressing
        # every frame costs CPU on both sides and saves nothing (and frames are batched)
        ws = web.WebSocketResponse(
            autoping=False, max_msg_size=MAX_FRAME_BYTES, timeout=CLOSE_TIMEOUT, compress=False
        )
        if not ws.can_prepare(request).ok:
            return web.json_response(
                {"error": "this is a OneBot v11 reverse WebSocket endpoint: connect with ws://"},
                status=400,
            )
        await ws.prepare(request)
        conn = self._connection(ws, request.headers["X-Self-ID"].strip(), request.remote or "?")
        self._accounts.count_connect(conn.self_id)
        self._accounts.register(conn)
        why = "closed"
        try:
            why = await conn.run(self._on_event)
        finally:
            self._accounts.drop(conn, why)
        return ws

    def _connection(self, ws: Any, self_id: str, peer: str) -> Connection:
        return Connection(
            ws,
            self_id=self_id,
            peer=peer,
            heartbeat_timeout=self.config.heartbeat_timeout,
            action_timeout=self.config.action_timeout,
        )

    # -- events --------------------------------------------------------------------------------

    def _on_event(self, conn: Connection, event: dict[str, Any]) -> None:
        """One frame from a socket: learn the account, consume meta events, queue messages."""
        if "post_type" not in event:  # not an event: a failure an implementation sent unasked
            self._failure_frame(conn, event)
            return
        self._health.event()
        if not conn.self_id:  # forward: the lifecycle connect event (or any event) names it
            self_id = event.get("self_id")
            if not is_id(self_id):
                return
            conn.self_id = str(self_id)
            self._accounts.register(conn)
        post_type = event.get("post_type")
        if self._stopping or post_type not in ("message", "notice", "request"):
            return  # meta events (heartbeat, lifecycle), the bot's own sent messages
        self_id = conn.self_id
        if post_type == "message":
            message = to_message(
                self_id, event, self._accounts.sent(self_id), self.config.anonymous,
                self.config.admins_from,
            )  # fmt: skip
            if message is not None:
                self._recent.remember(self_id, message.message_id, message.text, message.user)
        else:
            message = to_event(self_id, event)
        if message is not None:
            api = self._apis.get(self_id)
            if api is None:
                api = self._apis[self_id] = OneBotApi(self._accounts, self._recent, self_id)
            message.api = api
            self._arrivals.put(
                self_id, message.message_id, (self_id, message.chat), (message, event)
            )

    def _replayed(self, key: tuple[str, str], incoming: tuple[Message, dict[str, Any]]) -> None:
        """A message this account delivered before, within the window: not run again."""
        log.info("onebot.duplicate", self_id=key[0], message_id=incoming[0].message_id)

    def _failure_frame(self, conn: Connection, frame: dict[str, Any]) -> None:
        """Log what an implementation said outside any event (a refused token, say) and keep it
        as the session's failure, so the close reason and the reconnect backoff know."""
        failure = frame_failure(frame)
        if failure is not None:
            conn.failure = failure
        log.warning(
            "onebot.failure_frame" if failure is not None else "onebot.unknown_frame",
            self_id=conn.self_id,
            peer=conn.peer,
            retcode=frame.get("retcode"),
            error=failure if failure is not None else redact.redact(preview(frame)),
        )

    async def _first_delivery(self, self_id: str, message_id: str) -> bool:
        """True the first time this account's ``message_id`` is seen (tmy.adapters.dedup)."""
        return await self._deliveries.first(self_id, message_id)

    def _endpoint(self) -> str:
        return self.config.path if self.config.mode == "reverse" else self.config.url
