"""What a message brings to a FAQ answer's ``run.done`` line (:mod:`tmy.engine.plans`):
its text, QUESTION, user, chat and platform as JSON — written as they are when nothing in
them needs escaping (:func:`plain`), the ids' part kept per chat (:func:`said_ids`), and
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


# joined ids ("user\0chat\0platform") -> their part of the line as written when they are
# plain, or None (orjson escapes them): a chat's ids come again and again (plans.run reads
# it inline: cleared in place, never replaced)
SAID_IDS: dict[str, str | None] = {}
SAID_IDS_KEPT = 10_000  # ~250 B each: bounded however many users write


def joined_ids(user: str, chat: str, platform: str) -> str:
    """The key :func:`said_ids` keeps its answers under (the engine joins it inline)."""
    return f"{user}\0{chat}\0{platform}"


def said_ids(ids: str, message: Message) -> str | None:
    """``"user":…,"chat":…,"platform":…`` of ``message`` as a ``run.done`` line writes them
    when they are :func:`plain` (else None), kept per :func:`joined_ids` key: the check
    looks at every character (~30 instructions each), the kept part is one lookup and
    three fields fewer to splice per line.

    The key is unambiguous where it matters: with exactly two NULs it splits one way
    only; with more, some id holds a NUL — not printable — and every message under that
    key is answered None.
    """
    try:
        return SAID_IDS[ids]
    except KeyError:
        pass
    if len(SAID_IDS) >= SAID_IDS_KEPT:
        SAID_IDS.clear()
    user, chat, platform = message.user, message.chat, message.platform
    as_is = plain(f"{user}{chat}{platform}")
    said = f'"user":"{user}","chat":"{chat}","platform":"{platform}"' if as_is else None
    SAID_IDS[ids] = said
    return said


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
