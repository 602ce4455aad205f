"""What a message brings to a FAQ answer's ``run.done`` line (:mod:`tmy.engine.plans`):
its text, QUESTION, user, chat and platform as JSON — written as they are when nothing in
them needs escaping (:func:`plain`), the ids' part kept per chat (:data:`SAID_IDS`), and
orjson's escaping otherwise (:func:`said_escaped`), byte for byte the general line's.
"""

from __future__ import annotations

import orjson

from tmy.message import Message


def plain(text: str) -> bool:
    """Does orjson write ``text`` as it is (nothing to escape)? It escapes only quotes,
    backslashes and control characters, none of them printable but the first two (what
    else is not printable — DEL, a line separator, a lone surrogate — takes the escaping
    way, as it may); a printable character beyond ASCII it writes as its UTF-8."""
    return text.isprintable() and '"' not in text and "\\" not in text


class IdsParts:
    """Joined ids (:func:`joined_ids`) -> their ``"user":…,"chat":…,"platform":…`` part of
    a ``run.done`` line as written when they are :func:`plain`, or None (orjson escapes
    them): ``parts``, a plain dict a hot caller subscripts itself (cleared in place, never
    replaced), filled by :meth:`fill` on a miss and kept — a chat's ids come again and
    again; the check looks at every character — at most ``kept`` of them.

    The key splits back into the fields unambiguously where it matters: with exactly two
    NULs one way only; with more, some id holds a NUL — not printable — and it is None.
    """

    def __init__(self, kept: int) -> None:
        self.parts: dict[str, str | None] = {}
        self.kept = kept  # ~250 B each: bounded however many users write

    def __getitem__(self, ids: str) -> str | None:
        try:
            return self.parts[ids]
        except KeyError:
            return self.fill(ids)

    def fill(self, ids: str) -> str | None:
        """The part of ``ids`` (a miss), made and kept."""
        fields = ids.split("\0")
        said = None
        if len(fields) == 3 and plain("".join(fields)):
            user, chat, platform = fields
            said = f'"user":"{user}","chat":"{chat}","platform":"{platform}"'
        if len(self.parts) >= self.kept:
            self.parts.clear()
        self.parts[ids] = said
        return said

    def __len__(self) -> int:
        return len(self.parts)

    def clear(self) -> None:
        self.parts.clear()


SAID_IDS = IdsParts(10_000)  # plans.run subscripts SAID_IDS.parts inline


def joined_ids(user: str, chat: str, platform: str) -> str:
    """The key of :data:`SAID_IDS` (the engine joins it inline)."""
    return f"{user}\0{chat}\0{platform}"


def said_escaped(text: str, q: str, message: Message) -> str | None:
    """What the message brings, escaped as the general line escapes it (None: orjson
    refuses a value, the general line's way writes it)."""
    try:
        fields = {
            "text": text,
            "question": q,
            "user": message.user,
            "chat": message.chat,
            "platform": message.platform,
        }
        return orjson.dumps(fields)[1:-1].decode()
    except TypeError:
        return None
