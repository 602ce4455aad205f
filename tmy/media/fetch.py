"""Getting a picture or file: downloaded from a URL under a size limit, or loaded from
a reply's source (a URL, a ``data:`` URL, or a file under the rules directory).

Sizes are counted on what the body *decodes* to (:mod:`tmy.bodies`), so a small
compressed body cannot inflate past the limit; a declared ``Content-Length`` over
it is refused before reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tmy import bodies
from tmy.media.dataurl import Media, MediaError, parse_data_url, sniff
from tmy.redact import safe_url

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx


def _short(url: str) -> str:
    """A URL for an error message: no password, no query (it may hold a token), not long."""
    shown = safe_url(url).split("?", 1)[0]
    return shown if len(shown) <= 120 else shown[:120] + "…"


async def download(
    http: httpx.AsyncClient, url: str, headers: Mapping[str, str] | None, limit: int
) -> Media:
    """GET ``url`` (with ``headers``, e.g. the platform's Authorization) and return its
    body, read as it streams and refused once it passes ``limit`` bytes.

    :class:`MediaError` says what went wrong (status, too large, unreachable) and
    names the URL without its query string, where platforms put tokens.
    """
    import httpx  # deferred: see above

    if not url.startswith(("http://", "https://")):
        raise MediaError(f"cannot download {_short(url)!r}: only http(s) URLs are fetched")

    def too_large() -> MediaError:
        return MediaError(f"{_short(url)} is larger than {limit} bytes; stopped reading")

    try:
        async with http.stream("GET", url, headers=dict(headers or {})) as resp:
            if resp.status_code >= 400:
                raise MediaError(f"downloading {_short(url)} failed: HTTP {resp.status_code}")
            data = await bodies.read_capped(resp, limit, too_large)
            declared = resp.headers.get("content-type", "")
    except bodies.BadEncoding as exc:
        raise MediaError(f"downloading {_short(url)} failed: {exc}") from None
    except httpx.HTTPError as exc:
        raise MediaError(f"downloading {_short(url)} failed: {type(exc).__name__}: {exc}") from None
    return Media(data, sniff(data, url.split("?", 1)[0], declared))


def inside(path: str, base_dir: Path) -> Path:
    """``path`` (relative to ``base_dir``, or absolute) resolved, when it lies under
    ``base_dir`` once every symlink and ``..`` is followed; MediaError otherwise."""
    base = base_dir.resolve()
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = base / candidate
    real = candidate.resolve()
    if real != base and base not in real.parents:
        raise MediaError(f"{path!r} is outside the rules directory {base}; only files under it")
    return real


def read_file(path: str, base_dir: Path, limit: int) -> Media:
    """A file under ``base_dir`` (see :func:`inside`), at most ``limit`` bytes."""
    real = inside(path, base_dir)
    if not real.is_file():
        raise MediaError(f"{path!r}: no such file under the rules directory")
    size = real.stat().st_size
    if size > limit:
        raise MediaError(f"{path!r} is {size} bytes (the limit is {limit})")
    with real.open("rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew since stat
        raise MediaError(f"{path!r} is larger than {limit} bytes")
    return Media(data, sniff(data, real.name))


async def load(source: str, http: httpx.AsyncClient, limit: int, base_dir: Path) -> Media:
    """What a reply's image/file source holds: an http(s) URL (downloaded), a ``data:``
    URL (decoded) or a file path under ``base_dir`` (the rules directory; nothing
    outside it, through a symlink or ``..`` included), each at most ``limit`` bytes."""
    if not isinstance(source, str) or not source.strip():
        raise MediaError(f"an image or file source must be a URL or a path, not {source!r}")
    source = source.strip()
    if source.startswith(("http://", "https://")):
        return await download(http, source, None, limit)
    if source[:5].lower() == "data:":
        return parse_data_url(source, limit)
    if "://" in source:
        raise MediaError(f"{_short(source)!r}: only http(s) and data: URLs, or a file path")
    return read_file(source, base_dir, limit)
