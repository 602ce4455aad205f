"""A reply's structured parts (:class:`tmy.message.Outgoing`) as Discord message fields.

* **images**: an ``http(s)`` URL becomes an embed showing it (Discord fetches it
  through its media proxy; nothing is downloaded here); a ``data:`` URL or a file
  under ``media/`` in the rules directory is loaded (:mod:`tmy.media`, under the
  size limit) and uploaded as an attachment.
* **files**: loaded the same way and uploaded as attachments (an http(s) URL is
  downloaded from public hosts only, see :mod:`tmy.media.hosts`).
* **mentions**: ``<@id>`` in front of the text, and only those users may be
  pinged (every other mention stays off, see ``sending.NO_MENTIONS``).
* **reply_to**: ``""`` quotes the message being answered (what a reply does
  anyway); an id quotes that message in the same channel.
* **buttons**: a row of Discord buttons per row (at most 5 rows of 5): a data
  button's ``custom_id`` is its data (≤ 100 characters; pressing it sends a
  ``button`` event), a URL button opens its link.

What cannot be sent (an image or file that fails to load) is logged and named in
the text instead, so the reply still says something.
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import discord

from tmy.adapters.replymedia import MediaLoader as ReplyMediaLoader
from tmy.adapters.replymedia import file_name
from tmy.logs import get_logger
from tmy.message import Button, Outgoing

if TYPE_CHECKING:
    pass

log = get_logger("tmy.adapter.discord")

Loader = Callable[[str], Awaitable[tuple[bytes, str]]]  # source -> (data, mime)
MAX_ROWS = 5
MAX_PER_ROW = 5
MAX_UPLOADS = 10  # attachments and embeds per message
MAX_UPLOAD_BYTES = 10 * 1024 * 1024  # Discord's upload limit in a guild without boosts


@dataclass(slots=True)
class Parts:
    """What one reply sends besides its text, ready for ``channel.send``."""

    uploads: list[tuple[bytes, str]] = field(default_factory=list)  # (data, file name)
    image_urls: list[str] = field(default_factory=list)  # shown as embeds
    buttons: list[list[Button]] = field(default_factory=list)
    mentions: list[int] = field(default_factory=list)
    reply_to: int | None = None  # a message id to quote (None: the default)
    notes: list[str] = field(default_factory=list)  # what could not be sent, as text

    def prefix(self) -> str:
        return "".join(f"<@{user}> " for user in self.mentions)

    def suffix(self) -> str:
        return "".join(f"\n{note}" for note in self.notes)

    def attached(self) -> dict[str, Any]:
        """``files``/``embeds``/``view`` for the message that carries them (fresh objects
        each call: a File is read once)."""
        out: dict[str, Any] = {}
        if self.uploads:
            out["files"] = [
                discord.File(io.BytesIO(data), filename=name) for data, name in self.uploads
            ]
        if self.image_urls:
            out["embeds"] = [discord.Embed().set_image(url=url) for url in self.image_urls]
        if self.buttons:
            out["view"] = view_of(self.buttons)
        return out

    @property
    def empty(self) -> bool:
        """Nothing to send besides the text (a note of what failed counts as something)."""
        return not (self.uploads or self.image_urls or self.buttons or self.notes)


def view_of(rows: list[list[Button]]) -> discord.ui.View:
    """Discord buttons for ``rows``. Past Discord's 5×5, and a data button repeating an
    earlier one's data (Discord refuses the whole message then), buttons are dropped
    and logged (``discord.buttons_dropped``)."""
    view = discord.ui.View(timeout=None)
    seen: set[str] = set()
    dropped = sum(len(row) for row in rows[MAX_ROWS:])
    for number, row in enumerate(rows[:MAX_ROWS]):
        dropped += len(row[MAX_PER_ROW:])
        for button in row[:MAX_PER_ROW]:
            label = (button.text or button.data or "·")[:80]
            if button.url:
                view.add_item(discord.ui.Button(label=label, url=button.url, row=number))
                continue
            custom_id = (button.data or button.text)[:100]
            if custom_id in seen:
                dropped += 1
                continue
            seen.add(custom_id)
            style = discord.ButtonStyle.primary
            view.add_item(
                discord.ui.Button(label=label, custom_id=custom_id, row=number, style=style)
            )
    if dropped:
        log.warning("discord.buttons_dropped", count=dropped, why="over 5x5 or a repeated data")
    return view


async def prepare(outgoing: Outgoing | None, load: Loader) -> Parts:
    """Load what ``outgoing`` uploads and sort the rest into fields (see module doc)."""
    parts = Parts()
    if not outgoing:
        return parts
    assert outgoing is not None
    for image in outgoing.images:
        if image.startswith(("http://", "https://")) and len(parts.image_urls) < MAX_UPLOADS:
            parts.image_urls.append(image)
        else:
            await _upload(parts, image, load, "image")
    for path in outgoing.files:
        await _upload(parts, path, load, "file")
    parts.mentions = [int(user) for user in outgoing.mentions if user.strip().isdigit()]
    if outgoing.reply_to and outgoing.reply_to.isdigit():
        parts.reply_to = int(outgoing.reply_to)
    parts.buttons = [row for row in outgoing.buttons if row]
    return parts


async def _upload(parts: Parts, source: str, load: Loader, what: str) -> None:
    shown = source if not source.startswith("data:") else f"a data: URL ({len(source)} chars)"
    if len(parts.uploads) >= MAX_UPLOADS:
        log.warning("discord.media_skipped", source=shown, why="more than 10 attachments")
        parts.notes.append(_note(source, what))
        return
    try:
        data, mime = await load(source)
    except Exception as exc:
        log.warning("discord.media_failed", source=shown, error=f"{type(exc).__name__}: {exc}")
        parts.notes.append(_note(source, what))
        return
    parts.uploads.append((data, file_name(source, mime, what)))


def _note(source: str, what: str) -> str:
    if source.startswith(("http://", "https://")):
        return source
    return f"[{what} not sent]"


class MediaLoader(ReplyMediaLoader):
    """A reply's image and file sources loaded for upload (see the base), at most
    Discord's upload limit."""

    max_bytes = MAX_UPLOAD_BYTES
