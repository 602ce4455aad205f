"""``Message.api`` for a Satori message: where its media are downloaded, what it quotes.

A media element's ``src`` is either a platform URL or an ``internal:`` link (a
resource only the server can reach: a Lark file id, a Telegram file URL holding
the bot token). Those, and URLs under one of the ``proxy_urls`` the server lists
in READY/META (hosts that refuse hotlinking), are fetched through the server's
proxy route ``{api_base}/v1/proxy/{url}``; any other URL directly. The proxy is
on ``api_base``'s host, usually a private address, so that host is trusted for
downloads (``trusted_media_hosts``) without ``limits.media_private_hosts``. That
trust is for the server's own origin only (and a proxied URL with ``..`` segments,
which the HTTP client would resolve to another route of the server with the token
attached, is refused): a direct URL on the same host but
another port or scheme (``http://127.0.0.1:6379/…`` beside a server on
``127.0.0.1:5140``) is refused — a message's ``src`` comes from the platform (an
e-mail's HTML through Koishi's mail adapter, a Matrix message), and must not reach
the local services the download guard keeps tmy from.

REPLY_TO is the ``<quote>``'s own text and author when the server put them in,
else ``message.get`` asked of the server.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from tmy.adapters.satori.api import SatoriHttp
from tmy.adapters.satori.incoming import read_content
from tmy.errors import AdapterError
from tmy.media import is_allowed
from tmy.message import Message


class SatoriPlatformApi:
    """``Message.api`` for one Satori message (see :class:`tmy.types.PlatformApi`)."""

    __slots__ = ("_channel", "_http", "_platform", "_proxied", "_quoted", "_self_id")

    def __init__(
        self,
        http: SatoriHttp,
        *,
        platform: str,
        self_id: str,
        channel: str,
        quoted: dict[str, Any] | None,
        proxy_urls: tuple[str, ...],
    ) -> None:
        self._http = http
        self._platform = platform
        self._self_id = self_id
        self._channel = channel
        self._quoted = quoted
        self._proxied = proxy_urls

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        url = str(getattr(attachment, "url", "") or "")
        if not url:
            raise AdapterError("satori: this attachment has no src to download")
        if url.startswith("internal:") or any(url.startswith(p) for p in self._proxied if p):
            if any(part in (".", "..") for part in url.split("?", 1)[0].split("/")):
                raise AdapterError(  # the client would resolve it out of /v1/proxy/, token and all
                    f"satori: not fetching {url[:120]!r} through the proxy: it has dot segments"
                )
            headers = {}
            if self._http.token:
                headers["Authorization"] = f"Bearer {self._http.token}"
            return f"{self._http.api_base}/v1/proxy/{url}", headers
        host = urlsplit(url).hostname or ""
        if is_allowed(host, self.trusted_media_hosts) and _origin(url) != _origin(
            self._http.api_base
        ):
            raise AdapterError(
                f"satori: not downloading {url.split('?', 1)[0][:120]!r}: it is on the Satori "
                "server's host but not its origin (only api_base's own URLs are trusted there)"
            )
        return url, {}

    @property
    def trusted_media_hosts(self) -> tuple[str, ...]:
        host = urlsplit(self._http.api_base).hostname
        return (host,) if host else ()

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        if self._quoted is not None and (self._quoted.get("text") or self._quoted.get("user")):
            return dict(self._quoted)
        if not message.reply_to or not self._channel:
            return None
        found = await self._http.call(
            "message.get", {"channel_id": self._channel, "message_id": message.reply_to},
            platform=self._platform, user_id=self._self_id,
        )  # fmt: skip
        if not isinstance(found, dict):
            return None
        user = found.get("user") if isinstance(found.get("user"), dict) else {}
        content = read_content(str(found.get("content") or ""), self._self_id)
        return {"text": content.text, "user": str(user.get("id") or ""), "id": message.reply_to}


def _origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port (the scheme's default when none is written)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)
