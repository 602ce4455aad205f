"""What Discord can do for a run (``Message.api``, :class:`tmy.types.PlatformApi`).

``media_source``: an attachment's URL needs no credentials on Discord (it is
signed and expires instead), so it is returned with no headers. ``quoted``: the
message a reply quotes — discord.py's resolved reference when the gateway sent
it along, else fetched (``GET /channels/{id}/messages/{id}``, needs Read
Message History); a deleted or unreachable one is None.
"""

from __future__ import annotations

from typing import Any

import discord

from tmy.adapters.discord_adapter.inbound import quoted_of
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Attachment, Message

log = get_logger("tmy.adapter.discord")


class DiscordApi:
    """One per adapter: both methods work from their arguments alone."""

    def __init__(self, client: discord.Client | None) -> None:
        self.client = client

    async def media_source(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        if not attachment.url:
            raise AdapterError(f"discord: the {attachment.kind} {attachment.name!r} has no URL")
        return attachment.url, {}

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        original = message.raw
        if not isinstance(original, discord.Message) or original.reference is None:
            return None
        reference = original.reference
        resolved = reference.resolved
        if isinstance(resolved, discord.Message):
            return quoted_of(resolved)
        if isinstance(resolved, discord.DeletedReferencedMessage) or not reference.message_id:
            return None
        channel: Any = original.channel
        if reference.channel_id != channel.id and self.client is not None:
            channel = self.client.get_partial_messageable(reference.channel_id)
        try:
            found = await channel.fetch_message(reference.message_id)
        except discord.HTTPException as exc:
            log.info(
                "discord.quoted_missing",
                message_id=str(reference.message_id),
                status=exc.status,
                code=exc.code,
            )
            return None
        return quoted_of(found)
