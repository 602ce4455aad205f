"""Sending on OneBot: a queued reply (or ``send``) and its ``send_msg`` actions.

``send_msg`` carries the message as an array of segments (so no text is ever
read as a CQ code); sends to one chat keep at least ``send_interval`` apart
(QQ's risk control punishes bursts) without delaying other chats: each chat's
replies wait in that chat's own queue (at most ``max_pending_per_chat``; past
that the oldest is dropped, logged and counted), a reply waiting for its
chat's turn holds no adapter-wide slot, and the adapter's ``MAX_SENDS`` sends
in flight go round-robin over the chats; replies longer than
:data:`~tmy.adapters.onebot.codec.MAX_TEXT_PER_MESSAGE` go out as several
messages. A reply's images, mentions, quote, buttons and files
(:mod:`tmy.adapters.onebot.outbound`) ride in the same queue, in order: its
``send_msg`` pieces first, then one ``upload_*_file`` per file (a refused
upload sends its text fallback instead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Hashable
from typing import Any

from tmy.adapters.fairness import PendingSend, Step
from tmy.adapters.onebot.accounts import Accounts
from tmy.adapters.onebot.api import Recent
from tmy.adapters.onebot.codec import MAX_TEXT_PER_MESSAGE, reply_segments
from tmy.adapters.onebot.connection import ActionFailed, Connection, action_result
from tmy.adapters.onebot.events import ANONYMOUS_PREFIX
from tmy.adapters.onebot.outbound import FileUpload, Piece, compose
from tmy.adapters.streaming import SentenceChunks
from tmy.config.adapters import OneBotConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message
from tmy.message import Outgoing as Parts

log = get_logger("tmy.adapter.onebot")


class Outgoing(PendingSend):
    """One reply (or ``send``) waiting in its chat's queue: its pieces and who waits for it."""

    __slots__ = ("chat", "index", "pieces", "where")
    platform = "onebot"

    def __init__(
        self,
        where: dict[str, Any],
        pieces: list[Piece],
        done: asyncio.Future[None] | None,
        chat: str = "",
    ) -> None:
        self.where = where  # message_type and group_id / user_id
        self.pieces = pieces  # each piece's segments, or a file to upload
        self.index = 0  # the next piece to send
        self.chat = chat  # group:<id> / private:<id>, for the error of a send cut by a stop
        self.done = done  # send() waits on it; None for replies (PendingSend's, set inline)

    @classmethod
    def of(
        cls,
        chat: str,
        text: str,
        *,
        quote: Any = None,
        at: str | None = None,
        done: asyncio.Future[None] | None = None,
        parts: Parts | None = None,
        answering: str = "",
        local: dict[str, str] | None = None,
    ) -> Outgoing:
        """``text`` (and ``parts``) for ``chat`` (``group:<id>``/``private:<id>``) in pieces;
        the quote and the @ go with the first piece only."""
        kind, _, ident = chat.partition(":")
        id_key = "group_id" if kind == "group" else "user_id"
        where = {"message_type": kind, id_key: int(ident) if ident.isdigit() else ident}
        if parts is None and len(text) <= MAX_TEXT_PER_MESSAGE:  # compose's one-piece case
            text = text.strip()
            if not text:
                pieces: list[Piece] = []
            elif quote is None and at is None:  # reply_segments's usual case, inline
                pieces = [[{"type": "text", "data": {"text": text}}]]
            else:
                pieces = [reply_segments(text, quote=quote, at=at)]
        else:
            pieces = compose(where, text, parts, quote=quote, at=at, answering=answering,
                             local=local)  # fmt: skip
        return cls(where, pieces, done, chat)  # no pieces: nothing to send (the caller checks)

    def stopped(self) -> None:
        """tmy stopped while this was waiting for the answer to its ``send_msg``."""
        self.finish(AdapterError(f"onebot: tmy stopped before the message to {self.chat} went out"))


def send_step(
    accounts: Accounts, recent: Recent | None, key: Hashable, out: Outgoing
) -> Step | Coroutine[Any, Any, float | None]:
    """Send the next piece of ``out`` (a ChatQueues work): a message piece goes out now and
    the Step it returns ends when the implementation answers (no task, no Future); a file
    upload, or an account not connected, is :func:`send_piece`'s coroutine."""
    conn = accounts.bots.get(key[0])  # type: ignore[index]
    piece = out.pieces[out.index]
    if conn is None or isinstance(piece, FileUpload) or conn.closed:
        return send_piece(accounts, key, out, recent)
    step = Step()

    def answered(response: dict[str, Any] | AdapterError) -> None:
        if step.finished:  # close() stopped it meanwhile (Outgoing.stopped told the sender)
            return
        try:
            if isinstance(response, AdapterError):
                raise response
            if response.get("retcode") == 0:  # action_result's usual case, inline
                data = response.get("data")
            else:
                data = action_result("send_msg", response)
            again = _sent(accounts, key, out, piece, data, recent)
        except AdapterError as exc:
            again = _failed(key, out, exc)
        except Exception as exc:  # a bug: ChatQueues logs it and tells the sender (on_fail)
            step.failed(exc)
            return
        step.done(again)

    try:
        conn.request("send_msg", {**out.where, "message": piece}, answered)
    except AdapterError as exc:
        step.done(_failed(key, out, exc))
    return step


async def send_piece(
    accounts: Accounts, key: Hashable, out: Outgoing, recent: Recent | None = None
) -> float | None:
    """Send the next piece of ``out`` (a ChatQueues work: 0 = more pieces to go)."""
    self_id, chat = key  # type: ignore[misc]
    conn = accounts.bots.get(self_id)
    piece = out.pieces[out.index]
    try:
        if conn is None:
            raise AdapterError(f"onebot: bot account {self_id} is not connected")
        if isinstance(piece, FileUpload):
            data = await _upload(conn, out, piece)
        else:
            data = await conn.call("send_msg", {**out.where, "message": piece})
    except AdapterError as exc:
        return _failed(key, out, exc)
    except asyncio.CancelledError:
        out.finish(AdapterError(f"onebot: tmy stopped before the message to {chat} went out"))
        raise
    return _sent(accounts, key, out, piece, data, recent)


def _failed(key: Hashable, out: Outgoing, exc: AdapterError) -> None:
    """A piece could not be sent: logged, and its sender told."""
    log.warning(
        "onebot.send_failed",
        self_id=key[0],  # type: ignore[index]
        chat=key[1],  # type: ignore[index]
        retcode=exc.retcode if isinstance(exc, ActionFailed) else None,
        error=str(exc),
    )
    out.finish(exc)


def _sent(
    accounts: Accounts, key: Hashable, out: Outgoing, piece: Piece, data: Any, recent: Recent | None
) -> float | None:
    """A piece went out: remember its id (quotes of it address the bot); 0.0 while pieces
    are left (the next one after the chat's send_interval), None when all went out."""
    sent_id = data.get("message_id") if type(data) is dict else None
    if sent_id is not None:
        self_id = key[0]  # type: ignore[index]
        sent_id = str(sent_id)
        accounts.remember_sent(self_id, sent_id)
        if recent is not None:
            recent.remember(self_id, sent_id, piece, self_id)  # read as text when quoted
    out.index += 1
    if out.index < len(out.pieces):
        return 0.0
    if out.done is not None:  # a send() waits for it (a reply has nobody waiting)
        out.finish(None)
    return None


async def _upload(conn: Connection, out: Outgoing, upload: FileUpload) -> Any:
    """Upload one file; a refusal (an implementation without URL uploads) sends its fallback."""
    try:
        return await conn.call(upload.action, upload.params)
    except ActionFailed as exc:
        log.warning("onebot.upload_failed", action=upload.action, error=str(exc))
    text = [{"type": "text", "data": {"text": upload.fallback}}]
    return await conn.call("send_msg", {**out.where, "message": text})


def addressing_of(config: OneBotConfig, message: Message, event: dict[str, Any]) -> dict[str, Any]:
    """The quote and @ the config puts on a group reply (``quote_reply``, ``at_sender``)."""
    if message.event is not None or message.private:
        return {}
    if not (config.quote_reply or config.at_sender):
        return {}  # the defaults: neither
    anonymous = message.user.startswith(ANONYMOUS_PREFIX)
    return {
        "quote": event.get("message_id") if config.quote_reply else None,
        "at": message.user if config.at_sender and not anonymous else None,
    }


def sentence_stream(
    outbound: Any, key: Hashable, message: Message, addressing: dict[str, Any]
) -> SentenceChunks:
    """What ``message.stream`` is: each finished sentence of a ``stream: chunks`` step goes
    out through the chat's paced queue (``outbound``; the first one with the reply's quote
    and @, which ``addressing`` then loses: the reply's own rest goes without them)."""
    chat = message.chat

    async def send(text: str) -> None:
        out = Outgoing.of(chat, text, **addressing)
        if out.pieces:
            outbound.put(key, out)
            addressing.clear()

    return SentenceChunks(send)
