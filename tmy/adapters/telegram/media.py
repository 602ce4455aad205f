"""What a Telegram message carries besides text, and what the platform does for its run.

**Attachments.** A photo (its largest size), document, voice message, video
(also video notes and animations), audio file or sticker becomes an
:class:`~tmy.message.Attachment` with Telegram's ``file_id``, size and MIME
type. Telegram gives no URL: a file is fetched with ``getFile`` and then
downloaded from ``{api_base}/file/bot<token>/<file_path>`` — a URL holding the
bot token — so every attachment is ``inline`` (whoever hands it on downloads
it and sends the bytes) and its ``url`` stays empty; rules never see the token.
A message without text or caption reads as a placeholder (``[image]``,
``[file]``, ``[voice]``, ``[video]``, ``[sticker]``, as on OneBot) so that
triggers can still match it.

**The platform API** (:class:`TelegramApi`, ``Message.api``): ``media_source``
calls ``getFile`` when a run needs an attachment's bytes; ``quoted`` is the
message the update replied to (Telegram sends it inside the update, so no call
is needed), as ``{text, user, id}``; ``trusted_media_hosts`` is the configured
``api_base``'s host, which the download may reach although it is private.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import ClientDecodeError, TelegramAPIError
from aiogram.types import Message as TgMessage

from tmy.adapters.base import placeholder
from tmy.adapters.telegram.errors import describe
from tmy.errors import AdapterError
from tmy.message import Attachment, Message


def attachments_of(m: TgMessage) -> tuple[Attachment, ...]:
    """The files ``m`` carries (Telegram sends at most one per message)."""
    if m.photo:
        best = max(m.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        return (_file("image", best, "image/jpeg"),)  # Telegram re-encodes photos as JPEG
    if m.sticker is not None:
        s = m.sticker
        mime = "video/webm" if s.is_video else "application/x-tgsticker" if s.is_animated else ""
        return (_file("sticker", s, mime or "image/webp", name=s.emoji or ""),)
    for kind, media in (
        ("voice", m.voice),
        ("video", m.video),
        ("video", m.video_note),
        ("video", m.animation),
        ("file", m.audio),
        ("file", m.document),
    ):
        if media is not None:
            return (_file(kind, media, getattr(media, "mime_type", None) or ""),)
    return ()


def _file(kind: str, media: Any, mime: str, *, name: str = "") -> Attachment:
    return Attachment(
        kind,
        file_id=media.file_id,
        size=media.file_size,
        mime=mime,
        name=name or getattr(media, "file_name", None) or "",
        inline=True,
    )


def quoted_of(m: TgMessage | None) -> dict[str, Any] | None:
    """A quoted message as REPLY_TO sees it: ``{text, user, id}``."""
    if m is None:
        return None
    text = m.text if m.text is not None else m.caption
    if text is None:
        text = placeholder(attachments_of(m))
    user = str(m.from_user.id) if m.from_user is not None else ""
    return {"text": text, "user": user, "id": str(m.message_id)}


class TelegramApi:
    """``Message.api`` for one Telegram message (see :class:`tmy.types.PlatformApi`)."""

    __slots__ = ("_bot", "_quoted", "_server")

    def __init__(self, bot: Bot, server: TelegramAPIServer, quoted: dict[str, Any] | None) -> None:
        self._bot = bot
        self._server = server
        self._quoted = quoted

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        """``getFile``, then the download URL (it holds the token: never show it)."""
        file_id = getattr(attachment, "file_id", "")
        if not file_id:
            raise AdapterError("telegram: this attachment has no file_id to download")
        try:
            file = await self._bot.get_file(file_id)
        except (TelegramAPIError, ClientDecodeError) as exc:
            raise AdapterError(f"telegram: getFile failed: {describe(exc)}") from exc
        if not file.file_path:
            raise AdapterError("telegram: getFile gave no file_path (the file is too big: 20 MB)")
        return self._server.file_url(self._bot.token, file.file_path), {}

    @property
    def trusted_media_hosts(self) -> tuple[str, ...]:
        """The host of the configured ``api_base`` file URLs: ``media_source`` builds its
        URLs on it, so tmy downloads from it even when it is private (a self-hosted Bot
        API server on 127.0.0.1) without ``limits.media_private_hosts``."""
        host = urlsplit(self._server.file).hostname
        return (host,) if host else ()

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        return dict(self._quoted) if self._quoted is not None else None
