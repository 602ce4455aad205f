"""Matrix text: splitting long replies, reading mentions and reply fallbacks, pills out.

**The limit.** A Matrix event may be at most 65,536 bytes as canonical JSON
(UTF-8), signatures, hashes and the homeserver's own fields included. A reply
piece is at most :data:`MAX_TEXT` characters *and* :data:`MAX_TEXT_BYTES` bytes
of UTF-8, so a plain piece stays far under it even when JSON escapes it. A
piece with pills (an HTML ``formatted_body`` beside the ``body``) carries its text
twice and HTML-escaped (``&`` is ``&amp;``, ``"`` is ``&quot;``):
:mod:`~tmy.adapters.matrix.compose` measures that event and cuts its text smaller
when needed. Pieces break at a line break in their second half when there
is one, else at a space.

**Reading.** Clients that still send the rich-reply fallback start the body with
the quoted message as ``> <@user:server> text`` lines (``> * <@user:server> waves``
for an emote) and an empty line: it is
cut off (:func:`strip_reply_fallback`), so rules see what the user wrote. A
mention of the bot in the text is removed (:func:`strip_mention`): its user id
anywhere; its display name where the message addresses the bot — at the start
(``Tmy: hi``, ``Tmy, hi``) or as a pill's text (the HTML links to the bot, as
Element's pills do). A display name elsewhere is left alone and is no mention:
a bot called "Help" must not take "Help me with this" as talking to it, nor
lose the word.
"""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import unquote

from tmy.adapters.splitting import split_trimmed

MAX_TEXT = 8000  # characters per message piece
MAX_TEXT_BYTES = 24_000  # UTF-8 bytes per message piece (see the module docstring)
MATRIX_TO = "https://matrix.to/#/"

_FALLBACK_LINE = re.compile(r"^>( |$)")
_PILL = re.compile(r"""href\s*=\s*["'](?:https://matrix\.to/#/|matrix:u/)([^"'?]+)""", re.I)


def split_text(text: str, limit: int = MAX_TEXT, max_bytes: int = MAX_TEXT_BYTES) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters and ``max_bytes`` UTF-8 bytes."""
    return split_trimmed(text, limit, lambda rest: _fit(rest, limit, max_bytes))


def _fit(text: str, limit: int, max_bytes: int) -> int:
    """How many leading characters of ``text`` fit both limits."""
    cut = min(len(text), limit)
    while len(text[:cut].encode("utf-8")) > max_bytes:
        over = len(text[:cut].encode("utf-8")) - max_bytes
        cut -= max(1, over // 4)
    return cut


def strip_reply_fallback(body: str) -> str:
    """``body`` without the ``> <@user> quoted`` lines a rich reply starts with."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith(("> <", "> * <")):  # "> * <@a:x>": an emote's
        return body
    i = 0
    while i < len(lines) and _FALLBACK_LINE.match(lines[i]):
        i += 1
    if i < len(lines) and lines[i] == "":
        i += 1
    return "\n".join(lines[i:])


def strip_mention(
    body: str, user_id: str, display_name: str = "", *, pills: int = 0, addressed: bool = False
) -> tuple[str, bool]:
    """``body`` without the bot's mentions, and whether it had one (see the module doc).

    The user id anywhere; the display name at the start as an address (``Tmy: ``,
    ``tmy, ``), or at the start before a space when the event names the bot otherwise
    (``addressed``: ``m.mentions``; or ``pills`` > 0), and as many more times as the
    HTML holds pills to the bot. Elsewhere a display name is a word like any other."""
    found = False
    if user_id:
        own = re.compile(r"(?<![\w@])@?" + re.escape(user_id.lstrip("@")) + r"(?!\w|[.:\-]\w)[:,]?")
        body, count = own.subn("", body)
        found = count > 0
    name = display_name.strip()
    if name:
        after = r"\s*[:,]\s*|\s+|$" if addressed or pills else r"\s*[:,]\s*"
        start = re.compile(r"^\s*@?" + re.escape(name) + r"(?!\w)(?:" + after + ")", re.IGNORECASE)
        body, first = start.subn("", body, count=1)
        more = pills - first
        if more > 0:
            pill = re.compile(r"(?<![\w@])@?" + re.escape(name) + r"(?!\w)[:,]?")
            body, count = pill.subn("", body, count=more)
            first += count
        found = found or first > 0
    if found:
        body = re.sub(r"[ \t]{2,}", " ", body)
        body = "\n".join(line.strip() for line in body.split("\n")).strip()
    return body, found


def count_pills(content: dict[str, Any], user_id: str) -> int:
    """How many pills (links to ``https://matrix.to/#/<user>`` or ``matrix:u/…``) to
    ``user_id`` an event's HTML ``formatted_body`` holds."""
    html_body = content.get("formatted_body")
    if not isinstance(html_body, str) or content.get("format") != "org.matrix.custom.html":
        return 0
    count = 0
    for link in _PILL.finditer(html_body):
        target = unquote(html.unescape(link.group(1)))
        count += ("@" + target.lstrip("@")) == user_id
    return count


def pills(mentions: list[tuple[str, str]], text: str) -> tuple[str, str]:
    """(body, formatted_body) of ``text`` preceded by pills for ``mentions`` (user, name)."""
    plain = " ".join(name or user for user, name in mentions)
    links = " ".join(
        f'<a href="{MATRIX_TO}{html.escape(user, quote=True)}">{html.escape(name or user)}</a>'
        for user, name in mentions
    )
    body = f"{plain} {text}".strip() if plain else text
    rich = html.escape(text).replace("\n", "<br/>")
    return body, f"{links} {rich}".strip() if links else rich
