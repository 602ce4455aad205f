"""``data:`` URLs: what a picture becomes when its own URL cannot be handed on
(it needs credentials or expires), and what a reply may carry inline."""

from __future__ import annotations

import base64
import binascii
import mimetypes
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from tmy.errors import TmyError

DEFAULT_MIME = "application/octet-stream"
# the first bytes of the picture formats chat platforms send, for when no header says
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


class MediaError(TmyError):
    """A picture or file could not be had: too large, refused, not found, not readable."""


@dataclass(frozen=True, slots=True)
class Media:
    """Bytes and what they are (a MIME type such as ``image/png``)."""

    data: bytes
    mime: str = DEFAULT_MIME


def sniff(data: bytes, name: str = "", declared: str = "") -> str:
    """The MIME type: the declared one when it says something, else the bytes' magic
    number, else the name's extension, else ``application/octet-stream``."""
    declared = declared.split(";", 1)[0].strip().lower()
    if declared and declared != DEFAULT_MIME:
        return declared
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    guessed = mimetypes.guess_type(name)[0] if name else None
    return guessed or DEFAULT_MIME


_HEIC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx"})
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_BMP_HEADERS = frozenset({12, 40, 52, 56, 64, 108, 124})  # the DIB header sizes there are


def image_mime(data: bytes) -> str | None:
    """The picture format ``data`` is by its own first bytes — PNG, JPEG, GIF, WebP,
    BMP, HEIC or AVIF — or None when it is none of them (whatever a header or a file
    name claims): what tells a picture from a page relabelled as one."""
    for magic, mime in _MAGIC:
        if magic != b"BM" and data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:2] == b"BM" and int.from_bytes(data[14:18], "little") in _BMP_HEADERS:
        return "image/bmp"
    if data[4:8] == b"ftyp" and len(data) >= 12:
        end = min(int.from_bytes(data[:4], "big"), len(data), 256)  # the ftyp box
        brands = {data[8:12]} | {data[i : i + 4] for i in range(16, end - 3, 4)}
        if brands & _AVIF_BRANDS:
            return "image/avif"
        if brands & _HEIC_BRANDS or data[8:12] in (b"mif1", b"msf1"):
            return "image/heic"
    return None


def data_url(media: Media) -> str:
    """``data:<mime>;base64,<bytes>`` — how an LLM provider takes a picture inline."""
    return f"data:{media.mime};base64,{base64.b64encode(media.data).decode('ascii')}"


def parse_data_url(url: str, limit: int) -> Media:
    """The bytes a ``data:`` URL holds; :class:`MediaError` when it is malformed or
    decodes to more than ``limit`` bytes (checked before decoding)."""
    head, comma, payload = url.partition(",")
    if not head.lower().startswith("data:") or not comma:
        raise MediaError("not a data: URL (expected data:<type>;base64,<data>)")
    params = head[5:].split(";")
    is_base64 = params[-1].strip().lower() == "base64"
    mime = params[0].strip().lower()  # none given: told by the bytes (sniff)
    if is_base64:
        payload = "".join(payload.split())
        if len(payload) // 4 * 3 > limit + 2:
            raise MediaError(f"the data: URL holds more than {limit} bytes")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise MediaError("the data: URL is not valid base64") from None
    else:
        data = unquote_to_bytes(payload)
    if len(data) > limit:
        raise MediaError(f"the data: URL holds {len(data)} bytes (the limit is {limit})")
    return Media(data, sniff(data, declared=mime))
