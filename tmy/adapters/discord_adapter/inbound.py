"""What a Discord message carries besides its text: attachments, stickers, the author's
chat roles, and the quoted message — as tmy's platform-neutral types.

* **Attachments** (``message.attachments``) become :class:`~tmy.message.Attachment`:
  ``image``/``video`` by content type, ``voice`` for a voice message, ``file``
  otherwise; url, size, mime (Discord's ``content_type``, else guessed from the
  file name), file name, and ``file_id`` the attachment's snowflake. Discord's CDN
  URLs are signed and expire (about a day), so they are ``inline``: an LLM step
  downloads them and sends the bytes rather than the URL.
* **Stickers** (``message.stickers``) are ``sticker`` attachments with their media
  URL (which does not expire, so not inline).
* A message with no text but media keeps a **placeholder** (``[image]``,
  ``[file]``, ``[sticker]`` … one per item) so trigger rules can still match it.
* **Chat admins** (``adapters.discord.admins_from``): ``owner`` is the guild's
  owner; ``admin`` a member with the Manage Server permission (Administrator and
  the owner have it too); a role id, a member holding that role. Only in guilds:
  a DM has no roles.
"""

from __future__ import annotations

import mimetypes
from typing import Any

import discord

from tmy.adapters.base import placeholder
from tmy.message import Attachment

_STICKER_MIME = {
    discord.StickerFormatType.png: "image/png",
    discord.StickerFormatType.apng: "image/apng",
    discord.StickerFormatType.gif: "image/gif",
    discord.StickerFormatType.lottie: "application/json",
}


def attachments_of(message: discord.Message) -> tuple[Attachment, ...]:
    """The message's attachments and stickers, in that order."""
    found = [_attachment(item) for item in message.attachments]
    found.extend(
        Attachment(
            "sticker",
            url=sticker.url,
            file_id=str(sticker.id),
            mime=_STICKER_MIME.get(sticker.format, ""),
            name=sticker.name,
        )
        for sticker in message.stickers
    )
    return tuple(found)


def _attachment(item: discord.Attachment) -> Attachment:
    mime = (item.content_type or "").split(";")[0].strip()
    if not mime:
        mime = mimetypes.guess_type(item.filename)[0] or ""
    if item.is_voice_message():
        kind = "voice"
    elif mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("video/"):
        kind = "video"
    else:
        kind = "file"
    return Attachment(
        kind,
        url=item.url,
        file_id=str(item.id),
        size=item.size,
        mime=mime,
        name=item.filename,
        inline=True,  # signed CDN URLs expire
    )


def chat_admin(member: Any, admins_from: tuple[str, ...]) -> bool:
    """Whether ``member`` is an admin of its guild by ``admins_from`` (see module doc)."""
    if not admins_from or not isinstance(member, discord.Member):
        return False
    role_ids = {role.id for role in member.roles}
    for item in admins_from:
        if item == "owner" and member.guild.owner_id == member.id:
            return True
        if item == "admin" and member.guild_permissions.manage_guild:
            return True
        if item.isdigit() and int(item) in role_ids:
            return True
    return False


def quoted_of(message: discord.Message) -> dict[str, Any]:
    """``REPLY_TO`` for a quoted message: its text (or placeholder), author and id."""
    text = message.content or placeholder(attachments_of(message))
    return {"text": text, "user": str(message.author.id), "id": str(message.id)}
