"""Loading a reply's images and files to upload them, for the adapters that upload bytes.

A reply names a picture or file by an http(s) URL, a ``data:`` URL or a path
under ``media/`` in the rules directory; :func:`tmy.media.load` reads each with
its guards (public hosts only unless listed in ``limits.media_private_hosts``,
at most ``limit`` bytes, no path out of ``media/``). :class:`MediaLoader` holds
the HTTP client that needs, opened at first use and closed with the adapter;
:func:`file_name` names the upload. :func:`read_local` reads only what tmy holds
itself (a data: URL, a media/ file), for platforms that fetch an http(s) URL themselves.
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
from tmy.media import Media, MediaError, parse_data_url, reply_file

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
        found = await self.load(source)
        return found.data, found.mime

    async def load(self, source: str, limit: int | None = None) -> Media:
        """``source`` read with the guards, at most ``limit`` bytes (default: ``self.limit``;
        a platform whose images and files have different upload limits passes its own)."""
        if self.http is None:
            self.http = new_http_client()
        limit = self.limit if limit is None else limit
        return await media.load(
            source, self.http, limit, self.base_dir, private_hosts=self.private_hosts
        )

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


def read_local(source: str, rules_dir: Path | None, limit: int, name: str) -> tuple[Media, str]:
    """A reply's ``data:`` URL or file under ``media/`` as bytes, with the file name to
    upload it as (``<name>.<subtype>`` for a data: URL, the file's own name for a path), for
    platforms that take an http(s) URL as it is and upload only what tmy holds itself;
    :class:`~tmy.media.MediaError` for any other source, or one too large."""
    if source[:5].lower() == "data:":
        found = parse_data_url(source, limit)
        ext = found.mime.rsplit("/", 1)[-1] if "/" in found.mime else "bin"
        return found, f"{name}.{ext}"
    if "://" in source or not source:
        raise MediaError(f"{source[:60]!r}: only http(s) and data: URLs, or a file path")
    if rules_dir is None:
        raise MediaError(f"{source!r}: a file path needs the rules directory")
    return reply_file(source, rules_dir, limit), Path(source).name
