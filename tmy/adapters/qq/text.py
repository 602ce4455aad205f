"""Splitting a long reply into QQ messages.

QQ documents no length limit for a message's ``content``. :data:`MAX_TEXT` is
2,000 characters: well inside what the API and the QQ client take, and with the
5 passive replies QQ allows per group/C2C message (:data:`MAX_PASSIVE_REPLIES`) a
reply of up to 10,000 characters still goes out whole. Past that the last piece
ends with "…" (QQ would refuse a sixth reply to the same message).
"""

from __future__ import annotations

from tmy.adapters.splitting import split_trimmed

MAX_TEXT = 2000  # characters per message (see the module docstring)
MAX_PASSIVE_REPLIES = 5  # replies QQ accepts to one group / C2C message (msg_id)
ELLIPSIS = "…"


def split_text(text: str, limit: int = MAX_TEXT) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut at a line break in the
    second half of a piece when there is one, else at a space, else anywhere."""
    return split_trimmed(text, limit)


def at_most(pieces: list[str], count: int, limit: int = MAX_TEXT) -> list[str]:
    """The first ``count`` pieces; when some were cut off the last ends with "…"."""
    if len(pieces) <= count:
        return pieces
    if count <= 0:
        return []
    kept = pieces[:count]
    kept[-1] = kept[-1][: limit - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return kept
