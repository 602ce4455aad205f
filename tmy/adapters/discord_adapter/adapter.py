"""The Discord adapter (discord.py 2.x): guild channels and DMs talk to tmy's rules.

**Connecting.** ``client.start(token)`` runs in a background task, so
``start()`` returns at once and never raises for token problems. The token
comes from the environment variable ``token_env`` names (``DISCORD_TOKEN``).
``shards: 1`` uses :class:`discord.Client`; ``shards: auto`` an
:class:`discord.AutoShardedClient` that asks Discord for the shard count; a
number N > 1 an ``AutoShardedClient(shard_count=N)``. Gateway reconnects and
rate limits are discord.py's own. What it gives up on is handled here:

* :class:`discord.LoginFailure` (Discord answered 401 to the token) → state
  ``failed``, not retried: a new token is needed;
* :class:`discord.PrivilegedIntentsRequired` (close code 4014) → once more
  without the members intent, then ``failed`` with the Developer Portal hint
  (enable MESSAGE CONTENT INTENT);
* anything else → logged, state ``reconnecting``, a fresh client is tried
  again after a capped exponential backoff with jitter.

**Intents.** The privileged MESSAGE CONTENT intent is required; the
privileged SERVER MEMBERS intent is asked for too (member join/leave events). When
Discord refuses the privileged intents (close code 4014) the adapter connects
again at once without the members intent (``discord.members_intent_refused``,
no member events then) and fails only when that is refused too.

What a message or event becomes, and how its run is answered, is
:mod:`tmy.adapters.discord_adapter.receiving`; how replies go out,
:mod:`tmy.adapters.discord_adapter.sending` and ``parts`` (images, files,
buttons); the text helpers, :mod:`tmy.adapters.discord_adapter.text`.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import discord

from tmy import metrics, redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.discord_adapter.api import DiscordApi
from tmy.adapters.discord_adapter.events import Incoming
from tmy.adapters.discord_adapter.parts import Loader, MediaLoader, Parts, prepare
from tmy.adapters.discord_adapter.receiving import Receiving
from tmy.adapters.discord_adapter.sending import NO_MENTIONS, Queued, send_failed, send_piece
from tmy.adapters.discord_adapter.text import split_message
from tmy.adapters.fairness import ChatLanes
from tmy.config.adapters import DiscordConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Outgoing, Target

log = get_logger("tmy.adapter.discord")

MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one channel (the rest stay free for the other channels)
MAX_WAITING = 1000  # messages (and, apart, replies) waiting in all channels together
MAX_SENDS = 32  # sends in flight at once (all channels)

_ID_RE = re.compile(r"\d{1,20}")


class DiscordAdapter(Receiving):
    """Discord through discord.py's gateway client; see the module docstring."""

    name = "discord"
    # retry pauses after a failed connection: first ~backoff_base, doubling up to backoff_cap
    backoff_base = 2.0
    backoff_cap = 120.0
    # seconds discord.py waits for the last GUILD_CREATE before ``on_ready`` (its default; tests
    # shrink it)
    guild_ready_timeout = 2.0

    def __init__(
        self,
        config: DiscordConfig | None = None,
        *,
        token: str = "",
        shutdown_grace: float = 30.0,
        load: Loader | None = None,
    ) -> None:
        self.config = config or DiscordConfig()
        self.token = token
        self.shutdown_grace = shutdown_grace  # how long stop() lets replies in flight go out
        redact.add(token)
        self.client: discord.Client | None = None
        self.api = DiscordApi(None)  # Message.api of every message (its client set by bind)
        # how a reply's image or file (URL, data: URL, file under the rules) becomes bytes
        self.load: Loader = load or MediaLoader(Path("rules"))
        self.members_intent = True  # dropped when Discord refuses it (4014)
        self._handle: Handler | None = None
        self._health = AdapterHealth()
        self._runner: asyncio.Task[None] | None = None
        self._lanes: ChatLanes[Incoming, Queued] = ChatLanes(
            self.name, self._answer, self._send_step, per_chat=self.config.max_pending_per_chat,
            total=MAX_WAITING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound
        self._stopping = False
        self._backoff = Backoff(self.backoff_base, self.backoff_cap)
        self._ready_before = False  # metrics: a later on_ready is a reconnect

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[Any]:
        """None: discord.py holds its own gateway connection, no webhook."""
        return []

    def bind(self, handle: Handler) -> discord.Client:
        """Remember ``handle`` and build a (not yet connected) client with tmy's event handlers.

        ``start`` calls it; tests call it to drive the client without a gateway.
        """
        self._handle = handle
        self.client = self.api.client = self._new_client()
        return self.client

    def _new_client(self) -> discord.Client:
        intents = discord.Intents.default()
        intents.message_content = True
        intents.members = self.members_intent  # member join/leave (privileged)
        options: dict[str, Any] = {
            "intents": intents,
            "chunk_guilds_at_startup": False,  # members come with their messages and events
            "allowed_mentions": NO_MENTIONS,
            "guild_ready_timeout": self.guild_ready_timeout,
        }
        shards = self.config.shards
        client: discord.Client
        if shards == "auto":
            client = discord.AutoShardedClient(**options)
        elif isinstance(shards, int) and shards > 1:
            client = discord.AutoShardedClient(shard_count=shards, **options)
        else:
            client = discord.Client(**options)
        # discord.py dispatches ``on_<event>`` by attribute lookup on the client
        client.on_ready = self._on_ready  # type: ignore[attr-defined]
        client.on_resumed = self._on_resumed  # type: ignore[attr-defined]
        client.on_disconnect = self._on_disconnect  # type: ignore[attr-defined]
        for event in (
            "on_message", "on_member_join", "on_raw_member_remove", "on_raw_reaction_add",
            "on_raw_reaction_remove", "on_raw_message_delete", "on_interaction",
        ):  # fmt: skip
            setattr(client, event, getattr(self, event))
        return client

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; a bad token shows as ``failed``, never raises."""
        self._stopping = False
        self._health.set("starting")
        self.bind(handle)
        self._lanes.open()  # again after a stop()
        if not self.token:
            self._fail(
                f"no bot token: set the environment variable {self.config.token_env} to the "
                "token from the Discord Developer Portal (your application → Bot → Reset Token)"
            )
            return
        self._runner = asyncio.create_task(self._run(), name="discord")
        log.info("discord.started", shards=self.config.shards)

    async def stop(self) -> None:
        """Take no new messages, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = True
        client = self.client
        if self._runner is not None:
            if client is not None:
                await client.close()  # the gateway connection and the HTTP session
            self._runner.cancel()  # it may be waiting out a backoff pause
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None
        await self._lanes.drain(self.shutdown_grace)
        if client is not None and not client.is_closed():
            await client.close()
        if isinstance(self.load, MediaLoader):
            await self.load.aclose()
        self._health.stopped()

    async def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the runs and replies queued so far to finish (True when
        all did). Used by ``stop`` and by tests."""
        return await self._lanes.settle(timeout)

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        client = self.client
        user = client.user if client is not None else None
        report["shards"] = (client.shard_count if client is not None else None) or (
            self.config.shards if self.config.shards != "auto" else None
        )
        latency = client.latency if client is not None else math.nan  # nan until connected
        report["latency_ms"] = None if not math.isfinite(latency) else round(latency * 1000)
        report["bot_id"] = str(user.id) if user is not None else None
        report["username"] = str(user) if user is not None else None
        report["waiting"] = self._lanes.waiting()
        return report

    def _fail(self, why: str) -> None:
        log.error("discord.failed", error=self._health.failed(why))

    async def _run(self) -> None:
        """Log in and hold the gateway connection; a fresh client after each failure."""
        backoff = self._backoff = Backoff(self.backoff_base, self.backoff_cap)
        first = True
        while not self._stopping:
            if not first:
                self.client = self.api.client = self._new_client()
            first = False
            client = self.client
            assert client is not None
            try:
                await client.start(self.token)
                if self._stopping:
                    return
                raise ConnectionError("the gateway connection closed")
            except discord.LoginFailure as exc:
                self._fail(
                    f"Discord refused the token (401) in {self.config.token_env}: {exc}; "
                    "reset it in the Developer Portal (Bot → Reset Token)"
                )
                return
            except discord.PrivilegedIntentsRequired:
                if self.members_intent:  # try once more without it: no member events then
                    self.members_intent = False
                    log.warning(
                        "discord.members_intent_refused",
                        hint="enable SERVER MEMBERS INTENT under Bot → Privileged Gateway "
                        "Intents for member_join/member_leave events",
                    )
                    continue
                self._fail(
                    "Discord refused the privileged message content intent (close code 4014): "
                    "enable MESSAGE CONTENT INTENT (and SERVER MEMBERS INTENT for member events) "
                    "under Bot → Privileged Gateway Intents in the Developer Portal"
                )
                return
            except Exception as exc:  # never let the reconnect loop die
                if self._stopping:
                    return
                why = redact.redact(_describe(exc))
                self._health.set("reconnecting", why)
                delay = backoff.next()
                log.warning(
                    "discord.reconnecting",
                    status=getattr(exc, "status", None),
                    code=getattr(exc, "code", None),
                    error=why,
                    retry_in=round(delay, 2),
                )
            finally:
                if not client.is_closed():
                    await client.close()
            await asyncio.sleep(delay)

    async def _on_ready(self) -> None:
        client = self.client
        user = client.user if client is not None else None
        self._health.set("connected")
        self._health.event()
        self._backoff.reset()
        metrics.adapter_connected(self.name, reconnect=self._ready_before)
        self._ready_before = True
        log.info(
            "discord.connected",
            bot_id=str(user.id) if user else None,
            username=str(user) if user else None,
            shards=client.shard_count if client is not None else None,
        )

    async def _on_resumed(self) -> None:
        self._health.set("connected")
        self._health.event()
        metrics.adapter_connected(self.name, reconnect=True)

    async def _on_disconnect(self) -> None:
        if not self._stopping and self._health.state != "failed":
            self._health.set("reconnecting", "the gateway connection was lost; discord.py resumes")

    # -- sending -----------------------------------------------------------------------------

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post ``text`` (and ``outgoing``'s images, files, buttons …) to the channel id
        ``target.chat``, or DM the user id ``target.user``."""
        chat = target.chat.strip()
        user = target.user.strip()
        if not _ID_RE.fullmatch(chat or user):
            raise AdapterError(
                f"discord: the target chat must be a channel id (a number; got {chat or user!r})"
            )
        if not text.strip() and not outgoing:
            raise AdapterError("discord: refusing to send an empty message")
        client = self.client
        if client is None or client.user is None or self._stopping:
            raise AdapterError(f"discord: not connected ({self._health.error or 'starting'})")
        where = chat or f"user {user}"
        try:
            if chat:
                channel = client.get_channel(int(chat)) or await client.fetch_channel(int(chat))
            else:
                person = client.get_user(int(user)) or await client.fetch_user(int(user))
                channel = await person.create_dm()
        except discord.HTTPException as exc:
            raise send_failed(where, exc) from None
        if not hasattr(channel, "send"):
            raise AdapterError(f"discord: channel {chat} cannot take messages")
        parts = await prepare(outgoing, self.load) if outgoing else None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue(channel, text, where=where, done=done, parts=parts)
        await done

    def _queue(
        self,
        channel: Any,
        text: str,
        *,
        reference: discord.Message | None = None,
        where: str | None = None,
        done: asyncio.Future[None] | None = None,
        parts: Parts | None = None,
        pieces: list[str] | None = None,
    ) -> None:
        """Queue ``text`` (or ``pieces`` already cut) for ``channel``; the first piece replies
        to ``reference`` and carries the mentions, the last the files, embeds and buttons."""
        if pieces is not None:
            pieces = pieces + split_message(parts.suffix() if parts is not None else "")
        else:
            if parts is not None:
                text = parts.prefix() + text + parts.suffix()
            pieces = split_message(text)
        if not pieces and parts is not None and not parts.empty:
            pieces = [""]  # attachments, embeds or buttons alone
        out = Queued(channel, pieces, reference, where or str(channel.id), done, parts)
        if not out.pieces:
            out.finish(None)
            return
        self._outbound.put(str(channel.id), out)

    async def _send_step(self, key: Hashable, out: Queued) -> float | None:
        """Send ``out``'s next piece (a ChatQueues work; see ``sending``)."""
        return await send_piece(out)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, discord.HTTPException):
        return f"HTTP {exc.status}, code {exc.code}: {exc.text or exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
