"""How a reply becomes Feishu messages: text, rich text for mentions, cards for buttons.

* **text** → ``msg_type: text``, split into pieces of at most :data:`MAX_TEXT`
  characters (on a line break in the piece's second half, else a space). Feishu
  caps a text message's request body at 150 KB and a rich-text one at 30 KB;
  :data:`MAX_TEXT` keeps the larger (``post``) piece under 30 KB even when every
  character costs 4 bytes (a CJK character is 3 in UTF-8; a quote becomes
  ``\\\\\\"`` once the content JSON is itself put in the JSON body).
* **mentions** → the first piece is a ``post`` whose first paragraph starts
  with an ``at`` element per user (``<at user_id="ou_…">`` in Feishu's words).
* **buttons** → the last piece is an ``interactive`` card: its text, and an
  ``action`` row per button row (a button's ``data`` comes back as
  ``{"data": …}`` in ``card.action.trigger``; a ``url`` button opens the link).
* **images** / **files** → each its own ``image`` / ``file`` message; the bytes
  (an http(s) URL, a ``data:`` URL or a file under the rules' ``media/``) are
  uploaded when the piece is sent (``sending``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tmy.adapters.splitting import split_trimmed
from tmy.errors import AdapterError
from tmy.message import Button, Outgoing

MAX_TEXT = 6000  # characters per message (see the module docstring)


@dataclass(slots=True)
class Piece:
    """One message to send: its ``msg_type`` and ``content``; ``upload`` a source to
    upload first (then ``content`` gets its ``image_key``/``file_key``)."""

    msg_type: str
    content: dict[str, Any] = field(default_factory=dict)
    upload: str = ""


def split_text(text: str, limit: int = MAX_TEXT) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut at a line break or a space
    in the second half of a piece when there is one."""
    return split_trimmed(text, limit)


def compose(
    text: str, parts: Outgoing | None, names: Mapping[str, str] | None = None
) -> list[Piece]:
    """The pieces of one reply, in sending order (text first, then pictures and files)."""
    chunks = split_text(text)
    pieces = [Piece("text", {"text": chunk}) for chunk in chunks]
    if parts is None:
        return pieces
    if parts.mentions:
        first = chunks[0] if chunks else ""
        post = _post(first, parts.mentions, names or {})
        if pieces:
            pieces[0] = post
        else:
            pieces.append(post)
    if parts.buttons:
        if pieces and pieces[-1].msg_type == "text":  # the card carries the last text
            pieces[-1] = Piece("interactive", card(chunks[-1], parts.buttons))
        else:  # no text, or it went out as the mention's rich text: the buttons alone
            pieces.append(Piece("interactive", card("", parts.buttons)))
    pieces += [Piece("image", upload=source) for source in parts.images]
    pieces += [Piece("file", upload=source) for source in parts.files]
    return pieces


def _post(text: str, mentions: list[str], names: Mapping[str, str]) -> Piece:
    line: list[dict[str, Any]] = []
    for user in mentions:
        user = str(user).removeprefix("private:")
        if not user.startswith("ou_"):
            raise AdapterError(f"feishu: a mention must be a user's open_id (ou_…), got {user!r}")
        line.append({"tag": "at", "user_id": user, "user_name": names.get(user, "")})
    lines = text.split("\n") if text else [""]
    line.append({"tag": "text", "text": " " + lines[0] if lines[0] else ""})
    paragraphs = [line] + [[{"tag": "text", "text": rest}] for rest in lines[1:]]
    return Piece("post", {"zh_cn": {"title": "", "content": paragraphs}})


def card(text: str, rows: list[list[Button]]) -> dict[str, Any]:
    """An interactive card: ``text`` and a row of buttons per row."""
    elements: list[dict[str, Any]] = []
    if text.strip():
        elements.append({"tag": "div", "text": {"tag": "plain_text", "content": text}})
    for row in rows:
        actions = []
        for button in row:
            item: dict[str, Any] = {
                "tag": "button",
                "text": {"tag": "plain_text", "content": button.text},
                "type": "default",
            }
            if button.url:
                item["url"] = button.url
            else:
                item["value"] = {"data": button.data}
            actions.append(item)
        if actions:
            elements.append({"tag": "action", "actions": actions})
    if not elements:
        raise AdapterError("feishu: a card needs text or buttons")
    return {"config": {"wide_screen_mode": True}, "elements": elements}
