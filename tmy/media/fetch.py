"""Getting a picture or file: downloaded from a URL under a size limit, or loaded from
a reply's source (a URL, a ``data:`` URL, or a file under ``media/`` in the rules
directory). Downloads go only to public hosts (:mod:`tmy.media.hosts`).

Sizes are counted on what the body *decodes* to (:mod:`tmy.bodies`), so a small
compressed body cannot inflate past the limit; a declared ``Content-Length`` over
it is refused before reading.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from tmy import bodies
from tmy.media.dataurl import Media, MediaError, parse_data_url, sniff
from tmy.media.hosts import check_url
from tmy.media.local import reply_file
from tmy.redact import safe_url

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx


MAX_REDIRECTS = 5  # hops a download follows, each one's host checked
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _short(url: str) -> str:
    """A URL for an error message: no password, no query (it may hold a token), not long."""
    shown = safe_url(url).split("?", 1)[0]
    return shown if len(shown) <= 120 else shown[:120] + "…"


async def download(
    http: httpx.AsyncClient,
    url: str,
    headers: Mapping[str, str] | None,
    limit: int,
    *,
    private_hosts: Collection[str] = (),
) -> Media:
    """GET ``url`` (with ``headers``, e.g. the platform's Authorization) and return its
    body, read as it streams and refused once it passes ``limit`` bytes.

    Every host on the way is checked first (:func:`tmy.media.hosts.check_url`:
    no loopback, private, link-local … address unless ``private_hosts`` lists it),
    and redirects are followed here, at most :data:`MAX_REDIRECTS`, each hop
    checked; ``headers`` go only to the first URL's origin, never to a redirect's
    other host. :class:`MediaError` says what went wrong (refused host, status,
    too large, unreachable) and names the URL without its query string, where
    platforms put tokens.
    """
    if not url.startswith(("http://", "https://")):
        raise MediaError(f"cannot download {_short(url)!r}: only http(s) URLs are fetched")
    current, sent = url, dict(headers or {})
    for _hop in range(MAX_REDIRECTS + 1):
        await check_url(current, private_hosts)
        got = await _get(http, current, sent, limit)
        if isinstance(got, Media):
            return got
        if _origin(got) != _origin(current):
            sent = {}  # the platform's credentials are for its own host only
        current = got
    raise MediaError(f"downloading {_short(url)} failed: more than {MAX_REDIRECTS} redirects")


async def _get(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], limit: int
) -> Media | str:
    """One GET without following redirects: the body, or where a redirect points."""
    import httpx  # deferred: see above

    def too_large() -> MediaError:
        return MediaError(f"{_short(url)} is larger than {limit} bytes; stopped reading")

    try:
        async with http.stream("GET", url, headers=headers, follow_redirects=False) as resp:
            if resp.status_code in _REDIRECTS and resp.headers.get("location"):
                target = urljoin(url, resp.headers["location"].strip())
                if not target.startswith(("http://", "https://")):
                    raise MediaError(
                        f"{_short(url)} redirects to {_short(target)!r}: only http(s) is followed"
                    )
                return target
            if resp.status_code >= 400 or resp.status_code in _REDIRECTS:
                raise MediaError(f"downloading {_short(url)} failed: HTTP {resp.status_code}")
            data = await bodies.read_capped(resp, limit, too_large)
            declared = resp.headers.get("content-type", "")
    except bodies.BadEncoding as exc:
        raise MediaError(f"downloading {_short(url)} failed: {exc}") from None
    except httpx.HTTPError as exc:
        raise MediaError(f"downloading {_short(url)} failed: {type(exc).__name__}: {exc}") from None
    return Media(data, sniff(data, url.split("?", 1)[0], declared))


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


async def load(
    source: str,
    http: httpx.AsyncClient,
    limit: int,
    base_dir: Path,
    *,
    private_hosts: Collection[str] = (),
) -> Media:
    """What a reply's image/file source holds: an http(s) URL (downloaded, its hosts
    checked against ``private_hosts`` as in :func:`download`), a ``data:`` URL
    (decoded) or a file under ``<base_dir>/media/`` (``base_dir``: the rules
    directory or file; see :mod:`tmy.media.local`), each at most ``limit`` bytes."""
    if not isinstance(source, str) or not source.strip():
        raise MediaError(f"an image or file source must be a URL or a path, not {source!r}")
    source = source.strip()
    if source.startswith(("http://", "https://")):
        return await download(http, source, None, limit, private_hosts=private_hosts)
    if source[:5].lower() == "data:":
        return parse_data_url(source, limit)
    if "://" in source:
        raise MediaError(f"{_short(source)!r}: only http(s) and data: URLs, or a file path")
    return reply_file(source, base_dir, limit)
