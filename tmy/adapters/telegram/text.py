"""Telegram's text arithmetic: UTF-16 offsets and replies cut into messages.

Telegram counts a message's length and its entities' offsets in UTF-16 code
units, not in characters; an emoji outside the Basic Multilingual Plane is
two. :func:`split_text` cuts a reply into messages of at most :data:`MAX_TEXT`
units, on a line break when there is one in the second half of the piece,
else on a space.
"""

from __future__ import annotations

from tmy.adapters.splitting import split_verbatim

MAX_TEXT = 4096  # Telegram's limit for one message, in UTF-16 code units


def utf16_len(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def utf16_index(text: str, units: int) -> int:
    """The str index of UTF-16 offset ``units`` (Telegram counts entity offsets in UTF-16)."""
    if text.isascii():
        return min(units, len(text))
    seen = 0
    for i, ch in enumerate(text):
        if seen >= units:
            return i
        seen += utf16_len(ch)
    return len(text)


def split_text(text: str, limit: int = MAX_TEXT) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-16 units, cut on line breaks when possible.

    A piece ends at the last line break in its second half, else at the last
    space there, else exactly at the limit. Blank pieces are dropped
    (Telegram refuses empty messages).
    """
    return split_verbatim(text, limit, lambda rest: _fit(rest, limit))


def fit_utf16(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to at most ``limit`` UTF-16 units (a growing answer's shown part)."""
    return text[: _fit(text, limit)]


def _fit(text: str, limit: int) -> int:
    """How many characters of ``text`` fit in ``limit`` UTF-16 units."""
    if len(text) <= limit // 2:
        return len(text)
    units = 0
    for i, ch in enumerate(text):
        units += utf16_len(ch)
        if units > limit:
            return i
    return len(text)
