"""A reply's structured parts (:class:`tmy.message.Outgoing`) as OneBot message segments.

* **images** → ``image`` segments after the text, in the same message: an
  ``http(s)`` URL is passed as ``file`` (the implementation downloads it; not
  when its host is internal, see :func:`localize`), a
  ``data:`` URL as ``base64://…``, a file path under ``media/`` in the rules
  directory is read (:func:`localize`, at most :data:`MAX_LOCAL_BYTES`) and sent
  as ``base64://…``. A source that cannot be had (outside ``media/``, too big,
  missing) becomes ``[image: name]`` in the text and a warning.
* **files** → ``upload_group_file {group_id, file, name}`` /
  ``upload_private_file {user_id, file, name}`` after the message (NapCat takes
  an ``http(s)`` URL or ``base64://`` as ``file``; a path is read as for
  images); when the implementation refuses, the text ``[file] name: URL`` goes
  out instead.
* **mentions** → ``at`` segments at the start (groups only);
  **reply_to** → a ``reply`` segment quoting that message (``""``: the message
  being answered).
* **buttons** → QQ has none for bots: a numbered list under the text
  (``1. Yes``; a link button as ``2. Docs: https://…``).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tmy.adapters.onebot.codec import Segment, reply_segments, split_text
from tmy.logs import get_logger
from tmy.media import MediaError, check_url, reply_file
from tmy.message import Button
from tmy.message import Outgoing as Parts
from tmy.redact import safe_url

log = get_logger("tmy.adapter.onebot")

MAX_LOCAL_BYTES = 8 * 1024 * 1024  # a reply's image or file read from the rules directory


@dataclass(frozen=True, slots=True)
class FileUpload:
    """One file to upload to the chat, and what to say instead when that is refused."""

    action: str  # upload_group_file | upload_private_file
    params: dict[str, Any]
    fallback: str


Piece = list[Segment] | FileUpload


def compose(
    where: dict[str, Any],
    text: str,
    parts: Parts | None = None,
    *,
    quote: Any = None,
    at: str | None = None,
    answering: str = "",
    local: dict[str, str] | None = None,
) -> list[Piece]:
    """The pieces one reply goes out as: ``send_msg`` segment lists, then file uploads.

    ``quote``/``at`` are the adapter's own (``quote_reply``, ``at_sender``);
    ``answering`` is the id of the message being answered (for ``reply_to: ""``);
    ``local`` the file paths :func:`localize` read, as ``base64://`` sources (``""``:
    a source it refused, sent as text instead).
    """
    local = local or {}
    group = where["message_type"] == "group"
    images: list[Segment] = []
    mentions: list[str] = []
    uploads: list[FileUpload] = []
    if parts is not None:
        if parts.reply_to is not None:
            quote = parts.reply_to or answering or None
        if group:
            # QQ numbers only: "all" would be an @everyone the rule never meant
            mentions = [str(m) for m in parts.mentions if str(m).isdigit() and str(m) != at]
        text = _with_buttons(text, parts.buttons)
        for source in parts.images:
            file = local[source] if source in local else segment_file(source)
            if not file:
                log.warning("onebot.image_unsupported", source=source[:200])
                text += f"\n[image: {_name(source)}]"
            else:
                images.append({"type": "image", "data": {"file": file}})
        for source in parts.files:
            file = local[source] if source in local else segment_file(source)
            if not file:
                log.warning("onebot.file_unsupported", source=source[:200])
                text += f"\n[file: {_name(source)}]"
            else:
                uploads.append(_upload(where, source, file))
    pieces: list[Piece] = []
    chunks = split_text(text.strip()) if text.strip() else []
    for i, chunk in enumerate(chunks):
        first = i == 0
        segs = reply_segments(chunk, quote=quote if first else None, at=at if first else None)
        if first and mentions:
            head = 1 if quote is not None else 0
            segs[head:head] = [{"type": "at", "data": {"qq": m}} for m in mentions]
            if at is None:
                segs[-1]["data"]["text"] = " " + segs[-1]["data"]["text"]
        pieces.append(segs)
    if images:
        if pieces:
            pieces[-1].extend(images)  # type: ignore[union-attr]
        else:
            head = [{"type": "reply", "data": {"id": str(quote)}}] if quote is not None else []
            at_all = [*([at] if at else []), *mentions]
            pieces.append([*head, *({"type": "at", "data": {"qq": m}} for m in at_all), *images])
    pieces.extend(uploads)
    return pieces


def segment_file(source: str) -> str | None:
    """What an image segment's ``file`` takes for ``source``, or None when it cannot be sent."""
    if source.startswith(("http://", "https://", "base64://")):
        return source
    if source.startswith("data:"):
        header, _, payload = source.partition(",")
        if header.endswith(";base64") and payload:
            return "base64://" + payload
    return None


def piece_text(piece: Piece) -> str:
    """What a sent piece reads as (for the quotes tmy remembers)."""
    if isinstance(piece, FileUpload):
        return f"[file] {piece.params.get('name', '')}"
    out = []
    for seg in piece:
        if seg["type"] == "text":
            out.append(seg["data"]["text"])
        elif seg["type"] == "image":
            out.append("[image]")
    return "".join(out).strip()


def _with_buttons(text: str, rows: list[list[Button]]) -> str:
    buttons = [b for row in rows for b in row]
    if not buttons:
        return text
    lines = [f"{i}. {b.text}: {b.url}" if b.url else f"{i}. {b.text}" for i, b in
             enumerate(buttons, 1)]  # fmt: skip
    return (text.rstrip() + "\n" if text.strip() else "") + "\n".join(lines)


async def localize(
    parts: Parts | None, rules_dir: Path | None, private_hosts: Collection[str] = ()
) -> dict[str, str]:
    """The reply's file-path sources (images, files) read from under ``media/`` in
    ``rules_dir`` (:func:`tmy.media.reply_file`) as ``base64://`` sources, by path; a
    path that cannot be read is logged and left out (it falls back to text).

    An ``http(s)`` source is downloaded by the implementation, which usually runs
    beside tmy: one whose host is or resolves to an internal address (loopback,
    private, link-local …, see :mod:`tmy.media.hosts`) and is not in
    ``private_hosts`` (``limits.media_private_hosts``) maps to ``""`` — refused, it
    falls back to text — so a reply cannot have QQ post what an internal service
    answers. (Redirects are the implementation's to follow; tmy cannot see them.)"""
    if parts is None:
        return {}
    out: dict[str, str] = {}
    for source in (*parts.images, *parts.files):
        if source in out:
            continue
        if source.startswith(("http://", "https://")):
            try:
                await check_url(source, private_hosts, unresolved_ok=True)
            except MediaError as exc:
                log.warning("onebot.media_refused", source=safe_url(source)[:200], error=str(exc))
                out[source] = ""
            continue
        if rules_dir is None or segment_file(source) is not None or "://" in source:
            continue
        try:
            media = await asyncio.to_thread(reply_file, source, rules_dir, MAX_LOCAL_BYTES)
        except (MediaError, OSError) as exc:
            log.warning("onebot.media_refused", source=source[:200], error=str(exc))
            continue
        out[source] = "base64://" + base64.b64encode(media.data).decode()
    return out


def _upload(where: dict[str, Any], source: str, file: str) -> FileUpload:
    name = _name(source)
    group = where["message_type"] == "group"
    key = "group_id" if group else "user_id"
    fallback = f"[file] {name}: {source}" if source.startswith(("http://", "https://")) else (
        f"[file] {name} (could not be sent)"
    )  # fmt: skip
    return FileUpload(
        "upload_group_file" if group else "upload_private_file",
        {key: where[key], "file": file, "name": name},
        fallback,
    )


def _name(source: str) -> str:
    if source.startswith("data:"):
        return "file"
    path = urlsplit(source).path if "://" in source else source
    return unquote(path.rstrip("/").rsplit("/", 1)[-1]) or "file"
