"""OneBot v11 messages: CQ-code strings and segment arrays in, readable text out.

A OneBot implementation reports a message either as an **array of segments**
(``[{"type": "text", "data": {"text": "hi"}}, {"type": "at", …}]``) or as a
**CQ-code string** (``hi[CQ:at,qq=10001]``), depending on its
``messagePostFormat`` setting; both become the same segment list here.

Escaping follows the OneBot 11 spec (message/string.md): in plain text
``& [ ]`` are written ``&amp; &#91; &#93;``, inside a CQ code's parameter
values ``,`` is also written ``&#44;``. Unescaping is one pass, so
``&amp;#91;`` reads back as the literal ``&#91;`` and never as ``[``.

What rules see (:func:`read_message`): the text segments joined; an ``at`` of
the bot removed and recorded as a mention (``@all`` is not a mention of the
bot: it addresses everyone, and answering every @all would make the bot noisy
in big groups); a ``reply`` removed and recorded as ``reply_to`` (and as a
mention when it quotes a message the bot sent), together with the ``at`` of the
quoted author that QQ clients insert right after it; any other segment as a
readable placeholder such as ``[image]`` or ``@10001``. The segments themselves
stay in ``Message.raw``.
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

# Longest text tmy puts in one QQ message; longer replies go out as several
# messages (split at line breaks where possible), each paced like any send.
MAX_TEXT_PER_MESSAGE = 3000

_UNESCAPE = {"&amp;": "&", "&#91;": "[", "&#93;": "]", "&#44;": ","}
_ESCAPED = re.compile(r"&(?:amp|#91|#93|#44);")
# [CQ:<type>(,<key>=<value>)*]: the type runs to the first ',' or ']'; values
# hold no raw ',' or ']' (they are escaped), so neither may appear in a piece.
_CQ_CODE = re.compile(r"\[CQ:([^,\[\]]+)((?:,[^,\[\]]*)*)\]")

Segment = dict[str, Any]  # {"type": str, "data": {str: str}}


def unescape(text: str) -> str:
    """CQ-code unescaping in a single pass (``&amp; &#91; &#93; &#44;``)."""
    if "&" not in text:
        return text
    return _ESCAPED.sub(lambda m: _UNESCAPE[m.group()], text)


def escape(text: str, *, comma: bool = False) -> str:
    """CQ-code escaping: ``& [ ]`` always, ``,`` too inside a parameter value."""
    text = text.replace("&", "&amp;").replace("[", "&#91;").replace("]", "&#93;")
    return text.replace(",", "&#44;") if comma else text


def parse_cq(text: str) -> list[Segment]:
    """A CQ-code string as the segment array the implementation could have sent instead."""
    segments: list[Segment] = []
    start = 0
    for code in _CQ_CODE.finditer(text):
        if code.start() > start:
            segments.append(_text(unescape(text[start : code.start()])))
        data: dict[str, str] = {}
        for piece in code.group(2).split(","):
            if piece:
                key, _, value = piece.partition("=")
                data[key] = unescape(value)
        segments.append({"type": code.group(1), "data": data})
        start = code.end()
    if start < len(text):
        segments.append(_text(unescape(text[start:])))
    return segments


def segments_of(message: Any) -> list[Segment]:
    """The event's ``message`` in either format as clean segments (malformed ones dropped)."""
    if isinstance(message, str):
        return parse_cq(message)
    if not isinstance(message, list):
        return []
    out: list[Segment] = []
    for seg in message:
        if not isinstance(seg, dict) or not isinstance(seg.get("type"), str):
            continue
        data = seg.get("data")
        data = data if isinstance(data, dict) else {}
        # numbers where the spec says strings (qq: 10001) are common; compare as text
        out.append({
            "type": seg["type"],
            "data": {k: v if type(v) is str else _str(v) for k, v in data.items()},
        })  # fmt: skip
    return out


@dataclass(slots=True)
class Parsed:
    """What rules need from a message's segments."""

    text: str
    mentions_bot: bool = False
    reply_to: str | None = None


def read_message(segments: list[Segment], self_id: str, sent_ids: Container[str] = ()) -> Parsed:
    """Text for matching, plus whether the bot was addressed and which message is quoted.

    ``sent_ids`` are ids of messages this bot account sent: a reply quoting one
    of them addresses the bot.
    """
    parsed = Parsed("")
    parts: list[str] = []
    after_reply = trim_next = False
    for seg in segments:
        kind, data = seg["type"], seg["data"]
        if kind == "text":
            text = data.get("text", "")
            if trim_next and (not parts or parts[-1][-1:].isspace()):
                text = text.lstrip()  # "hi @bot there" reads "hi there", not "hi  there"
            parts.append(text)
        elif kind == "reply":
            parsed.reply_to = data.get("id") or None
            if parsed.reply_to is not None and parsed.reply_to in sent_ids:
                parsed.mentions_bot = True
            after_reply = True
            continue
        elif kind == "at":
            qq = data.get("qq", "")
            if qq == self_id:
                parsed.mentions_bot = trim_next = True
                after_reply = False
                continue
            if not after_reply:  # the quoted author's @ that QQ adds after a reply: drop it
                parts.append("@all" if qq == "all" else f"@{data.get('name') or qq}")
        else:
            parts.append(f"[{kind}]")
        after_reply = trim_next = False
    parsed.text = "".join(parts).strip()
    return parsed


def reply_segments(
    text: str, *, quote: str | int | None = None, at: str | int | None = None
) -> list[Segment]:
    """The outgoing message: optional quote and @, then the text."""
    out: list[Segment] = []
    if quote is not None:
        out.append({"type": "reply", "data": {"id": str(quote)}})
    if at is not None:
        out.append({"type": "at", "data": {"qq": str(at)}})
        text = " " + text
    out.append(_text(text))
    return out


def split_text(text: str, limit: int = MAX_TEXT_PER_MESSAGE) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut at line breaks when possible."""
    chunks: list[str] = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit + 1)
        if cut <= 0:
            cut = limit
        chunks.append(text[:cut])
        text = text[cut + 1 :] if text[cut] == "\n" else text[cut:]
    if text or not chunks:
        chunks.append(text)
    return chunks


def _text(text: str) -> Segment:
    return {"type": "text", "data": {"text": text}}


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
