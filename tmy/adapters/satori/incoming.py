"""A message's ``content`` (Satori elements) as the rules see it: text, attachments, the
bot's mention, the quoted message.

=====================================  ==================================================
element                                becomes
=====================================  ==================================================
``<at id=BOT>``                        ``mentions_bot``; removed from the text
``<at id=… name=…>``                   ``@name`` (``@id`` without a name)
``<at type="all">`` / ``"here"``       ``@all`` / ``@here``; ``<at role=…>`` ``@role``
``<sharp id=… name=…>``                ``#name``
``<a href>text</a>``                   ``text (href)`` (just ``href`` without text)
``<img>`` ``<audio>`` ``<video>``      an :class:`Attachment` (image, voice, video, file),
``<file>``                             ``[image]`` … left in the text where it stood
``<quote id=…>``                       ``reply_to`` (the text leaves it out); its
                                       ``<author>`` and text are REPLY_TO
``<br>``, ``<p>``                      line breaks
``<face>``, ``<x:face>``               ``[face]`` (a platform emoji, no attachment)
``<b>``, ``<i>``, ``<code>``, …        their text (styles are dropped)
=====================================  ==================================================

Media URLs may be ``internal:`` links or behind the server's proxy (see
:mod:`tmy.adapters.satori.media`), and a platform's own links often expire, so every
attachment is marked ``inline``: a step that hands it on downloads it first.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass, field
from typing import Any

from tmy.adapters.base import placeholder
from tmy.adapters.satori.elements import Element, parse
from tmy.message import Attachment

MEDIA = {"img": "image", "image": "image", "audio": "voice", "video": "video", "file": "file"}
BLOCKS = frozenset({"p", "message"})  # rendered on lines of their own


@dataclass(slots=True)
class Content:
    """What one message's elements say."""

    text: str = ""
    mentions_bot: bool = False
    attachments: list[Attachment] = field(default_factory=list)
    reply_to: str | None = None
    quoted: dict[str, Any] | None = None  # {text, user, id} when the quote carries them


def read_content(content: str, self_id: str) -> Content:
    """``content`` read for the bot ``self_id`` (see the module docstring)."""
    out = Content()
    text = _render(parse(content or ""), self_id, out)
    if out.mentions_bot:
        text = text.strip().lstrip(",:，：")
    out.text = text.strip()
    return out


def quote_of(element: Element, self_id: str) -> dict[str, Any]:
    """REPLY_TO of a ``<quote>``: its author's id and its own text (no nested quote)."""
    author = next((c for c in element.children if c.type == "author"), None)
    body = [c for c in element.children if c.type != "author"]
    inner = Content()
    text = _render(body, self_id, inner).strip()
    return {"text": text, "user": author.attr("id") if author else "", "id": element.attr("id")}


def _render(elements: list[Element], self_id: str, out: Content) -> str:
    parts: list[str] = []
    for element in elements:
        parts.append(_one(element, self_id, out))
    return "".join(parts)


def _one(element: Element, self_id: str, out: Content) -> str:
    kind = element.type
    if kind == "text":
        return element.text
    if kind == "at":
        return _at(element, self_id, out)
    if kind == "sharp":
        return "#" + (element.attr("name") or element.attr("id"))
    if kind in MEDIA:
        attachment = _attachment(MEDIA[kind], element)
        out.attachments.append(attachment)
        return placeholder([attachment])
    if kind == "quote":
        if out.reply_to is None and element.attr("id"):
            out.reply_to = element.attr("id")
            out.quoted = quote_of(element, self_id)
        return ""
    if kind == "author":
        return ""
    if kind == "br":
        return "\n"
    if kind == "face" or kind.endswith(":face"):
        return "[face]"
    inner = _render(element.children, self_id, out)
    if kind == "a":
        href = element.attr("href")
        if not inner.strip():
            return href
        return f"{inner} ({href})" if href and href != inner.strip() else inner
    if kind in BLOCKS:
        return f"\n{inner.strip()}\n"
    return inner


def _at(element: Element, self_id: str, out: Content) -> str:
    who, special = element.attr("id"), element.attr("type")
    if who and who == self_id:
        out.mentions_bot = True
        return ""
    if special in ("all", "here"):
        return "@" + special
    if element.attr("role") and not who:
        return "@" + (element.attr("name") or element.attr("role"))
    return "@" + (element.attr("name") or who)


def _attachment(kind: str, element: Element) -> Attachment:
    src = element.attr("src") or element.attr("url")
    name = element.attr("title") or element.attr("name")
    mime = element.attr("mime") or element.attr("type")
    if "/" not in mime:
        mime = (mimetypes.guess_type(name)[0] or "") if "." in name else ""
    size = element.attr("size")
    return Attachment(
        kind,
        url=src if src.startswith(("http://", "https://", "internal:")) else "",
        file_id=element.attr("id") or element.attr("file-id") or element.attr("fileId"),
        size=int(size) if size.isascii() and size.isdigit() and len(size) < 20 else None,
        mime=mime,
        name=name,
        inline=bool(src),
    )
