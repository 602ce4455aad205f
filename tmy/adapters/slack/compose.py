"""A reply's text and structured parts (:class:`tmy.message.Outgoing`) as Slack messages.

* **text**: escaped (:func:`~tmy.adapters.slack.text.escape`) and split into
  messages of at most 4,000 characters as sent, mentions and links included
  (``chat.postMessage``);
* **mentions** → ``<@U…>`` before the text (Slack shows the name and notifies);
* **images**: an http(s) URL → an ``image`` block (Slack fetches it); a
  ``data:`` URL or a file under ``media/`` in the rules directory
  (:func:`tmy.media.reply_file`) → uploaded (``files.uploadV2``:
  ``files.getUploadURLExternal``, the upload, ``files.completeUploadExternal``)
  into the same channel and thread; **files** likewise uploaded, or a URL given
  as a link under the text;
* **buttons** → one Block Kit ``actions`` block per row: a button's ``data`` is
  its ``value`` (pressing it sends the ``button`` event), a ``url`` makes a
  link button. Block Kit's limits are checked here (a button's text at most 75
  characters, its value 2,000, 25 buttons per row) and named in an
  :class:`~tmy.errors.AdapterError`.

When a message has blocks Slack shows the blocks, not ``text`` (that becomes the
notification), so the last text piece is repeated as ``section`` blocks above
the images and buttons. Slack refuses the whole message when it cannot fetch an
image block's URL (``invalid_blocks``, "downloading image failed"); it is then
sent again with that picture as a link (:func:`without_images`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tmy.adapters.replymedia import read_local
from tmy.adapters.slack.text import MAX_SECTION, MAX_TEXT, USER_ID, escape, split_text
from tmy.errors import AdapterError
from tmy.media import MediaError
from tmy.message import Button
from tmy.message import Outgoing as Parts

MAX_UPLOAD = 50 * 1024 * 1024  # bytes of one uploaded picture or file
MAX_BUTTON_TEXT = 75  # characters of a button's label (Block Kit)
MAX_BUTTON_VALUE = 2000  # characters of a button's value (Block Kit)
MAX_ROW = 25  # elements of one actions block (Block Kit)
POST, UPLOAD = "chat.postMessage", "files.uploadV2"


@dataclass(slots=True)
class Piece:
    """One Slack call of a reply: a message (``chat.postMessage``) or an upload."""

    method: str  # POST or UPLOAD
    text: str = ""
    blocks: list[dict[str, Any]] | None = None
    data: bytes = b""
    filename: str = ""


def compose(text: str, parts: Parts | None, *, rules_dir: Path | None = None) -> list[Piece]:
    """The calls that send ``text`` with ``parts``; AdapterError when a part is unusable."""
    parts = parts or Parts()
    prefix = " ".join(f"<@{_user(u)}>" for u in parts.mentions)
    links: list[str] = []
    blocks: list[dict[str, Any]] = []
    uploads: list[Piece] = []
    for source in parts.images:
        if _is_url(source):
            blocks.append({"type": "image", "image_url": source.strip(), "alt_text": "image"})
        else:
            uploads.append(_upload("image", source, rules_dir))
    for source in parts.files:
        if _is_url(source):
            links.append(f"<{source.strip()}>")
        else:
            uploads.append(_upload("file", source, rules_dir))
    blocks += [_actions(row, i) for i, row in enumerate(parts.buttons) if row]
    room = MAX_TEXT - (len(prefix) + 1 if prefix else 0)  # what is sent counts, escaped
    chunks = split_text(escape(text), room, escaped=True)
    if links:
        tail = "\n".join(links)
        if chunks and len(chunks[-1]) + 1 + len(tail) <= room:
            chunks[-1] += "\n" + tail
        else:
            chunks += split_text(tail, room)
    if prefix:
        chunks = [f"{prefix} {chunks[0]}" if chunks else prefix, *chunks[1:]]
    pieces = [Piece(POST, c) for c in chunks]
    if blocks:
        if pieces:
            last = pieces[-1]
            sections = [_section(s) for s in split_text(last.text, MAX_SECTION, escaped=True)]
            last.blocks = sections + blocks
        else:
            pieces.append(Piece(POST, _fallback(parts), blocks))
    return pieces + uploads


def without_images(piece: Piece) -> bool:
    """``piece`` with its image blocks turned into links (a section above its buttons), after
    Slack refused it for an image it could not fetch (``invalid_blocks``: it refuses the
    whole message then, text included); False when it had no image block to drop."""
    blocks = piece.blocks or []
    images = [b for b in blocks if b.get("type") == "image"]
    if not images:
        return False
    links = _section("\n".join(f"<{b.get('image_url')}>" for b in images))
    kept = [b for b in blocks if b.get("type") != "image"]
    at = next((i for i, b in enumerate(kept) if b.get("type") == "actions"), len(kept))
    piece.blocks = [*kept[:at], links, *kept[at:]]
    return True


def _user(user: str) -> str:
    uid = str(user).strip()
    if not USER_ID.fullmatch(uid):
        raise AdapterError(f"slack: a mention must be a user id like U012AB3CD (got {user!r})")
    return uid


def _is_url(source: str) -> bool:
    return str(source).strip().startswith(("http://", "https://"))


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _fallback(parts: Parts) -> str:
    """The notification text of a message of blocks only."""
    if parts.images:
        return "[image]"
    labels = [b.text for row in parts.buttons for b in row]
    return escape(" / ".join(labels)) or "[buttons]"


def _actions(row: list[Button], index: int) -> dict[str, Any]:
    if len(row) > MAX_ROW:
        raise AdapterError(f"slack: a row has {len(row)} buttons; Slack allows {MAX_ROW}")
    return {
        "type": "actions",
        "block_id": f"tmy_row_{index}",
        "elements": [_button(b, index, i) for i, b in enumerate(row)],
    }


def _button(button: Button, row: int, column: int) -> dict[str, Any]:
    label = button.text.strip()
    if not label:
        raise AdapterError("slack: a button needs a text")
    if len(label) > MAX_BUTTON_TEXT:
        raise AdapterError(
            f"slack: the text of button {label[:30]!r}… is {len(label)} characters; "
            f"Slack allows {MAX_BUTTON_TEXT}"
        )
    element: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": f"tmy_{row}_{column}",  # unique within the message, as Slack requires
    }
    if button.url:
        element["url"] = button.url
        return element
    value = button.data or button.text
    if len(value) > MAX_BUTTON_VALUE:
        raise AdapterError(
            f"slack: the data of button {label!r} is {len(value)} characters; Slack allows "
            f"{MAX_BUTTON_VALUE} (use a short key and look the rest up in the rule)"
        )
    element["value"] = value
    return element


def _upload(name: str, source: str, rules_dir: Path | None) -> Piece:
    """An upload piece: a data: URL or a file under media/ as bytes."""
    source = str(source).strip()
    try:
        media, filename = read_local(source, rules_dir, MAX_UPLOAD, name)
    except MediaError as exc:
        raise AdapterError(f"slack: cannot send {name} {source[:60]!r}: {exc}") from exc
    return Piece(UPLOAD, data=media.data, filename=filename)
