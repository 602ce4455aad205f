"""What a Slack message carries besides text, and what the platform does for its run.

**Attachments.** Each shared file (``files`` of a message event) becomes an
:class:`~tmy.message.Attachment`: ``image/*`` an image, ``video/*`` a video,
``audio/*`` (voice clips) a voice message, anything else a file, with Slack's
file id, name, MIME type and size. Its ``url_private`` answers only with the
bot token (``Authorization: Bearer xoxb-…``), so every attachment is
``inline``: whoever hands it on (an LLM step) downloads it here and sends the
bytes, and the token goes nowhere but Slack's file hosts. A file Slack no longer holds
(``mode: tombstone``) is left out.

**The platform API** (:class:`SlackApi`, ``Message.api``): ``media_source`` is
the file's ``url_private_download`` (else ``url_private``) with the bot token
as its header — only when that URL is Slack's own (https on ``slack.com``,
``slack-gov.com`` or a subdomain, or the configured ``api_base``'s scheme, host
and port): a remote file's ``url_private`` is its ``external_url`` on any host
(``files.remote.add``), which gets no token; ``quoted`` is the first message
of the thread a message replies in (``conversations.replies``, asked only when
a run reads ``REPLY_TO``); ``trusted_media_hosts`` is the configured
``api_base``'s host (a loopback fake or a proxy in front of Slack).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from tmy.errors import AdapterError
from tmy.message import Attachment, Message

SLACK_DOMAINS = ("slack.com", "slack-gov.com")  # the bot token goes to these over https only


def attachments_of(files: Iterable[Any]) -> tuple[Attachment, ...]:
    """The files of a message event as attachments (see module doc)."""
    found = []
    for f in files:
        if not isinstance(f, dict) or f.get("mode") == "tombstone":
            continue
        mime = str(f.get("mimetype") or "")
        kind = (
            "image"
            if mime.startswith("image/")
            else "video"
            if mime.startswith("video/")
            else "voice"
            if mime.startswith("audio/")
            else "file"
        )
        size = f.get("size")
        found.append(
            Attachment(
                kind,
                url=str(f.get("url_private_download") or f.get("url_private") or ""),
                file_id=str(f.get("id") or ""),
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                mime=mime,
                name=str(f.get("name") or f.get("title") or ""),
                inline=True,
            )
        )
    return tuple(found)


class SlackApi:
    """``Message.api`` for one Slack message (see :class:`tmy.types.PlatformApi`)."""

    __slots__ = ("_api_host", "_api_origin", "_quoted", "_token")

    def __init__(
        self,
        token: str,
        api_base: str,
        quoted: Callable[[Message], Awaitable[dict[str, Any] | None]],
    ) -> None:
        self._token = token
        base = urlsplit(api_base)
        self._api_host = base.hostname or ""
        self._api_origin = (base.scheme, self._api_host.lower(), base.port)
        self._quoted = quoted

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        """The file's private URL and the bot token's header (never shown to rules)."""
        url = getattr(attachment, "url", "")
        if not url:
            raise AdapterError("slack: this file has no url_private to download")
        if not self._slack_hosted(url):  # a remote file: its own host, no token for it
            return url, {}
        return url, {"Authorization": f"Bearer {self._token}"}

    def _slack_hosted(self, url: str) -> bool:
        """Is ``url`` on Slack's own file hosts (see module doc), so the token may go?"""
        try:
            target = urlsplit(url)
            host, port = (target.hostname or "").lower(), target.port
        except ValueError:
            return False
        if not host:
            return False
        if (target.scheme, host, port) == self._api_origin:
            return True
        return target.scheme == "https" and any(
            host == d or host.endswith("." + d) for d in SLACK_DOMAINS
        )

    @property
    def trusted_media_hosts(self) -> tuple[str, ...]:
        return (self._api_host,) if self._api_host else ()

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        if not message.reply_to:
            return None
        return await self._quoted(message)
