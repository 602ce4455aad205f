"""Running one message or event and answering it (the adapter's half that talks back).

For each :class:`~tmy.adapters.feishu.incoming.Incoming`, in its chat's turn:

* a reaction's chat is looked up (``GET /open-apis/im/v1/messages/{id}``: the
  event names only the message);
* a group message quoting another (``parent_id``) addresses the bot when the
  quoted message is the bot's (one it sent since start, else asked of Feishu);
* with ``admins_from`` set, ``Message.chat_admin`` (:mod:`~tmy.adapters.feishu.admins`);
* ``Message.api`` downloads attachments with the tenant token and gives the
  quoted message (REPLY_TO);
* the reply goes out whole (no ``stream:`` edits: Feishu allows a message 20
  edits, which a streamed answer at one edit a second exhausts in 20 s, and has
  no bot "typing…" indicator), answering the triggering message (in its thread
  when it came from one); events are answered in their chat.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Hashable
from typing import Any
from urllib.parse import urlparse

import aiohttp

from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.fairness import ChatQueues
from tmy.adapters.feishu.admins import ChatAdmins
from tmy.adapters.feishu.api import Rest
from tmy.adapters.feishu.compose import Piece, compose
from tmy.adapters.feishu.incoming import Incoming, with_chat
from tmy.adapters.feishu.sending import QueuedReply, send_piece
from tmy.adapters.replymedia import MediaLoader
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.media import Media, MediaError
from tmy.message import Message, Outgoing, Reply, Target

log = get_logger("tmy.adapter.feishu")

MAX_IMAGE = 10 * 1024 * 1024  # bytes: Feishu's image upload limit
MAX_FILE = 30 * 1024 * 1024  # bytes: its file upload limit


class FeishuApi:
    """``Message.api`` for one Feishu message: attachment downloads, the quoted message."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest
        self.trusted_media_hosts = (urlparse(rest.api_base).hostname or "",)

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        if not getattr(attachment, "url", ""):
            raise AdapterError("feishu: this attachment has no resource URL")
        return attachment.url, {"Authorization": f"Bearer {await self.rest.token()}"}

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        if not message.reply_to:
            return None
        item = await fetch_message(self.rest, message.reply_to)
        if item is None:
            return None
        try:
            content = json.loads((item.get("body") or {}).get("content") or "{}")
        except ValueError:
            content = {}
        text = content.get("text") if isinstance(content, dict) else None
        sender = item.get("sender") or {}
        return {
            "text": str(text or ""),
            "user": str(sender.get("id") or ""),
            "id": message.reply_to,
        }


async def fetch_message(rest: Rest, message_id: str) -> dict[str, Any] | None:
    """A message as ``GET /open-apis/im/v1/messages/{id}`` gives it; None when unknown."""
    try:
        answer = await rest.call("GET", f"/open-apis/im/v1/messages/{message_id}")
    except (aiohttp.ClientError, TimeoutError, AdapterError) as exc:
        log.warning("feishu.message_lookup_failed", message_id=message_id, error=str(exc))
        return None
    items = answer.data.get("items") if answer.ok else None
    if not isinstance(items, list) or not items or not isinstance(items[0], dict):
        return None
    return items[0]


class Answering:
    """The answering half of :class:`~tmy.adapters.feishu.adapter.FeishuAdapter`."""

    backoff_base: float
    backoff_cap: float
    _handle: Handler | None
    _rest: Rest | None
    _health: AdapterHealth
    _outbound: ChatQueues[QueuedReply]
    _admins: ChatAdmins | None
    _loader: MediaLoader

    async def _answer(self, chat: Hashable, incoming: Incoming) -> None:
        """Run the rules on one message or event and answer it (a ChatQueues work)."""
        message, rest = incoming.message, self._rest
        assert self._handle is not None
        try:
            if rest is None:
                return None
            if incoming.lookup is not None:
                item = await fetch_message(rest, incoming.lookup)
                if item is not None and item.get("chat_id"):
                    with_chat(incoming, str(item["chat_id"]))
            if incoming.parent and not message.mentions_bot and not message.private:
                message.mentions_bot = await self._is_own(rest, incoming.parent)
            if self._admins is not None:
                message.chat_admin = await self._admins.is_admin(
                    incoming.chat_id, message.user, bool(message.private)
                )
            message.api = FeishuApi(rest)
            reply = await self._handle(message)
            self._deliver(incoming, reply)
        except Exception as exc:
            log.exception("feishu.message_failed", message_id=message.message_id, error=repr(exc))
        return None

    async def _is_own(self, rest: Rest, message_id: str) -> bool:
        if rest.is_own(message_id):
            return True
        item = await fetch_message(rest, message_id)
        sender = (item or {}).get("sender") or {}
        return sender.get("sender_type") == "app" and sender.get("id") == rest.app_id

    def _deliver(self, incoming: Incoming, reply: Reply) -> None:
        text, parts = reply.text, reply.outgoing
        if not text.strip() and not parts:
            return
        message = incoming.message
        try:
            pieces = compose(text, parts, {message.user: message.user_name})
        except AdapterError as exc:  # a bad part: say so, and send the text alone
            log.error("feishu.reply_invalid", chat=incoming.chat_id, error=str(exc))
            pieces = compose(text, None)
        answered = incoming.reply_to if message.event is None else None
        reply_to = _quoted_id(parts, answered)
        if incoming.chat_id:
            self._queue(incoming.chat_id, "chat_id", pieces, reply_to, incoming.thread)
        else:  # an event outside any chat: the user's private chat
            self._queue(message.user, "open_id", pieces, reply_to, False)

    # -- sending -------------------------------------------------------------------------------

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post to ``target.chat`` (a chat_id ``oc_…``, or ``private:<open_id>``), or to the
        private chat of ``target.user`` (an open_id) when no chat is given."""
        chat = target.chat.strip()
        if chat.startswith("private:") or (not chat and target.user):
            receive, id_type = (chat.removeprefix("private:") or target.user.strip()), "open_id"
        else:
            receive, id_type = chat, "chat_id"
        if not receive or any(c.isspace() or c == "/" for c in receive):
            raise AdapterError(
                f"feishu: the target must be a chat_id (oc_…) or "
                f"private:<open_id> (got {target.chat!r})"
            )
        if not text.strip() and not outgoing:
            raise AdapterError("feishu: refusing to send an empty message")
        if self._rest is None or self._health.state == "failed":
            raise AdapterError(f"feishu: not connected ({self._health.error or 'starting'})")
        pieces = compose(text, outgoing)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reply_to = outgoing.reply_to if outgoing is not None and outgoing.reply_to else None
        self._queue(receive, id_type, pieces, reply_to, False, done)
        await done

    def _queue(
        self,
        receive: str,
        id_type: str,
        pieces: list[Piece],
        reply_to: str | None,
        thread: bool,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        out = QueuedReply(receive, id_type, pieces, reply_to, thread, done)
        out.backoff = Backoff(self.backoff_base, self.backoff_cap)
        if not pieces:
            out.finish(None)
            return
        self._outbound.put(receive, out)

    async def _send_step(self, key: Hashable, out: QueuedReply) -> float | None:
        return await send_piece(self._rest, out, self._load)

    async def _load(self, source: str, kind: str) -> Media:
        """The bytes of a reply's picture or file (an URL, a data: URL, a media/ file)."""
        limit = MAX_IMAGE if kind == "image" else MAX_FILE
        try:
            return await self._loader.load(source, limit)
        except MediaError as exc:
            raise AdapterError(f"feishu: {exc}") from exc


def _quoted_id(parts: Outgoing | None, answered: str | None) -> str | None:
    """The message a reply answers: ``reply_to`` of its parts ("" = the answered one)."""
    if parts is None or not parts.reply_to:
        return answered
    return str(parts.reply_to)
