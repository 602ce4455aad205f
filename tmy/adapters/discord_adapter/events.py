"""Discord gateway events as tmy events (``Message.event``, one vocabulary for every platform).

========================  ==================  ============================================
``EVENT``                 ``EVENT_RAW``       what happened (``USER`` / ``CHAT``)
========================  ==================  ============================================
``member_join``           GUILD_MEMBER_ADD    a member joined: USER the member, CHAT the
                                              guild's system channel id, else
                                              ``guild:<guild id>`` (a reply there goes
                                              nowhere and is logged)
``member_leave``          GUILD_MEMBER_REMOVE a member left or was removed (Discord does not
                                              say which: ``kicked`` false, ``operator`` "")
``reaction``              MESSAGE_REACTION_ADD / _REMOVE: USER who reacted, CHAT the channel
``button``                INTERACTION_CREATE  a button of a tmy reply was pressed: USER the
                                              presser, ``data`` the button's data
``message_recall``        MESSAGE_DELETE      a message was deleted: USER its author when
                                              discord.py still had it cached, else ""
========================  ==================  ============================================

``EVENT_RAW`` is the gateway's dispatch name (Discord's own, not the library's).
``EVENT_DATA`` always has ``user`` and ``chat``, plus ``guild`` (the guild id, "" in a
DM) and the fields of its kind (see docs/events.md): member_join ``operator``,
``sub_type`` (""); member_leave ``operator``, ``kicked``; reaction ``message_id``,
``emoji`` (the character, or ``name:id`` for a custom emoji), ``added``; button
``data``, ``message_id``; message_recall ``operator`` ("": Discord does not say
who), ``message_id``.

Member events need the privileged **Server Members Intent** (Developer Portal →
Bot → Privileged Gateway Intents); without it Discord never sends them (the
adapter then connects without the intent, see ``adapter``). Reactions, buttons
and deletions need no privileged intent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import discord

from tmy.message import Event, Message

JOIN = "GUILD_MEMBER_ADD"
LEAVE = "GUILD_MEMBER_REMOVE"
INTERACTION = "INTERACTION_CREATE"
DELETE = "MESSAGE_DELETE"
BUTTON_COMPONENT = 2  # Discord's component type of a button


@dataclass(slots=True)
class Incoming:
    """One thing for the rules: the Message, where its reply goes, what it answers."""

    message: Message
    channel: Any  # a Messageable; None: nowhere to answer (a guild without system channel)
    original: discord.Message | None = None  # a reply quotes it (chat messages)


def _event(
    kind: str,
    raw: str,
    *,
    user: Any,
    chat: str,
    guild_id: int | None,
    self_id: str,
    data: dict[str, Any],
    payload: Any,
    user_name: str = "",
) -> Message:
    user_id = str(getattr(user, "id", user) or "")
    fields = {"user": user_id, "chat": chat, "guild": str(guild_id or ""), **data}
    return Message.new(
        "",
        user=user_id,
        chat=chat,
        platform="discord",
        user_name=user_name or getattr(user, "display_name", "") or user_id,
        private=guild_id is None,
        raw=payload,
        self_id=self_id,
        event=Event(kind, raw, fields),
    )


def _guild_chat(guild: discord.Guild) -> tuple[str, Any]:
    channel = guild.system_channel
    if channel is not None:
        return str(channel.id), channel
    return f"guild:{guild.id}", None


def member_join(member: discord.Member, self_id: str) -> Incoming:
    chat, channel = _guild_chat(member.guild)
    data = {"operator": "", "sub_type": ""}
    message = _event(
        "member_join", JOIN, user=member, chat=chat, guild_id=member.guild.id,
        self_id=self_id, data=data, payload=member,
    )  # fmt: skip
    return Incoming(message, channel)


def member_leave(
    payload: discord.RawMemberRemoveEvent, guild: discord.Guild | None, self_id: str
) -> Incoming:
    chat, channel = _guild_chat(guild) if guild is not None else (f"guild:{payload.guild_id}", None)
    data = {"operator": "", "kicked": False}
    message = _event(
        "member_leave", LEAVE, user=payload.user, chat=chat, guild_id=payload.guild_id,
        self_id=self_id, data=data, payload=payload,
    )  # fmt: skip
    return Incoming(message, channel)


def emoji_name(emoji: discord.PartialEmoji) -> str:
    """The emoji character, or ``name:id`` for a custom emoji (Discord's reaction form)."""
    if emoji.is_unicode_emoji():
        return emoji.name
    return f"{emoji.name}:{emoji.id}"


def reaction(
    payload: discord.RawReactionActionEvent, who: Any, channel: Any, self_id: str
) -> Incoming:
    """``who``: the reacting Member or User when discord.py knows them (their name)."""
    added = payload.event_type == "REACTION_ADD"
    data = {"message_id": str(payload.message_id), "emoji": emoji_name(payload.emoji)}
    data["added"] = added
    raw = "MESSAGE_REACTION_ADD" if added else "MESSAGE_REACTION_REMOVE"
    message = _event(
        "reaction", raw, user=who or payload.user_id, chat=str(payload.channel_id),
        guild_id=payload.guild_id, self_id=self_id, data=data, payload=payload,
    )  # fmt: skip
    return Incoming(message, channel)


def button_data(interaction: discord.Interaction) -> str | None:
    """The pressed button's data (its custom_id), None when the interaction is not a button."""
    if interaction.type is not discord.InteractionType.component:
        return None
    data: Any = interaction.data or {}
    if data.get("component_type") != BUTTON_COMPONENT:
        return None
    return str(data.get("custom_id", ""))


def button(interaction: discord.Interaction, data: str, self_id: str) -> Incoming:
    carrier = interaction.message
    fields = {"data": data, "message_id": str(carrier.id) if carrier is not None else ""}
    message = _event(
        "button", INTERACTION, user=interaction.user, chat=str(interaction.channel_id),
        guild_id=interaction.guild_id, self_id=self_id, data=fields, payload=interaction,
    )  # fmt: skip
    return Incoming(message, interaction.channel)


def message_recall(payload: discord.RawMessageDeleteEvent, channel: Any, self_id: str) -> Incoming:
    cached = payload.cached_message
    author = cached.author if cached is not None else ""
    data = {"operator": "", "message_id": str(payload.message_id)}
    message = _event(
        "message_recall", DELETE, user=author, chat=str(payload.channel_id),
        guild_id=payload.guild_id, self_id=self_id, data=data, payload=payload,
    )  # fmt: skip
    return Incoming(message, channel)
