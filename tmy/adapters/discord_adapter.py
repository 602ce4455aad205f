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
* :class:`discord.PrivilegedIntentsRequired` (close code 4014) → ``failed``
  with the Developer Portal hint (enable MESSAGE CONTENT INTENT);
* anything else → logged, state ``reconnecting``, a fresh client is tried
  again after a capped exponential backoff with jitter.

**What a message becomes.** Messages from bots (``author.bot``, this bot
included) are ignored, so two bots cannot answer each other forever. ``CHAT``
is the channel id (a DM has its own channel id too), ``USER`` the author's
id, ``USER_NAME`` their display name; ``private`` is true for DMs. The bot's
mention (``<@id>``, ``<@!id>`` or its managed role ``<@&role>``) is removed from
the text and sets ``mentions_bot``; a reply to one of the bot's messages sets
it too. Each message is queued for its channel and runs as its own task;
channels are served fairly (:mod:`tmy.adapters.fairness`): at most
:data:`MAX_RUNS` runs at once, at most :data:`MAX_RUNS_PER_CHAT` from one
channel, round-robin over the channels with messages waiting, and at most
``max_pending_per_chat`` messages wait per channel (:data:`MAX_WAITING` in
all); past that the channel's oldest is dropped (``discord.chat_dropped``,
the ``tmy_chat_dropped`` metric).

**Sending.** Replies go to the same channel as a Discord reply to the
triggering message (no ping of its author, and still sent when that message
was deleted meanwhile), split by :func:`split_message` into pieces of at most
:data:`MAX_TEXT` characters. Every send carries :data:`NO_MENTIONS`, so no text
— whatever a user typed or a rule echoed — can ping ``@everyone``, ``@here``,
roles or users. Replies wait in their channel's own queue (at most
``max_pending_per_chat``, the oldest dropped past it) and go out one at a
time per channel, the :data:`MAX_SENDS` sends in flight round-robin over the
channels, so a channel discord.py is holding back for its rate limit delays
no other channel's replies. A refused send is logged as ``discord.send_failed`` with the
HTTP status and Discord's JSON error code, and raised as
:class:`~tmy.errors.AdapterError`.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, fields
from typing import Any

with warnings.catch_warnings():
    # discord.py imports the stdlib ``audioop`` for voice (deprecated since 3.11); tmy
    # never uses voice, and the warning would only alarm users (and fail -W error runs).
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord

from tmy import metrics, redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.fairness import ChatQueues, PendingSend
from tmy.config import Settings
from tmy.errors import AdapterError, ConfigError
from tmy.logs import get_logger
from tmy.message import Message, Target

log = get_logger("tmy.adapter.discord")

MAX_TEXT = 2000  # Discord's limit for one message's content, in characters
MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one channel (the rest stay free for the other channels)
MAX_WAITING = 1000  # messages (and, apart, replies) waiting in all channels together
MAX_SENDS = 32  # sends in flight at once (all channels)
MAX_FENCE_TAG = 32  # a longer ``` language tag is not repeated when a code block is reopened

# Nothing in a reply may ping anyone: not @everyone/@here, not roles, not users, not the author.
NO_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=False, replied_user=False)

_ID_RE = re.compile(r"\d{1,20}")
_FENCE = "```"
_TAG_RE = re.compile(rf"[A-Za-z0-9_+.#-]{{1,{MAX_FENCE_TAG}}}")  # a code block's language


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    """``adapters.discord`` with its defaults."""

    token_env: str = "DISCORD_TOKEN"
    shards: int | str = 1
    max_pending_per_chat: int = 20

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> DiscordConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in section.items() if k in known and v is not None})
        shards = config.shards
        if not (shards == "auto" or (isinstance(shards, int) and not isinstance(shards, bool)
                                     and shards >= 1)):  # fmt: skip
            raise ConfigError(
                f"adapters.discord.shards must be a number >= 1 or 'auto' (got {shards!r})"
            )
        if not config.token_env:
            raise ConfigError("adapters.discord.token_env must name an environment variable")
        cap = config.max_pending_per_chat
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_WAITING:
            raise ConfigError(
                f"adapters.discord.max_pending_per_chat must be a whole number from 1 to "
                f"{MAX_WAITING} (got {cap!r})"
            )
        return config


def from_settings(
    settings: Settings, env: Mapping[str, str] | None = None
) -> DiscordAdapter | None:
    """The adapter ``adapters.discord`` describes, or None when it is not enabled.

    A missing token is not a config error: the adapter starts in state
    ``failed`` saying so, and the rest of the daemon serves on.
    """
    section = settings.adapters.get("discord") or {}
    if not section.get("enabled"):
        return None
    config = DiscordConfig.from_section(section)
    env = os.environ if env is None else env
    token = (env.get(config.token_env) or "").strip()
    return DiscordAdapter(config, token=token, shutdown_grace=settings.shutdown_grace)


class DiscordAdapter:
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
    ) -> None:
        self.config = config or DiscordConfig()
        self.token = token
        self.shutdown_grace = shutdown_grace  # how long stop() lets replies in flight go out
        redact.add(token)
        self.client: discord.Client | None = None
        self._handle: Handler | None = None
        self._health = AdapterHealth()
        self._runner: asyncio.Task[None] | None = None
        cap = self.config.max_pending_per_chat
        # keyed by channel id: messages waiting to run, replies waiting for their channel's turn
        self._inbound: ChatQueues[tuple[Message, discord.Message]] = ChatQueues(
            self.name, "message", self._answer, per_chat=cap, total=MAX_WAITING,
            in_flight=MAX_RUNS, per_chat_in_flight=MAX_RUNS_PER_CHAT,
        )  # fmt: skip
        self._outbound: ChatQueues[_Outgoing] = ChatQueues(
            self.name, "reply", self._send_step, per_chat=cap, total=MAX_WAITING,
            in_flight=MAX_SENDS, on_drop=_Outgoing.dropped, on_fail=_Outgoing.failed,
        )  # fmt: skip
        self._stopping = False
        self._backoff = Backoff(self.backoff_base, self.backoff_cap)
        self._ready_before = False  # metrics: a later on_ready is a reconnect

    # -- lifecycle ---------------------------------------------------------------------------

    def bind(self, handle: Handler) -> discord.Client:
        """Remember ``handle`` and build a (not yet connected) client with tmy's event handlers.

        ``start`` calls it; tests call it to drive the client without a gateway.
        """
        self._handle = handle
        self.client = self._new_client()
        return self.client

    def _new_client(self) -> discord.Client:
        intents = discord.Intents.default()
        intents.message_content = True
        options: dict[str, Any] = {
            "intents": intents,
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
        client.on_message = self.on_message  # type: ignore[attr-defined]
        return client

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; a bad token shows as ``failed``, never raises."""
        self._stopping = False
        self._health.set("starting")
        self.bind(handle)
        self._inbound.accepting = self._outbound.accepting = True  # again after a stop()
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
        self._inbound.accepting = False
        await self.settle(self.shutdown_grace)
        await self._inbound.close()
        await self._outbound.close()
        if client is not None and not client.is_closed():
            await client.close()
        if self._health.state != "failed":
            self._health.set("stopped")

    async def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the runs and replies queued so far to finish (True when
        all did). Used by ``stop`` and by tests."""
        deadline = asyncio.get_running_loop().time() + timeout
        done = await self._inbound.join(timeout)  # runs end; their replies are queued
        left = deadline - asyncio.get_running_loop().time()
        return await self._outbound.join(left) and done

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
        report["waiting"] = {"messages": self._inbound.waiting, "replies": self._outbound.waiting}
        return report

    def _fail(self, why: str) -> None:
        why = redact.redact(why)
        self._health.set("failed", why)
        log.error("discord.failed", error=why)

    async def _run(self) -> None:
        """Log in and hold the gateway connection; a fresh client after each failure."""
        backoff = self._backoff = Backoff(self.backoff_base, self.backoff_cap)
        first = True
        while not self._stopping:
            if not first:
                self.client = self._new_client()
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
                self._fail(
                    "Discord refused the privileged message content intent (close code 4014): "
                    "enable MESSAGE CONTENT INTENT under Bot → Privileged Gateway Intents in the "
                    "Developer Portal"
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

    # -- receiving ---------------------------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        """discord.py's ``on_message``: run the rules on it in a task of its own."""
        if self._stopping or self._handle is None:
            return
        self._health.event()
        try:
            converted = self.to_message(message)
        except Exception as exc:
            log.exception("discord.message_failed", message_id=str(message.id), error=repr(exc))
            return
        if converted is None:
            return
        self._inbound.put(converted.chat, (converted, message))

    def to_message(self, message: discord.Message) -> Message | None:
        """The tmy Message for a Discord message, or None when it is not for the rules."""
        client = self.client
        me = client.user if client is not None else None
        if me is None or message.author.bot or message.author.id == me.id:
            return None
        text, mentioned = strip_mention(message.content, me.id, _self_role_id(message))
        if any(user.id == me.id for user in message.mentions):
            mentioned = True
        reference = message.reference
        reply_to = None
        if reference is not None and reference.message_id is not None:
            reply_to = str(reference.message_id)
            quoted = reference.resolved
            if isinstance(quoted, discord.Message) and quoted.author.id == me.id:
                mentioned = True
        if not text:
            return None  # an attachment or sticker without text, or a bare mention
        return Message(
            text,
            user=str(message.author.id),
            chat=str(message.channel.id),
            platform=self.name,
            user_name=message.author.display_name,
            private=isinstance(message.channel, discord.DMChannel),
            raw=message,
            mentions_bot=mentioned,
            reply_to=reply_to,
            self_id=str(me.id),
            message_id=str(message.id),
        )

    async def _answer(self, chat: Hashable, incoming: tuple[Message, discord.Message]) -> None:
        """Run the rules on one message and queue the reply (a ChatQueues work); never raises."""
        converted, original = incoming
        assert self._handle is not None
        try:
            reply = await self._handle(converted)
            if not reply.text.strip():
                return None
            self._queue(original.channel, reply.text, reference=original)
        except Exception as exc:
            log.exception(
                "discord.message_failed", message_id=converted.message_id, error=repr(exc)
            )
        return None

    # -- sending -----------------------------------------------------------------------------

    async def send(self, target: Target, text: str) -> None:
        """Post ``text`` to the channel id ``target.chat`` (or DM the user id ``target.user``)."""
        chat = target.chat.strip()
        user = target.user.strip()
        if not _ID_RE.fullmatch(chat or user):
            raise AdapterError(
                f"discord: the target chat must be a channel id (a number; got {chat or user!r})"
            )
        if not text.strip():
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
            raise _send_failed(where, exc) from None
        if not hasattr(channel, "send"):
            raise AdapterError(f"discord: channel {chat} cannot take messages")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue(channel, text, where=where, done=done)
        await done

    def _queue(
        self,
        channel: Any,
        text: str,
        *,
        reference: discord.Message | None = None,
        where: str | None = None,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        """Queue ``text`` for ``channel`` in pieces; the first one replies to ``reference``."""
        out = _Outgoing(channel, split_message(text), reference, where or str(channel.id), done)
        if not out.pieces:
            out.finish(None)
            return
        self._outbound.put(str(channel.id), out)

    async def _send_step(self, key: Hashable, out: _Outgoing) -> float | None:
        """Send ``out``'s next piece (a ChatQueues work): 0 = more pieces to go, None = done."""
        piece = out.pieces[out.index]
        try:
            if out.index == 0 and out.reference is not None:
                await out.channel.send(
                    piece,
                    reference=out.reference.to_reference(fail_if_not_exists=False),
                    mention_author=False,
                    allowed_mentions=NO_MENTIONS,
                )
            else:
                await out.channel.send(piece, allowed_mentions=NO_MENTIONS)
        except discord.HTTPException as exc:
            out.finish(_send_failed(out.where, exc))
            return None
        except asyncio.CancelledError:
            out.finish(AdapterError(f"discord: stopped before the message to {out.where} went out"))
            raise
        out.index += 1
        if out.index < len(out.pieces):
            return 0.0
        out.finish(None)
        return None


class _Outgoing(PendingSend):
    """One reply (or ``send``) waiting in its channel's queue."""

    __slots__ = ("channel", "index", "pieces", "reference", "where")
    platform = "discord"
    place = "channel"

    def __init__(
        self,
        channel: Any,
        pieces: list[str],
        reference: discord.Message | None,
        where: str,
        done: asyncio.Future[None] | None,
    ) -> None:
        self.channel = channel
        self.pieces = pieces
        self.index = 0  # the next piece to send
        self.reference = reference  # the first piece replies to it
        self.where = where  # for errors: the channel id, or "user <id>"
        super().__init__(done)  # send() waits on it; None for replies


def _send_failed(where: str, exc: discord.HTTPException) -> AdapterError:
    why = redact.redact(exc.text or str(exc))
    log.warning("discord.send_failed", chat=where, status=exc.status, code=exc.code, error=why)
    return AdapterError(
        f"discord: send to {where} failed (HTTP {exc.status}, code {exc.code}): {why}"
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, discord.HTTPException):
        return f"HTTP {exc.status}, code {exc.code}: {exc.text or exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _self_role_id(message: discord.Message) -> int | None:
    """The id of the bot's own managed role in the message's guild (Discord's autocomplete
    sometimes inserts it instead of the user mention)."""
    guild = message.guild
    role = guild.self_role if guild is not None else None
    return role.id if role is not None else None


# -- text ------------------------------------------------------------------------------------


def strip_mention(text: str, bot_id: int, role_id: int | None = None) -> tuple[str, bool]:
    """(text without the bot's mentions, was the bot mentioned?).

    ``<@id>`` and ``<@!id>`` (and ``<@&role>`` for the bot's managed role) are
    removed with the spaces before them; a leading mention takes the comma or
    colon after it too (``<@1>, ping`` → ``ping``).
    """
    pattern = rf"<@!?{bot_id}>"
    if role_id is not None:
        pattern = rf"(?:{pattern}|<@&{role_id}>)"
    stripped, count = re.subn(rf"[ \t]*{pattern}", "", text)
    if not count:
        return text.strip(), False
    return stripped.strip().lstrip(",:，：").strip(), True


def _fence_after(line: str, fence: str | None) -> str | None:
    """The code block open after ``line``: None outside one, else its language tag.

    Discord (unlike CommonMark) opens and closes a block at every triple backtick, even in
    mid-line, so each one toggles; the tag is the word right after an opening one.
    """
    parts = line.split(_FENCE)
    if len(parts) % 2:  # an even number of fences: the state is unchanged
        return fence
    if fence is not None:
        return None
    tag = parts[-1].strip()
    return tag if _TAG_RE.fullmatch(tag) else ""


def split_message(text: str, limit: int = MAX_TEXT) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut on line breaks.

    A code block open at a cut is closed at the end of that piece and reopened
    (with the same language tag) at the start of the next, so each piece
    renders on its own. A line longer than a piece can hold is cut hard.
    Blank pieces are dropped (Discord refuses empty messages).
    """
    if limit < 2 * (len(_FENCE) + MAX_FENCE_TAG + 8):
        raise ValueError(f"limit {limit} is too small to hold a reopened code block")
    close = "\n" + _FENCE
    pieces: list[str] = []
    lines: list[str] = []  # the piece being built
    size = -1  # len("\n".join(lines)); -1 while empty
    fence: str | None = None  # the code block open at the end of ``lines``
    has_body = False  # ``lines`` holds more than a (re)opening fence carried to its start
    opened_last = False  # the last line of ``lines`` opened the code block

    def add(line: str, after: str | None) -> None:
        nonlocal size, has_body, fence, opened_last
        lines.append(line)
        size += 1 + len(line)
        has_body = True
        opened_last = fence is None and after is not None
        fence = after

    def flush() -> None:
        nonlocal lines, size, has_body, fence, opened_last
        head = _FENCE + fence if fence is not None else None
        if opened_last:  # don't end a piece on an empty code block: move its opening along
            head = lines.pop()
            fence = None
        body = "\n".join(lines)
        if body.strip():
            pieces.append(body + (close if fence is not None else ""))
        lines, size, has_body, opened_last = [], -1, False, False
        if head is not None:
            lines.append(head)
            size = len(head)
            fence = _fence_after(head, None)

    for line in text.split("\n"):
        while True:
            after = _fence_after(line, fence)
            if size + 1 + len(line) + (len(close) if after is not None else 0) <= limit:
                add(line, after)
                break
            if has_body and not (opened_last and len(lines) == 1):
                flush()
                continue
            # even a fresh piece cannot hold the line: cut it hard (room for a closing fence kept)
            room = limit - (size + 1) - len(close)
            head, line = line[:room], line[room:]
            add(head, _fence_after(head, fence))
            opened_last = False
            flush()
    body = "\n".join(lines)
    if has_body and body.strip():
        pieces.append(body)
    return pieces
