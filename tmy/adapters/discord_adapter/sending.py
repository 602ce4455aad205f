"""Sending to Discord: a queued reply (or ``send``), one piece at a time, never pinging anyone.

Replies go to the same channel as a Discord reply to the triggering message
(no ping of its author, and still sent when that message was deleted
meanwhile), split by :func:`~tmy.adapters.discord_adapter.text.split_message`
into pieces of at most :data:`~tmy.adapters.discord_adapter.text.MAX_TEXT`
characters. Every send carries :data:`NO_MENTIONS`, so no text — whatever a
user typed or a rule echoed — can ping ``@everyone``, ``@here``, roles or
users. Replies wait in their channel's own queue (at most
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
from tmy.adapters.fairness import PendingSend
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.discord")

# Nothing in a reply may ping anyone: not @everyone/@here, not roles, not users, not the author.
NO_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=False, replied_user=False)


class Outgoing(PendingSend):
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


def send_failed(where: str, exc: discord.HTTPException) -> AdapterError:
    why = redact.redact(exc.text or str(exc))
    log.warning("discord.send_failed", chat=where, status=exc.status, code=exc.code, error=why)
    return AdapterError(
        f"discord: send to {where} failed (HTTP {exc.status}, code {exc.code}): {why}"
    )


async def send_piece(out: Outgoing) -> float | None:
    """Send ``out``'s next piece (the adapter's ChatQueues work): 0 = more to go, None = done."""
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
        out.finish(send_failed(out.where, exc))
        return None
    except asyncio.CancelledError:
        out.finish(AdapterError(f"discord: stopped before the message to {out.where} went out"))
        raise
    out.index += 1
    if out.index < len(out.pieces):
        return 0.0
    out.finish(None)
    return None
