"""A reply's text and parts (:class:`tmy.message.Outgoing`) as Satori ``message.create``
contents.

* **text** is escaped (``& < >``: nothing a user or a model wrote becomes an element)
  and split into pieces of at most :func:`limit_for` UTF-16 code units (counted
  before escaping), on a line break in the piece's second half when there is one, else on
  a space. Satori itself sets no limit; the platforms behind it do (Discord 2,000
  characters, Telegram 4,096, QQ folds long messages), so tmy cuts at 2,000 — the
  smallest common limit — except where the platform is known to take more, less the
  room the platform's rendering of the reply's mentions takes.
* **reply_to** (or the answered message, in a group) → ``<quote id=…/>`` at the
  start of the first piece; **mentions** → ``<at id=…/>`` before the text (never
  ``all``/``here``/``everyone``: a mention names one user).
* **images** → ``<img src=…/>``, **files** → ``<file src=… title=…/>`` after the
  text (with it when the text is one piece): an http(s) URL as it is; a ``data:``
  URL or a file under ``media/`` in the rules directory as a ``data:`` URL of at most
  :data:`MAX_INLINE` bytes (the server downloads or uploads it to the platform; a
  bigger body is refused by servers whose JSON limit is a few MB).
* **buttons** → ``<button type="action" id=data>text</button>`` (``type="link"
  href=url`` for a link) on platforms that show them (:data:`BUTTON_PLATFORMS`);
  elsewhere each becomes a text line (``[text]`` or ``text: url``), since the
  protocol lets a platform drop buttons silently.
"""

from __future__ import annotations

from pathlib import Path

from tmy.adapters.replymedia import read_local
from tmy.adapters.satori.elements import escape, tag
from tmy.errors import AdapterError
from tmy.media import MediaError, data_url
from tmy.message import Button, Outgoing

MAX_TEXT = 2000  # characters per message where nothing better is known (Discord's limit)
PLATFORM_LIMITS = {"telegram": 4096}  # where the platform's own limit is known to be larger
MASS_IDS = frozenset({"all", "here", "everyone", "@all", "@here", "@everyone"})
MENTION_ROOM = 12  # characters a platform may write around a mentioned id (beside the id)
MAX_INLINE = 5 * 1024 * 1024  # bytes of a picture or file sent inline as a data: URL
# platforms whose Satori adapters render <button> as they are (Discord components, Telegram
# inline keyboards, KOOK cards, Lark/Feishu cards, LINE templates). Not QQ's official API
# (qq, qqguild): Koishi's adapter turns a message with buttons into markdown, which QQ
# refuses from a bot without markdown permission — so there they are text lines.
BUTTON_PLATFORMS = frozenset({"discord", "telegram", "kook", "lark", "feishu", "line"})


def limit_for(platform: str) -> int:
    return PLATFORM_LIMITS.get(platform, MAX_TEXT)


def compose(
    text: str,
    parts: Outgoing | None,
    *,
    platform: str,
    quote: str | None = None,
    rules_dir: Path | None = None,
) -> list[str]:
    """The ``content`` of each message that sends ``text`` with ``parts``.

    ``quote``: the answered message (quoted unless ``parts.reply_to`` names another).
    AdapterError when a picture or file cannot be sent.
    """
    parts = parts or Outgoing()
    if parts.reply_to:
        quote = parts.reply_to
    buttons = parts.buttons
    if buttons and platform not in BUTTON_PLATFORMS:
        text = "\n".join([text.rstrip(), *_button_lines(buttons)]).strip()
        buttons = []
    # a mention is text on the platform too (Discord's <@id>, KOOK's (met)id(met)): room
    # for it is kept in every piece, or the first piece would pass the limit and be refused
    limit = limit_for(platform)
    room = min(limit // 2, sum(len(user) + MENTION_ROOM for user in _users(parts.mentions)))
    pieces = [escape(piece) for piece in split_text(text, limit - room)]
    mentions = "".join(tag("at", {"id": user}) + " " for user in _users(parts.mentions))
    media = [_media("img", source, rules_dir) for source in parts.images]
    media += [_media("file", source, rules_dir) for source in parts.files]
    tail = "".join(media) + _buttons(buttons)
    if tail and len(pieces) > 1:
        pieces.append(tail)
    elif tail and pieces:
        pieces[-1] += tail
    elif tail:  # media or buttons alone, no text
        pieces = [tail]
    if not pieces or not any(p.strip() for p in pieces):
        pieces = [mentions.rstrip()] if mentions else []
    elif mentions:
        pieces[0] = mentions + pieces[0]
    if pieces and quote:
        pieces[0] = tag("quote", {"id": quote}) + pieces[0]
    return [p for p in pieces if p.strip()]


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-16 code units (see the module docstring).

    UTF-16, as Telegram and the JavaScript servers count: an emoji outside the BMP is
    two, so 4,096 characters of them would be 8,192 and refused. Counting so is never
    more than another platform's count in characters."""
    text = text.strip()
    pieces: list[str] = []
    while len(text) > limit or _units(text) > limit:  # (UTF-16 counted on short texts only)
        room = _fitting(text, limit)
        cut = text.rfind("\n", room // 2, room + 1)
        if cut <= 0:
            cut = text.rfind(" ", room // 2, room + 1)
        if cut <= 0:
            cut = room
        pieces.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        pieces.append(text)
    return pieces


def _units(text: str) -> int:
    """The UTF-16 length of ``text``."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _fitting(text: str, limit: int) -> int:
    """How many of ``text``'s first characters fit in ``limit`` UTF-16 units (at least one)."""
    head = text[:limit]
    if _units(head) <= limit:  # no character outside the BMP: one unit each
        return max(len(head), 1)
    units = 0
    for index, char in enumerate(head):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return max(index, 1)
    return max(min(len(text), limit), 1)


def _users(mentions: list[str]) -> list[str]:
    """The mentions that name one user: ``all``, ``here`` or ``everyone`` as an id would
    ping every member where the platform's adapter writes the id as it is (KOOK's
    ``(met)all(met)``, OneBot's ``[CQ:at,qq=all]``), so they are dropped."""
    return [u.strip() for u in mentions if u.strip() and u.strip().lower() not in MASS_IDS]


def _media(element: str, source: str, rules_dir: Path | None) -> str:
    source = source.strip()
    if source.startswith(("http://", "https://")):
        return tag(element, {"src": source})
    try:
        media, name = read_local(source, rules_dir, MAX_INLINE, element)
    except MediaError as exc:
        raise AdapterError(f"satori: cannot send {source[:80]!r}: {exc}") from exc
    attrs = {"src": data_url(media)}
    if element == "file" and source[:5].lower() != "data:":
        attrs["title"] = name  # the file's own name (a data: URL has none)
    return tag(element, attrs)


def _buttons(rows: list[list[Button]]) -> str:
    out = []
    for row in rows:
        for button in row:
            if button.url:
                out.append(tag("button", {"type": "link", "href": button.url},
                               escape(button.text)))  # fmt: skip
            else:
                out.append(tag("button", {"type": "action", "id": button.data or button.text},
                               escape(button.text)))  # fmt: skip
    return "".join(out)


def _button_lines(rows: list[list[Button]]) -> list[str]:
    return [f"{b.text}: {b.url}" if b.url else f"[{b.text}]" for row in rows for b in row]
