"""What OneBot does for one message's run (``Message.api``): media to download, quotes.

**media_source**: an attachment's own ``http(s)`` URL, with **no headers**.
QQ's media URLs are Tencent's (``multimedia.nt.qq.com.cn``, signed by their
``rkey``) and need none; the OneBot ``access_token`` authenticates tmy and the
implementation to each other and is never sent to a URL taken from a message
(whoever wrote that URL would receive it). An attachment with only a file id
is asked of the implementation (``get_image``, ``get_record``, ``get_file``);
when that yields no ``http(s)`` URL either (only a path on the
implementation's own machine) the run gets a clear error.

**quoted**: the quoted message from the messages this adapter saw lately (a
bounded LRU per account, :data:`RECENT_MESSAGES`: incoming messages and the
bot's own sends), otherwise from ``get_msg``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from tmy.adapters.onebot.accounts import Accounts
from tmy.adapters.onebot.codec import parse_cq, read_message, segments_of
from tmy.adapters.onebot.outbound import piece_text
from tmy.errors import AdapterError, TmyError
from tmy.logs import get_logger
from tmy.message import Attachment, Message

log = get_logger("tmy.adapter.onebot")

RECENT_MESSAGES = 2000  # remembered messages ({text, user, id}) per adapter, all accounts
_FETCH = {  # kind -> the action that finds a file id's URL, and its parameter
    "image": ("get_image", "file"),
    "sticker": ("get_image", "file"),
    "voice": ("get_record", "file"),
}


class Recent:
    """The last :data:`RECENT_MESSAGES` messages seen, by (account, message id)."""

    def __init__(self, size: int = RECENT_MESSAGES) -> None:
        self.size = size
        # (account, id) -> (text, user): the dict a quote reads is built when it is read; a
        # sent piece is kept as its segments, read as text only when quoted (piece_text)
        self._items: OrderedDict[tuple[str, str], tuple[Any, str]] = OrderedDict()

    def remember(self, self_id: str, message_id: str, text: Any, user: str) -> None:
        """Keep ``text`` (a str, or a sent piece's segments) and ``user`` of a message."""
        if not message_id:
            return
        key = (self_id, message_id)
        items = self._items
        if key in items:  # seen again: it becomes the newest (a new key is put last anyway)
            items.move_to_end(key)
        items[key] = (text, user)
        if len(items) > self.size:
            items.popitem(last=False)

    def get(self, self_id: str, message_id: str) -> dict[str, str] | None:
        hit = self._items.get((self_id, message_id))
        if hit is None:
            return None
        self._items.move_to_end((self_id, message_id))
        text = hit[0] if type(hit[0]) is str else piece_text(hit[0])
        return {"text": text, "user": hit[1], "id": message_id}


class OneBotApi:
    """:class:`tmy.types.PlatformApi` for one bot account (see the module docstring)."""

    __slots__ = ("accounts", "recent", "self_id")

    def __init__(self, accounts: Accounts, recent: Recent, self_id: str) -> None:
        self.accounts = accounts
        self.recent = recent
        self.self_id = self_id

    async def media_source(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        """The attachment's URL and no headers; a file id alone is asked of the implementation."""
        if attachment.url.startswith(("http://", "https://")):
            return attachment.url, {}
        if not attachment.file_id:
            raise TmyError(f"onebot: the {attachment.kind} has neither a URL nor a file id")
        action, param = _FETCH.get(attachment.kind, ("get_file", "file_id"))
        params: dict[str, Any] = {param: attachment.file_id}
        if action == "get_record":
            params["out_format"] = "mp3"
        data = await self._call(action, params)
        url = data.get("url") if isinstance(data, dict) else None
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return url, {}
        where = data.get("file") if isinstance(data, dict) else None
        raise TmyError(
            f"onebot: {action} gave no downloadable URL for {attachment.kind} "
            f"{attachment.file_id!r}" + (f" (only a path on its machine: {where})" if where else "")
        )

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        """The message ``message`` quotes as ``{text, user, id}``, remembered or ``get_msg``."""
        ident = message.reply_to
        if not ident:
            return None
        hit = self.recent.get(self.self_id, ident)
        if hit is not None:
            return dict(hit)
        try:
            data = await self._call("get_msg", {"message_id": _num(ident)})
        except AdapterError as exc:
            log.debug("onebot.quote_unknown", message_id=ident, error=str(exc))
            return None
        if not isinstance(data, dict):
            return None
        segments = segments_of(data.get("message"))
        if not segments and isinstance(data.get("raw_message"), str):
            segments = parse_cq(data["raw_message"])
        sender = data.get("sender") if isinstance(data.get("sender"), dict) else {}
        user = sender.get("user_id") or data.get("user_id") or ""
        text = read_message(segments, self.self_id).text
        self.recent.remember(self.self_id, ident, text, str(user))
        return {"text": text, "user": str(user), "id": ident}

    async def _call(self, action: str, params: dict[str, Any]) -> Any:
        conn = self.accounts.bots.get(self.self_id)
        if conn is None:
            raise AdapterError(f"onebot: bot account {self.self_id} is not connected")
        return await conn.call(action, params)


def _num(ident: str) -> int | str:
    """Message ids go out as numbers where they are (the spec's int32)."""
    return int(ident) if ident.lstrip("-").isdigit() else ident
