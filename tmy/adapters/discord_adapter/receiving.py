"""discord.py's event handlers: messages and events in, each run, its reply out.

**Messages.** Messages from bots (``author.bot``, this bot included) are ignored,
so two bots cannot answer each other forever. ``CHAT`` is the channel id (a DM
has its own channel id too), ``USER`` the author's id, ``USER_NAME`` their
display name; ``private`` is true for DMs. The bot's mention (``<@id>``,
``<@!id>`` or its managed role ``<@&role>``) is removed from the text and sets
``mentions_bot``; a reply to one of the bot's messages sets it too. Attachments
and stickers arrive as ``Message.attachments`` (a media-only message's text is
its placeholder, see :mod:`~tmy.adapters.discord_adapter.inbound`), the author's
roles as ``chat_admin`` (``admins_from``), and ``Message.api`` fetches a quoted
message or an attachment's URL when a run asks.

**Events** (:mod:`~tmy.adapters.discord_adapter.events`): member join/leave,
reactions, button presses and deletions become ``Message.event``. A button press
is acknowledged at once (Discord wants an answer within 3 s; a deferred update
shows nothing), and the run's reply goes to the channel as a new message.

**Runs.** Each message or event is queued for its channel and runs as its own
task; channels are served fairly (:mod:`tmy.adapters.fairness`). While a run of
a message or button works longer than ``typing_after`` seconds the channel shows
"typing…" (renewed every 8 s; Discord's lasts 10). A ``stream:`` LLM step shows
its answer growing in one message, edited at most once a second, and finished
with the final text (:class:`~tmy.adapters.streaming.GrowingMessage`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

import discord

from tmy.adapters.base import placeholder
from tmy.adapters.discord_adapter import events
from tmy.adapters.discord_adapter.events import Incoming
from tmy.adapters.discord_adapter.inbound import attachments_of, chat_admin
from tmy.adapters.discord_adapter.parts import Parts, prepare
from tmy.adapters.discord_adapter.sending import NO_MENTIONS
from tmy.adapters.discord_adapter.text import MAX_TEXT, split_message, strip_mention
from tmy.adapters.streaming import GrowingMessage, typing_while
from tmy.logs import get_logger
from tmy.message import Message, Reply

if TYPE_CHECKING:
    from tmy.adapters.discord_adapter.adapter import DiscordAdapter

log = get_logger("tmy.adapter.discord")

TYPING_EVERY = 8.0  # seconds between typing triggers (one lasts 10 s)


def _logged(handler: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """An event handler whose failure is logged as ``discord.event_failed`` (with the
    handler's name) instead of reaching discord.py's own ``on_error``."""

    @functools.wraps(handler)
    async def run(self: Any, *args: Any) -> None:
        try:
            await handler(self, *args)
        except Exception as exc:
            log.exception("discord.event_failed", handler=handler.__name__, error=repr(exc))

    return run


class Receiving:
    """The handlers :class:`~tmy.adapters.discord_adapter.adapter.DiscordAdapter` registers."""

    typing_after = 1.0  # a run working longer than this shows "typing…"
    stream_interval = 1.0  # at most one edit of a growing answer per this many seconds

    def _me(self: DiscordAdapter) -> discord.ClientUser | None:
        if self._stopping or self._handle is None or self.client is None:
            return None
        return self.client.user

    def _take(self: DiscordAdapter, incoming: Incoming, who: Any = None) -> None:
        """Queue ``incoming`` for its chat's turn; ``who`` (a Member) may be a chat admin."""
        self._health.event()
        message = incoming.message
        message.api = self.api
        message.chat_admin = chat_admin(who, self.config.admins_from)
        self._inbound.put(message.chat, incoming)

    # -- messages ----------------------------------------------------------------------------

    async def on_message(self: DiscordAdapter, message: discord.Message) -> None:
        """discord.py's ``on_message``: run the rules on it in a task of its own."""
        if self._me() is None:
            return
        self._health.event()
        try:
            converted = self.to_message(message)
        except Exception as exc:
            log.exception("discord.message_failed", message_id=str(message.id), error=repr(exc))
            return
        if converted is not None:
            self._take(Incoming(converted, message.channel, message), message.author)

    def to_message(self: DiscordAdapter, message: discord.Message) -> Message | None:
        """The tmy Message for a Discord message, or None when it is not for the rules."""
        me = self.client.user if self.client is not None else None
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
        attachments = attachments_of(message)
        text = text or placeholder(attachments)
        if not text:
            return None  # a bare mention (or an embed-only message)
        return Message.new(
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
            attachments=attachments,
        )

    # -- events ------------------------------------------------------------------------------

    @_logged
    async def on_member_join(self: DiscordAdapter, member: discord.Member) -> None:
        me = self._me()
        if me is not None and member.id != me.id:
            self._take(events.member_join(member, str(me.id)), member)

    @_logged
    async def on_raw_member_remove(
        self: DiscordAdapter, payload: discord.RawMemberRemoveEvent
    ) -> None:
        me = self._me()
        if me is not None and payload.user.id != me.id:
            guild = self.client.get_guild(payload.guild_id) if self.client is not None else None
            self._take(events.member_leave(payload, guild, str(me.id)))

    @_logged
    async def on_raw_reaction_add(
        self: DiscordAdapter, payload: discord.RawReactionActionEvent
    ) -> None:
        me = self._me()
        if me is None or payload.user_id == me.id or _is_bot(self.client, payload):
            return
        channel = self._channel(payload.channel_id, payload.guild_id)
        who = payload.member or (self.client.get_user(payload.user_id) if self.client else None)
        self._take(events.reaction(payload, who, channel, str(me.id)), payload.member)

    on_raw_reaction_remove = on_raw_reaction_add  # the payload's event_type tells them apart

    @_logged
    async def on_raw_message_delete(
        self: DiscordAdapter, payload: discord.RawMessageDeleteEvent
    ) -> None:
        me = self._me()
        cached = payload.cached_message
        if me is None or (cached is not None and cached.author.bot):
            return  # a bot's message (this bot's own included) going away is no event
        channel = self._channel(payload.channel_id, payload.guild_id)
        self._take(events.message_recall(payload, channel, str(me.id)))

    @_logged
    async def on_interaction(self: DiscordAdapter, interaction: discord.Interaction) -> None:
        me = self._me()
        data = events.button_data(interaction)
        if me is None or data is None:
            return
        try:
            await interaction.response.defer()  # within 3 s, whatever the run takes
        except discord.HTTPException as exc:
            log.warning("discord.interaction_ack_failed", status=exc.status, code=exc.code)
        self._take(events.button(interaction, data, str(me.id)), interaction.user)

    def _channel(self: DiscordAdapter, channel_id: int, guild_id: int | None) -> Any:
        assert self.client is not None
        found = self.client.get_channel(channel_id)
        return found or self.client.get_partial_messageable(channel_id, guild_id=guild_id)

    # -- runs and replies --------------------------------------------------------------------

    async def _answer(self: DiscordAdapter, chat: Hashable, incoming: Incoming) -> None:
        """Run the rules on one message or event and queue the reply (a ChatQueues work);
        never raises."""
        message, channel = incoming.message, incoming.channel
        assert self._handle is not None
        chatty = channel is not None and (message.event is None or message.event.kind == "button")
        stream = self._growing(incoming) if chatty else None
        message.stream = stream
        try:
            if chatty:
                async with typing_while(
                    channel.typing, after=self.typing_after, every=TYPING_EVERY
                ):
                    reply = await self._handle(message)
            else:
                reply = await self._handle(message)
            await self._reply(incoming, reply, stream)
        except Exception as exc:
            log.exception(
                "discord.message_failed",
                message_id=message.message_id,
                kind=message.event.kind if message.event else None,
                error=repr(exc),
            )

    def _growing(self: DiscordAdapter, incoming: Incoming) -> GrowingMessage:
        channel, original = incoming.channel, incoming.original
        reference = original.to_reference(fail_if_not_exists=False) if original else None

        async def post(text: str) -> discord.Message:
            return await channel.send(
                text, reference=reference, mention_author=False, allowed_mentions=NO_MENTIONS
            )

        async def edit(sent: discord.Message, text: str) -> None:
            await sent.edit(content=text, allowed_mentions=NO_MENTIONS)

        return GrowingMessage(post, edit, interval=self.stream_interval, limit=MAX_TEXT)

    async def _reply(
        self: DiscordAdapter, incoming: Incoming, reply: Reply, stream: GrowingMessage | None
    ) -> None:
        text = reply.text
        parts: Parts | None = await prepare(reply.outgoing, self.load) if reply.outgoing else None
        if not text.strip() and (parts is None or parts.empty):
            return
        message, channel = incoming.message, incoming.channel
        if channel is None:
            log.info("discord.reply_nowhere", chat=message.chat, rule=reply.rule, kind=(
                message.event.kind if message.event else None))  # fmt: skip
            return
        if stream is not None:
            head, *rest = split_message(text) or [""]
            if await stream.finish(head):  # the growing message became the first piece
                if rest or (parts is not None and not parts.empty):
                    self._queue(channel, "", pieces=rest, parts=parts)
                return
        self._queue(channel, text, reference=incoming.original, parts=parts)


def _is_bot(client: discord.Client | None, payload: discord.RawReactionActionEvent) -> bool:
    if payload.member is not None:
        return payload.member.bot
    user = client.get_user(payload.user_id) if client is not None else None
    return user is not None and user.bot


def _self_role_id(message: discord.Message) -> int | None:
    """The id of the bot's own managed role in the message's guild (Discord's autocomplete
    sometimes inserts it instead of the user mention)."""
    guild = message.guild
    role = guild.self_role if guild is not None else None
    return role.id if role is not None else None
