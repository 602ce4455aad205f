"""Loading a reply's images and files to upload them, for the adapters that upload bytes.

A reply names a picture or file by an http(s) URL, a ``data:`` URL or a path
under ``media/`` in the rules directory; :func:`tmy.media.load` reads each with
its guards (public hosts only unless listed in ``limits.media_private_hosts``,
at most ``limit`` bytes, no path out of ``media/``). :class:`MediaLoader` holds
the HTTP client that needs, opened at first use and closed with the adapter;
:func:`file_name` names the upload.
"""

from __future__ import annotations

import mimetypes
import posixpath
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from tmy import media
from tmy.http_client import new_http_client

if TYPE_CHECKING:
    import httpx


class MediaLoader:
    """Loads a reply's image and file sources with :func:`tmy.media.load` (an http(s) URL
    from a public host or one of ``private_hosts`` — ``limits.media_private_hosts`` —, a
    ``data:`` URL, or a file under ``media/`` in ``base_dir``, the rules directory; the
    working directory when none is given), at most ``limit`` bytes each (the platform's
    upload limit: a subclass's ``max_bytes``), through an HTTP client of its own opened
    at first use. Called with a source, it gives ``(bytes, mime type)``."""

    max_bytes = 10 * 1024 * 1024

    def __init__(
        self,
        base_dir: Path | None,
        limit: int | None = None,
        *,
        private_hosts: Collection[str] = (),
    ) -> None:
        self.base_dir = base_dir or Path.cwd()
        self.limit = self.max_bytes if limit is None else limit
        self.private_hosts = tuple(private_hosts)
        self.http: httpx.AsyncClient | None = None

    async def __call__(self, source: str) -> tuple[bytes, str]:
        if self.http is None:
            self.http = new_http_client()
        found = await media.load(
            source, self.http, self.limit, self.base_dir, private_hosts=self.private_hosts
        )
        return found.data, found.mime

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.aclose()
            self.http = None


def file_name(source: str, mime: str, kind: str) -> str:
    """The upload's file name: the URL's or path's own last part when it has one (at most
    100 characters), else ``<kind>`` with the extension of its type (``image.png``)."""
    if not source.startswith("data:"):
        name = posixpath.basename(unquote(urlsplit(source).path))
        if name and "." in name:
            return name[-100:]
    return f"{kind}{mimetypes.guess_extension(mime or '') or '.bin'}"
