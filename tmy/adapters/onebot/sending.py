"""Sending on OneBot: a queued reply (or ``send``) and its ``send_msg`` actions.

``send_msg`` carries the message as an array of segments (so no text is ever
read as a CQ code); sends to one chat keep at least ``send_interval`` apart
(QQ's risk control punishes bursts) without delaying other chats: each chat's
replies wait in that chat's own queue (at most ``max_pending_per_chat``; past
that the oldest is dropped, logged and counted), a reply waiting for its
chat's turn holds no adapter-wide slot, and the adapter's ``MAX_SENDS`` sends
in flight go round-robin over the chats; replies longer than
:data:`~tmy.adapters.onebot.codec.MAX_TEXT_PER_MESSAGE` go out as several
messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from tmy.adapters.fairness import PendingSend
from tmy.adapters.onebot.accounts import Accounts
from tmy.adapters.onebot.codec import reply_segments, split_text
from tmy.adapters.onebot.connection import ActionFailed
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.onebot")


class Outgoing(PendingSend):
    """One reply (or ``send``) waiting in its chat's queue: its pieces and who waits for it."""

    __slots__ = ("index", "pieces", "where")
    platform = "onebot"

    def __init__(
        self, where: dict[str, Any], pieces: list[list[Any]], done: asyncio.Future[None] | None
    ) -> None:
        self.where = where  # message_type and group_id / user_id
        self.pieces = pieces  # each piece's segments
        self.index = 0  # the next piece to send
        super().__init__(done)  # send() waits on it; None for replies

    @classmethod
    def of(
        cls,
        chat: str,
        text: str,
        *,
        quote: Any = None,
        at: str | None = None,
        done: asyncio.Future[None] | None = None,
    ) -> Outgoing:
        """``text`` for ``chat`` (``group:<id>``/``private:<id>``) in pieces of segments."""
        kind, _, ident = chat.partition(":")
        id_key = "group_id" if kind == "group" else "user_id"
        pieces = [
            # the quote and the @ go with the first piece only
            reply_segments(piece, quote=quote if i == 0 else None, at=at if i == 0 else None)
            for i, piece in enumerate(split_text(text))
        ]
        return cls({"message_type": kind, id_key: _num(ident)}, pieces, done)


async def send_piece(accounts: Accounts, key: Hashable, out: Outgoing) -> float | None:
    """``send_msg`` the next piece of ``out`` (a ChatQueues work: 0 = more pieces to go)."""
    self_id, chat = key  # type: ignore[misc]
    conn = accounts.bots.get(self_id)
    try:
        if conn is None:
            raise AdapterError(f"onebot: bot account {self_id} is not connected")
        data = await conn.call("send_msg", {**out.where, "message": out.pieces[out.index]})
    except AdapterError as exc:
        log.warning(
            "onebot.send_failed",
            self_id=self_id,
            chat=chat,
            retcode=exc.retcode if isinstance(exc, ActionFailed) else None,
            error=str(exc),
        )
        out.finish(exc)
        return None
    except asyncio.CancelledError:
        out.finish(AdapterError(f"onebot: tmy stopped before the message to {chat} went out"))
        raise
    if isinstance(data, dict) and data.get("message_id") is not None:
        accounts.remember_sent(self_id, str(data["message_id"]))
    out.index += 1
    if out.index < len(out.pieces):
        return 0.0  # the next piece, after this chat's send_interval
    out.finish(None)
    return None


def _num(ident: str) -> int | str:
    """QQ ids go out as numbers (the spec's int64); other platforms' string ids as they are."""
    return int(ident) if ident.isdigit() else ident
