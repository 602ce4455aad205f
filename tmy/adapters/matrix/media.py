"""What the homeserver does for one message's run (``Message.api``): media and quotes.

**Media.** A picture, file, voice message or video arrives as an ``mxc://`` URI.
Since Matrix 1.11 (and on matrix.org since 2024) media is downloaded from the
*authenticated* endpoint ``/_matrix/client/v1/media/download/<server>/<id>``,
which needs the bot's access token: an attachment's ``url`` is that download URL,
``file_id`` the ``mxc://`` URI, and it is ``inline`` (whoever hands it on, an LLM
step, downloads it with :meth:`MatrixApi.media_source` — the URL plus an
``Authorization`` header — and sends the bytes). Rules never see the token.
Encrypted attachments (``content.file``) cannot be read (see the package doc).

**Quotes** (``REPLY_TO``): the event a message replies to, from what the adapter
saw or sent (:class:`~tmy.adapters.matrix.incoming.Recent`), else fetched with
``GET /rooms/{room}/event/{id}``; as ``{text, user, id}``.
"""

from __future__ import annotations

from typing import Any

from mautrix.api import Method, Path
from mautrix.client import ClientAPI
from yarl import URL

from tmy.adapters.matrix.http import describe
from tmy.adapters.matrix.incoming import Recent
from tmy.adapters.matrix.paths import download_base, download_url
from tmy.adapters.matrix.text import strip_reply_fallback
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message

log = get_logger("tmy.adapter.matrix")


async def fetch_event(client: ClientAPI, room: str, event_id: str) -> dict[str, Any]:
    """``GET /rooms/{room}/event/{id}``: the raw event (mautrix errors go up)."""
    return dict(await client.api.request(Method.GET, Path.v3.rooms[room].event[event_id]))


class MatrixApi:
    """``Message.api`` for one Matrix message (see :class:`tmy.types.PlatformApi`)."""

    __slots__ = ("_client", "_recent", "_room")

    def __init__(self, client: ClientAPI, recent: Recent, room: str) -> None:
        self._client = client
        self._recent = recent
        self._room = room

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        """The authenticated download URL and the ``Authorization`` header it needs."""
        base = download_base(str(self._client.api.base_url))
        url = download_url(base, getattr(attachment, "file_id", "") or "")
        if not url:
            raise AdapterError("matrix: this attachment has no mxc:// URI to download")
        return url, {"Authorization": f"Bearer {self._client.api.token}"}

    @property
    def trusted_media_hosts(self) -> tuple[str, ...]:
        """The homeserver's host: media_source builds its URLs on the configured
        ``api_base``, so tmy downloads from it even when it is private (a homeserver
        on the same network) without ``limits.media_private_hosts``."""
        host = URL(str(self._client.api.base_url)).host
        return (host,) if host else ()

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        event_id = message.reply_to
        if not event_id:
            return None
        seen = self._recent.get(event_id)
        if seen is not None:
            return {"text": seen["text"], "user": seen["user"], "id": event_id}
        try:
            event = await fetch_event(self._client, self._room, event_id)
        except Exception as exc:  # not visible to the bot, or gone: unknown
            log.info("matrix.quote_unavailable", event_id=event_id, error=describe(exc))
            return None
        content = event.get("content") or {}
        body = content.get("body") if isinstance(content.get("body"), str) else ""
        return {
            "text": strip_reply_fallback(body),
            "user": str(event.get("sender", "")),
            "id": event_id,
        }
