"""Sending to Discord: a queued reply (or ``send``), one piece at a time, never pinging anyone.

Replies go to the same channel as a Discord reply to the triggering message
(no ping of its author, and still sent when that message was deleted
meanwhile), split by :func:`~tmy.adapters.discord_adapter.text.split_message`
into pieces of at most :data:`~tmy.adapters.discord_adapter.text.MAX_TEXT`
characters. Every send carries :data:`NO_MENTIONS`, so no text — whatever a
user typed or a rule echoed — can ping ``@everyone``, ``@here``, roles or
users; only the users a structured reply names in ``mentions`` are pinged, by
the first piece. A reply's images, files and buttons
(:mod:`~tmy.adapters.discord_adapter.parts`) ride on its last piece.
Replies wait in their channel's own queue (at most
``max_pending_per_chat``, the oldest dropped past it) and go out one at a time
per channel, the adapter's ``MAX_SENDS`` sends in flight round-robin over the
channels, so a channel discord.py is holding back for its rate limit delays no
other channel's replies. A refused send is logged as ``discord.send_failed``
with the HTTP status and Discord's JSON error code, and raised as
:class:`~tmy.errors.AdapterError`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import discord

from tmy import redact
from tmy.adapters.discord_adapter.parts import Parts
from tmy.adapters.fairness import PendingSend
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.discord")

# Nothing in a reply may ping anyone: not @everyone/@here, not roles, not users, not the author.
NO_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=False, replied_user=False)


class Queued(PendingSend):
    """One reply (or ``send``) waiting in its channel's queue: text pieces, and the parts
    (:class:`~tmy.adapters.discord_adapter.parts.Parts`) the first and last piece carry."""

    __slots__ = ("channel", "index", "parts", "pieces", "reference", "where")
    platform = "discord"
    place = "channel"

    def __init__(
        self,
        channel: Any,
        pieces: list[str],
        reference: discord.Message | None,
        where: str,
        done: asyncio.Future[None] | None,
        parts: Parts | None = None,
    ) -> None:
        self.channel = channel
        self.pieces = pieces
        self.index = 0  # the next piece to send
        self.where = where  # for errors: the channel id, or "user <id>"
        self.parts = parts
        self.reference: discord.MessageReference | None = None  # the first piece replies to it
        if parts is not None and parts.reply_to is not None:
            self.reference = discord.MessageReference(
                message_id=parts.reply_to, channel_id=channel.id, fail_if_not_exists=False
            )
        elif reference is not None:
            self.reference = reference.to_reference(fail_if_not_exists=False)
        super().__init__(done)  # send() waits on it; None for replies


def send_failed(where: str, exc: discord.HTTPException) -> AdapterError:
    why = redact.redact(exc.text or str(exc))
    log.warning("discord.send_failed", chat=where, status=exc.status, code=exc.code, error=why)
    return AdapterError(
        f"discord: send to {where} failed (HTTP {exc.status}, code {exc.code}): {why}"
    )


def _fields(out: Queued) -> dict[str, Any]:
    """``channel.send`` keywords for ``out``'s next piece."""
    fields: dict[str, Any] = {"allowed_mentions": NO_MENTIONS}
    parts = out.parts
    if out.index == 0:
        if out.reference is not None:
            fields["reference"] = out.reference
            fields["mention_author"] = False
        if parts is not None and parts.mentions:
            users = [discord.Object(id=user) for user in parts.mentions]
            fields["allowed_mentions"] = discord.AllowedMentions(
                everyone=False, roles=False, users=users, replied_user=False
            )
    if parts is not None and out.index == len(out.pieces) - 1:
        fields.update(parts.attached())  # files, embeds, buttons under the last piece
    return fields


async def send_piece(out: Queued) -> float | None:
    """Send ``out``'s next piece (the adapter's ChatQueues work): 0 = more to go, None = done."""
    piece = out.pieces[out.index]
    fields = _fields(out)
    try:
        await out.channel.send(piece or None, **fields)
    except discord.HTTPException as exc:
        out.finish(send_failed(out.where, exc))
        return None
    except asyncio.CancelledError:
        out.finish(AdapterError(f"discord: stopped before the message to {out.where} went out"))
        raise
    finally:
        view = fields.get("view")
        if view is not None:
            view.stop()  # presses arrive as on_interaction; discord.py need not keep the view
    out.index += 1
    if out.index < len(out.pieces):
        return 0.0
    out.finish(None)
    return None
