"""A reply's text and structured parts (:class:`tmy.message.Outgoing`) as Telegram messages.

* **text**: split into messages of at most 4096 UTF-16 units
  (:func:`~tmy.adapters.telegram.text.split_text`), sent as plain text;
* **images** → ``sendPhoto``, **files** → ``sendDocument``: an http(s) URL is
  passed as it is (Telegram fetches it), a ``data:`` URL or a file under
  ``media/`` in the rules directory (:func:`tmy.media.reply_file`) is uploaded
  (multipart; at most 10 MB for a photo, 50 MB for
  a document, Telegram's limits). When the text fits a caption (1024 units)
  the first picture or file carries it, so a picture with a line under it is
  one message;
* **mentions** → text mentions (``text_mention`` entities) before the text,
  showing the user's name when the reply answers them, else their id;
* **buttons** → an inline keyboard under the text (or the captioned media):
  a button's ``data`` becomes its ``callback_data`` (at most 64 bytes, Telegram's
  limit: longer is an :class:`~tmy.errors.AdapterError` naming the button), a
  ``url`` makes a link button;
* **reply_to** → the first message quotes that message (``reply_parameters``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aiogram.types import (
    BufferedInputFile,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    MessageEntity,
    User,
)

from tmy.adapters.replymedia import read_local
from tmy.adapters.telegram.text import split_text
from tmy.errors import AdapterError
from tmy.media import MediaError
from tmy.message import Button
from tmy.message import Outgoing as Parts

MAX_CAPTION = 1024  # UTF-16 units in a photo's or document's caption
MAX_CALLBACK_DATA = 64  # bytes of a button's callback_data
MAX_UPLOAD = {"photo": 10 * 1024 * 1024, "document": 50 * 1024 * 1024}


@dataclass(slots=True)
class Piece:
    """One Telegram message to send: ``sendMessage``, ``sendPhoto`` or ``sendDocument``."""

    method: str  # "message" | "photo" | "document"
    text: str = ""  # the message's text, or the caption
    media: str | BufferedInputFile | None = None  # a URL, or the bytes to upload
    entities: list[MessageEntity] | None = None
    markup: InlineKeyboardMarkup | None = None

    @property
    def api_method(self) -> str:
        return {"message": "sendMessage", "photo": "sendPhoto", "document": "sendDocument"}[
            self.method
        ]


def compose(
    text: str,
    parts: Parts | None,
    *,
    names: Mapping[str, str] | None = None,
    rules_dir: Path | None = None,
) -> list[Piece]:
    """The messages that send ``text`` with ``parts``; AdapterError when a part is unusable."""
    parts = parts or Parts()
    prefix, entities = mentions(parts.mentions, names or {})
    body = prefix + text if text.strip() else prefix.rstrip()
    markup = keyboard(parts.buttons)
    media = [_media("photo", s, rules_dir) for s in parts.images]
    media += [_media("document", s, rules_dir) for s in parts.files]
    if media and _units(body) <= MAX_CAPTION:
        media[0].text, media[0].entities, media[0].markup = body, entities or None, markup
        return media
    pieces = [Piece("message", p) for p in split_text(body)]
    if pieces:
        pieces[0].entities = entities or None
        pieces[-1].markup = markup
    elif markup is not None:
        raise AdapterError("telegram: buttons need a text to stand under (the reply is empty)")
    return pieces + media


def mentions(users: list[str], names: Mapping[str, str]) -> tuple[str, list[MessageEntity]]:
    """``"Ann Bob "`` and the text mentions over those names."""
    prefix, entities = "", []
    for user in users:
        uid = str(user).strip()
        if not uid.isdigit():
            raise AdapterError(f"telegram: a mention must be a numeric user id (got {user!r})")
        name = names.get(uid) or uid
        who = User(id=int(uid), is_bot=False, first_name=name)
        entities.append(
            MessageEntity(type="text_mention", offset=_units(prefix), length=_units(name), user=who)
        )
        prefix += name + " "
    return prefix, entities


def keyboard(rows: list[list[Button]]) -> InlineKeyboardMarkup | None:
    """The inline keyboard for ``rows`` of buttons (None: no buttons)."""
    keys = [[_key(b) for b in row] for row in rows if row]
    return InlineKeyboardMarkup(inline_keyboard=keys) if keys else None


def _key(button: Button) -> InlineKeyboardButton:
    if not button.text.strip():
        raise AdapterError("telegram: a button needs a text")
    if button.url:
        return InlineKeyboardButton(text=button.text, url=button.url)
    data = button.data or button.text
    size = len(data.encode("utf-8"))
    if size > MAX_CALLBACK_DATA:
        raise AdapterError(
            f"telegram: the data of button {button.text!r} is {size} bytes; Telegram allows "
            f"at most {MAX_CALLBACK_DATA} (use a short key and look the rest up in the rule)"
        )
    return InlineKeyboardButton(text=button.text, callback_data=data)


def _media(method: str, source: str, rules_dir: Path | None) -> Piece:
    """A photo/document piece: a URL as it is, a data: URL or a file as bytes to upload."""
    source = str(source).strip()
    if source.startswith(("http://", "https://")):
        return Piece(method, media=source)
    limit = MAX_UPLOAD[method]
    name = "image" if method == "photo" else "file"
    try:
        media, filename = read_local(source, rules_dir, limit, name)
    except MediaError as exc:
        raise AdapterError(f"telegram: cannot send {name} {source[:60]!r}: {exc}") from exc
    return Piece(method, media=BufferedInputFile(media.data, filename=filename))


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2
