"""Slack's text: its ``<…>`` markup read into plain words, and replies cut into messages.

**Reading.** Slack writes mentions and links as ``<@U123>``, ``<@U123|ann>``,
``<#C123|general>``, ``<!here>``, ``<!subteam^S1|@team>`` and
``<https://x|label>``, and escapes ``&``, ``<`` and ``>`` as HTML entities.
:func:`strip_bot_mention` removes the bot's own mention (it is an address, not
part of the question, as on every other platform); :func:`readable` shows the
rest the way a Slack user sees them (``@Ann``, ``#general``, ``@here``, a
link's label), so a trigger like ``"ask *"`` and an LLM read what people wrote.

**Writing.** A reply is sent as text with ``&``, ``<`` and ``>`` escaped
(:func:`escape`): a model's answer containing ``<!channel>`` must not notify a
whole channel; mentions are added by :mod:`~tmy.adapters.slack.compose` as
real ``<@U…>`` markup. :func:`split_text` cuts a reply into messages of at
most :data:`MAX_TEXT` characters. Slack truncates a message's ``text`` at
40,000 characters but recommends at most 4,000 and may itself break a longer
one into several messages at arbitrary places; cutting at 4,000 here, on a line
break or a space, keeps every piece whole and readable. The 4,000 count the text
as sent, escaped and with its mentions (an answer full of ``<`` and ``&`` grows
up to five times when escaped).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tmy.adapters.splitting import split_verbatim

MAX_TEXT = 4000  # characters per message (Slack's recommendation; it truncates at 40,000)
MAX_SECTION = 3000  # characters in one section block's text (Block Kit's limit)

_USER = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^>]*))?>")
_MARKUP = re.compile(r"<([^<>]+)>")
USER_ID = re.compile(r"[UW][A-Z0-9]+")  # as incoming mentions read them (<@U…>)


def escape(text: str) -> str:
    """``text`` as Slack shows it literally (its three control characters escaped)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mentioned_users(text: str) -> list[str]:
    """The user ids ``text`` mentions, in order, each once."""
    return list(dict.fromkeys(m.group(1) for m in _USER.finditer(text)))


def strip_bot_mention(text: str, bot_user: str) -> tuple[str, bool]:
    """(``text`` without the bot's ``<@BOT>`` mentions, whether there was one)."""
    if not bot_user or f"<@{bot_user}" not in text:
        return text, False
    found = False

    def cut(match: re.Match[str]) -> str:
        nonlocal found
        if match.group(1) != bot_user:
            return match.group(0)
        found = True
        return "\0"

    marked = _USER.sub(cut, text)
    if not found:
        return text, False
    # "<@BOT> hi" -> "hi"; "hi <@BOT> there" -> "hi there"; "<@BOT>, hi" -> "hi"
    marked = re.sub(r"^\s*\0[\s,:，：]*", "", marked)
    marked = re.sub(r"[ \t]*\0[ \t]*", " ", marked)
    return marked.replace("\0", "").strip(), True


def readable(text: str, names: Mapping[str, str]) -> str:
    """``text`` with Slack's markup shown as a user reads it (see module doc)."""

    def show(match: re.Match[str]) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith("@"):
            user = target[1:]
            return "@" + (names.get(user) or label or user)
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            if target.startswith("!subteam^"):
                return label or "@team"
            if label:
                return label
            word = target[1:].split("^", 1)[0]
            return "@" + word if word in ("here", "channel", "everyone") else word
        if label:
            return label
        return target.removeprefix("mailto:")

    return unescape(_MARKUP.sub(show, text))


def split_text(text: str, limit: int = MAX_TEXT, *, escaped: bool = False) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut on a line break in the
    second half of a piece, else a space there, else exactly at the limit; blank
    pieces are dropped (Slack refuses an empty message). ``escaped``: ``text`` is
    already escaped by :func:`escape` (the limit counts what Slack receives) and a cut at
    the limit never falls inside an ``&amp;``/``&lt;``/``&gt;``."""
    return split_verbatim(text, limit, hard_cut=_before_entity if escaped else None)


def _before_entity(window: str) -> int:
    """Where to cut escaped ``window`` at its end: before an entity it would halve."""
    start = window.rfind("&", max(1, len(window) - 4))  # an entity is at most 5 long
    return start if start != -1 and ";" not in window[start:] else len(window)
