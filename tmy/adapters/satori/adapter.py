"""The Satori adapter: every account a Satori server serves, talking to tmy's rules.

**Receiving.** One WebSocket to ``{api_base}/v1/events``
(:mod:`~tmy.adapters.satori.connection`): IDENTIFY with the token, READY lists
the accounts (:mod:`~tmy.adapters.satori.logins`), PING every 10 s, EVENTs
(:mod:`~tmy.adapters.satori.events`). A lost connection sets ``reconnecting`` and
is tried again with capped exponential backoff and jitter (the pauses start short
again only after a connection served :attr:`SatoriAdapter.stable_after` seconds: a
server that answers READY and closes is not hammered), identifying with the
last event's ``sn`` so the server replays what was missed; message and event ids
are deduplicated in the store (:class:`~tmy.adapters.dedup.Deliveries`), so a
replay runs nothing twice. A refused token sets ``failed`` and is not tried again
(fix the token and restart); the daemon and the other adapters serve on.

Each message or event is queued for its chat (account and channel) and runs as its
own task; chats are served fairly (:mod:`tmy.adapters.fairness`): at most
:data:`MAX_RUNS` runs at once, :data:`MAX_RUNS_PER_CHAT` from one chat, at most
``max_pending_per_chat`` waiting per chat. Answering is
:mod:`~tmy.adapters.satori.replies`; sending (pacing, 429s) is
:mod:`~tmy.adapters.satori.sending`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tmy import redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler, cancel_tasks
from tmy.adapters.dedup import Deliveries
from tmy.adapters.fairness import ChatLanes
from tmy.adapters.satori.admins import ChatAdmins
from tmy.adapters.satori.api import SatoriHttp
from tmy.adapters.satori.connection import Ended, EventStream
from tmy.adapters.satori.events import Incoming, read_event
from tmy.adapters.satori.logins import Logins, read_login
from tmy.adapters.satori.replies import Answering
from tmy.adapters.satori.sending import QueuedReply
from tmy.config.satori import SatoriConfig
from tmy.logs import get_logger
from tmy.store.base import Store

log = get_logger("tmy.adapter.satori")

MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one chat
MAX_PENDING = 1000  # messages waiting in all chats
MAX_SENDS = 32  # message.create requests in flight at once (all chats)
LOGIN_EVENTS = ("login-added", "login-updated", "login-removed")
__all__ = ["SatoriAdapter"]


class SatoriAdapter(Answering):
    """A Satori server's accounts over its WebSocket events and HTTP API; see the module doc."""

    name = "satori"
    backoff_base = 1.0  # reconnect pauses: first ~backoff_base, doubling up to backoff_cap
    backoff_cap = 60.0
    stable_after = 30.0  # seconds a connection must serve before the pauses start short again
    ping_interval = 10.0  # seconds between PINGs (the protocol's 10 s)

    def __init__(
        self,
        config: SatoriConfig | None = None,
        *,
        token: str = "",
        store: Store | None = None,
        shutdown_grace: float = 30.0,
        rules_dir: Path | None = None,
    ) -> None:
        self.config = config or SatoriConfig()
        self.token = token
        redact.add(token)
        self.rules_dir = rules_dir
        self.shutdown_grace = shutdown_grace
        self.send_interval = float(self.config.send_interval)  # per-chat pacing (tests: 0)
        self._deliveries = Deliveries(store, "satori")
        self._handle: Handler | None = None
        self._session: aiohttp.ClientSession | None = None
        self._http: SatoriHttp | None = None
        self._stream: EventStream | None = None
        self._health = AdapterHealth()
        self._logins = Logins()
        self._proxy_urls: tuple[str, ...] = ()
        self._sent_ids: dict[tuple[str, str], OrderedDict[str, None]] = {}
        self._runner: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        # events in arrival order, checked (dedup) and queued for their chat by _read_events
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue(MAX_PENDING)
        self._stopping = False
        self._lanes: ChatLanes[Incoming, QueuedReply] = ChatLanes(
            self.name, self._answer, self._send_step, per_chat=self.config.max_pending_per_chat,
            total=MAX_PENDING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
            interval=self.send_interval,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound
        self._admins = ChatAdmins(self._member, self.config.admins_from)

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return []  # events come over the adapter's own WebSocket client

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; never raises for the server's trouble.
        Started already (and not stopped): nothing more (a second connection would take
        every event twice, and the first session would leak)."""
        if self._runner is not None and not self._runner.done():
            log.warning("satori.already_started")
            return
        self._handle = handle
        self._stopping = False
        self._lanes.open()
        self._outbound.interval = self.send_interval
        self._health.set("starting")
        self._session = aiohttp.ClientSession()
        self._http = SatoriHttp(self.config.api_base, self.token, self._session)
        self._stream = EventStream(self._http, on_ready=self._ready, on_event=self._event,
                                   on_meta=self._meta)  # fmt: skip
        self._stream.ping_interval = self.ping_interval
        self._runner = asyncio.create_task(self._run(), name="satori")
        self._reader = asyncio.create_task(self._read_events(), name="satori-events")
        log.info("satori.started", api_base=self.config.api_base)

    async def stop(self) -> None:
        """Take no new events, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = True
        await cancel_tasks(self._runner, self._reader)
        self._runner = self._reader = None
        await self._lanes.drain(self.shutdown_grace)
        self._http = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._health.stopped()

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["api_base"] = self.config.api_base
        report["logins"] = self._logins.as_list()
        report["sn"] = self._stream.sn if self._stream is not None else None
        report["waiting"] = self._lanes.waiting()
        return report

    def _fail(self, why: str) -> None:
        log.error("satori.failed", error=self._health.failed(why))

    # -- receiving ---------------------------------------------------------------------------

    async def _run(self) -> None:
        """Connect and read, reconnecting with backoff until stopped or refused."""
        assert self._stream is not None
        backoff = Backoff(self.backoff_base, self.backoff_cap, self.stable_after)
        while not self._stopping:
            backoff.connected()
            try:
                ended = await self._stream.connect()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                why = str(exc) or type(exc).__name__  # aiohttp's own words, not its repr
                ended = Ended(False, f"cannot connect to {self._stream.url}: {why}")
            except Exception as exc:  # never let the reconnect loop die
                log.exception("satori.connection_crashed", error=repr(exc))
                ended = Ended(False, repr(exc))
            if self._stopping:
                return
            if ended.refused:
                self._fail(self._refusal(ended.why))
                return
            backoff.ended(ended.ready)  # it served a while (not READY and straight away closed)
            delay = backoff.next()
            self._health.set("reconnecting", redact.redact(ended.why))
            log.warning("satori.reconnecting", error=redact.redact(ended.why),
                        attempt=backoff.attempt, retry_in=round(delay, 2),
                        sn=self._stream.sn)  # fmt: skip
            await asyncio.sleep(delay)

    def _refusal(self, why: str) -> str:
        """What ``failed`` says of a refused connection: the token, unless the server said
        something else (LLOneBot closes 1008 "invalid address" on a wrong path)."""
        fix = (f"set adapters.satori.token or the environment variable "
               f"{self.config.token_env} to the server's token, then restart")  # fmt: skip
        if any(word in why.lower() for word in ("token", "auth", "4004", "401", "403")):
            return f"the Satori server refused the token ({why}); {fix}"
        return (
            f"the Satori server refused the connection to {self._stream_url()} ({why}): "
            f"check that adapters.satori.api_base is the server's root (Koishi: "
            f"http://host:5140/satori; LLOneBot and Chronocat: http://host:port), or {fix}"
        )

    def _stream_url(self) -> str:
        return self._stream.url if self._stream is not None else self.config.api_base

    def _ready(self, body: dict[str, Any]) -> None:
        self._logins.replace(body.get("logins"))
        self._meta(body)
        self._health.connected(self.name)
        log.info("satori.connected", logins=self._logins.as_list(),
                 sn=self._stream.sn if self._stream else None)  # fmt: skip

    def _meta(self, body: dict[str, Any]) -> None:
        urls = body.get("proxy_urls")
        if isinstance(urls, list):
            self._proxy_urls = tuple(str(u) for u in urls if u)

    def _event(self, body: dict[str, Any]) -> None:
        """One EVENT: a login change now, anything else checked and queued for its chat."""
        self._health.event()
        kind = str(body.get("type") or "")
        if kind in LOGIN_EVENTS:
            change = {"login-added": self._logins.added, "login-updated": self._logins.updated,
                      "login-removed": self._logins.removed}[kind]  # fmt: skip
            login = change(body.get("login"))
            log.info("satori.login_changed", change=kind,
                     login=login.as_dict() if login is not None else None)  # fmt: skip
            return
        try:
            self._events.put_nowait(body)
        except asyncio.QueueFull:  # the store is stuck: drop rather than hold the socket
            log.warning("satori.overloaded", type=kind, sn=body.get("sn"))

    async def _read_events(self) -> None:
        """Take the events in the order they came, one at a time (so a chat's order holds)."""
        while True:
            body = await self._events.get()
            try:
                await self._take(body)
            except Exception as exc:
                log.exception("satori.event_failed", type=body.get("type"), error=repr(exc))

    async def _take(self, body: dict[str, Any]) -> None:
        login = read_login(body.get("login")) if isinstance(body.get("login"), dict) else None
        platform = (login.platform if login else "") or str(body.get("platform") or "")
        self_id = (login.user_id if login else "") or str(body.get("self_id") or "")
        if not platform or not self_id:
            log.warning("satori.event_without_login", type=body.get("type"))
            return
        sent = frozenset(self._sent_ids.get((platform, self_id), ()))
        incoming = read_event(body, platform, self_id, sent)
        if incoming is None:
            return
        if not await self._deliveries.first(f"{platform}/{self_id}", _delivery_id(body, incoming)):
            log.info("satori.duplicate", type=body.get("type"), sn=body.get("sn"))
            return
        self._inbound.put(incoming.key, incoming)

    async def _member(self, platform: str, self_id: str, guild: str, user: str) -> Any:
        """guild.member.get (for ``admins_from``)."""
        assert self._http is not None
        return await self._http.call("guild.member.get", {"guild_id": guild, "user_id": user},
                                     platform=platform, user_id=self_id)  # fmt: skip


def _delivery_id(body: dict[str, Any], incoming: Incoming) -> str:
    """The id a delivery is known by: a message's id; for an event its kind, its objects
    and its timestamp (events carry no id of their own, and ``sn`` restarts with the server)."""
    message = incoming.message
    if message.event is None:
        return message.message_id
    data = message.event.data
    what = data.get("message_id") or data.get("flag") or data.get("data") or ""
    when = body.get("timestamp") or body.get("sn") or ""
    parts = [str(body.get("type")), message.chat, message.user, str(what),
             str(data.get("emoji") or ""), str(when)]  # fmt: skip
    return "/".join(parts)
