"""``image_mime``: a picture is told by its own first bytes, never by a name or header."""

from __future__ import annotations

import pytest

from tests.support.llm_fake_provider import PNG
from tmy.media import image_mime


def ftyp(major: bytes, *compatible: bytes) -> bytes:
    body = major + b"\0\0\0\0" + b"".join(compatible)
    return (8 + len(body)).to_bytes(4, "big") + b"ftyp" + body + b"\0\0\0\x08meta"


BMP = b"BM" + b"\0" * 12 + (40).to_bytes(4, "little") + b"\0" * 36


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0\0\x10JFIF", "image/jpeg"),
        (b"GIF87a\x01\0", "image/gif"),
        (b"GIF89a\x01\0", "image/gif"),
        (b"RIFF\x24\0\0\0WEBPVP8 ", "image/webp"),
        (BMP, "image/bmp"),
        (ftyp(b"heic", b"mif1", b"heic"), "image/heic"),
        (ftyp(b"mif1", b"heic"), "image/heic"),
        (ftyp(b"avif", b"mif1", b"miaf"), "image/avif"),
        (ftyp(b"mif1", b"avif"), "image/avif"),
    ],
)
def test_pictures_are_told_by_their_bytes(data: bytes, mime: str) -> None:
    assert image_mime(data) == mime


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b'{"AccessKeyId": "ASIA"}',
        b"<html>admin</html>",
        b"BM is also how a text may start",  # "BM" alone is not a bitmap
        b"RIFF\x24\0\0\0WAVEfmt ",  # audio
        ftyp(b"isom", b"mp41"),  # a video
        b"\0" * 64,
    ],
)
def test_other_bytes_are_no_picture(data: bytes) -> None:
    assert image_mime(data) is None
