"""A reply as Matrix ``m.room.message`` contents: text pieces, pills, pictures and files.

* **Text** is split (:func:`tmy.adapters.matrix.text.split_text`) into ``m.text``
  events. Every event carries ``m.mentions`` (empty when it mentions nobody), as the
  spec recommends, so that a reply never pings anyone by accident.
* **Mentions** (``Outgoing.mentions``: Matrix user ids) become pills in front of
  the first piece: the user's display name linking to ``https://matrix.to/#/<user>``
  in an HTML ``formatted_body``, the names in ``body`` and the ids in
  ``m.mentions.user_ids``, which is what notifies them. That first event carries
  its text twice (``body`` and escaped HTML): when its content passes
  :data:`MAX_CONTENT_BYTES` as JSON, its text is cut smaller and the rest follows.
* **Pictures and files** (an http(s) URL, a ``data:`` URL or a file under the
  rules' ``media/`` folder, :func:`tmy.media.load`) are uploaded to the
  homeserver's media repository when their turn comes and sent as ``m.image`` /
  ``m.file`` events after the text.
  A source that is already the homeserver's (an ``mxc://`` URI, or the download
  URL of an attachment a user sent, from ``IMAGES``) is sent as it is, not
  downloaded and uploaded again.
* **Buttons** do not exist in Matrix: a link button becomes a line ``text: url``
  under the text; a data button is left out (logged once per reply).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tmy.adapters.matrix.text import pills, split_text
from tmy.adapters.replymedia import MediaLoader as ReplyMediaLoader
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Outgoing

log = get_logger("tmy.adapter.matrix")

MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # matrix.org's m.upload.size; a server may allow less
# an event's content as JSON; the event (content, ids, hashes, signatures) may be 65,536
MAX_CONTENT_BYTES = 56_000


@dataclass(slots=True)
class Piece:
    """One event of a reply: its content, or (``source``) a picture/file to upload first."""

    content: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # image/file source, loaded and uploaded when it is sent
    kind: str = "text"  # text | image | file


def compose(
    text: str, parts: Outgoing | None, names: Mapping[str, str] | None = None
) -> list[Piece]:
    """The events that send ``text`` with ``parts`` (mentions, pictures, files, links)."""
    parts = parts or Outgoing()
    names = names or {}
    links = [f"{b.text}: {b.url}" for row in parts.buttons for b in row if b.url]
    if any(not b.url for row in parts.buttons for b in row):
        log.info("matrix.buttons_left_out", reason="Matrix has no buttons")
    if links:
        text = "\n".join([text.rstrip(), *links]).strip()
    users = [str(u).strip() for u in parts.mentions if str(u).strip()]
    for user in users:
        if not (user.startswith("@") and ":" in user):
            raise AdapterError(
                f"matrix: a mention must be a user id like @ann:example.org (got {user!r})"
            )
    pieces = [Piece(_text(p)) for p in split_text(text)]
    if users:
        pieces[:1] = _pilled([(u, names.get(u, "")) for u in users], pieces[:1])
    pieces += [Piece(source=s, kind="image") for s in parts.images]
    pieces += [Piece(source=s, kind="file") for s in parts.files]
    return pieces


def _pilled(mentions: list[tuple[str, str]], first: list[Piece]) -> list[Piece]:
    """The first text piece with pills for ``mentions`` in front, as one event or, when
    its HTML makes the content too big (``"`` is ``&quot;`` there and ``\\"`` in the
    JSON: 8 bytes for one character), as its text cut smaller, the pills on the first."""
    text = first[0].content["body"] if first else ""
    rest: list[Piece] = []
    while True:
        body, rich = pills(mentions, text)
        content = _text(body)
        content.update(format="org.matrix.custom.html", formatted_body=rich)
        content["m.mentions"] = {"user_ids": [user for user, _ in mentions]}
        if content_size(content) <= MAX_CONTENT_BYTES or len(text) < 2:
            return [Piece(content), *rest]
        halves = split_text(text, limit=(len(text) + 1) // 2)
        text, rest = halves[0], [*(Piece(_text(p)) for p in halves[1:]), *rest]


def content_size(content: dict[str, Any]) -> int:
    """Bytes of ``content`` as canonical JSON (what the homeserver's size limit counts)."""
    return len(json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode())


def _text(body: str) -> dict[str, Any]:
    return {"msgtype": "m.text", "body": body, "m.mentions": {}}


def media_content(
    kind: str, mxc: str, name: str, mime: str = "", size: int | None = None
) -> dict[str, Any]:
    """The ``m.image`` / ``m.file`` content for the media at ``mxc``."""
    info: dict[str, Any] = {"mimetype": mime} if mime else {}
    if size is not None:
        info["size"] = size
    return {
        "msgtype": "m.image" if kind == "image" else "m.file",
        "body": name,
        "filename": name,
        "url": mxc,
        "info": info,
        "m.mentions": {},
    }


def mxc_of(source: str, base: str) -> str:
    """The ``mxc://`` URI ``source`` already is (or downloads, being a URL under the
    homeserver's download ``base``: an attachment a rule sends back): "" otherwise."""
    if source.startswith("mxc://"):
        return source
    prefix = base.rstrip("/") + "/"
    if base and source.startswith(prefix):
        rest = source[len(prefix) :].split("?", 1)[0]
        if rest.count("/") == 1 and all(rest.split("/")):
            return "mxc://" + rest
    return ""


class MediaLoader(ReplyMediaLoader):
    """A reply's picture/file sources loaded for upload (see the base), at most
    matrix.org's upload size."""

    max_bytes = MAX_UPLOAD_BYTES
