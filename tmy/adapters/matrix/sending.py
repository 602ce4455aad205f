"""Sending to a room: a queued reply (or ``send``) one event at a time, with retries.

Each event of a reply is one step of the adapter's outbound
:class:`~tmy.adapters.fairness.ChatQueues` (per room, paced): a picture or file is
uploaded first (``POST /_matrix/media/v3/upload``), then the event is sent
(``PUT /rooms/{room}/send/m.room.message/{txn}``) with a transaction id made
once per event, so a retry after a lost answer cannot post it twice (the
homeserver answers a repeated transaction id with the first event's id).

The first event quotes ``reply_to`` (``m.relates_to.m.in_reply_to``). A reply to
a message that came from a thread stays in the thread: every event carries
``rel_type: m.thread`` with the thread's root, and — when it quotes nothing — the
thread fallback (``is_falling_back``, ``m.in_reply_to`` the latest event in the
thread) that clients without threads show as a reply.

A refused token (a password session logged out while tmy runs) logs in again
and retries; a 429 ``M_LIMIT_EXCEEDED`` waits the homeserver's ``retry_after_ms`` (that room
alone waits; at most ``max_retries`` (3) times, never longer than
``longest_wait``, 120 s); network errors and 5xx are retried with backoff; anything
else is logged with Matrix's ``errcode`` and raised as
:class:`~tmy.errors.AdapterError` to whoever waits for the send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mautrix.client import ClientAPI
from mautrix.types import EventType, RoomID

from tmy import media
from tmy.adapters.fairness import PiecewiseSend
from tmy.adapters.matrix.compose import Piece, media_content, mxc_of
from tmy.adapters.matrix.http import describe, is_bad_token, is_transient, retry_after
from tmy.adapters.matrix.paths import download_base
from tmy.adapters.replymedia import file_name
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.matrix")


Loader = Callable[[str], Awaitable[tuple[bytes, str]]]
Sent = Callable[[str, str, dict[str, Any]], None]  # (room, event id, content)
Reauth = Callable[[], Awaitable[bool]]  # log in again after a refused token: True when done


class QueuedReply(PiecewiseSend):
    """One reply (or ``send``) waiting in its room's queue, with its retry state."""

    __slots__ = ("last", "pieces", "reply_to", "room", "thread", "txn")
    platform = "matrix"
    place = "room"

    def __init__(
        self,
        room: str,
        pieces: list[Piece],
        *,
        reply_to: str | None = None,
        thread: str | None = None,
        last: str | None = None,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        super().__init__(done)
        self.room = room
        self.pieces = pieces
        self.reply_to = reply_to  # quoted by the first event
        self.thread = thread  # the thread root: every event goes into that thread
        self.last = last  # the latest event in the thread (its fallback reply)
        self.txn = ""  # the current event's transaction id (kept across its retries)


def relations(out: QueuedReply) -> dict[str, Any] | None:
    """``m.relates_to`` of ``out``'s next event (None: it relates to nothing)."""
    quote = out.reply_to if out.index == 0 else None
    if out.thread:
        falling_back = quote is None
        latest = quote or out.last or out.thread
        return {
            "rel_type": "m.thread",
            "event_id": out.thread,
            "is_falling_back": falling_back,
            "m.in_reply_to": {"event_id": latest},
        }
    return {"m.in_reply_to": {"event_id": quote}} if quote else None


async def send_piece(
    client: ClientAPI | None, out: QueuedReply, load: Loader, on_sent: Sent, reauth: Reauth
) -> float | None:
    """Send ``out``'s next event (the outbound ChatQueues work): None when all are sent,
    else the seconds before the next step (the next event, or a retry)."""
    if client is None:
        out.finish(AdapterError("matrix: the adapter is stopped"))
        return None
    piece = out.pieces[out.index]
    if not out.txn:
        out.txn = client.api.get_txn_id()
    try:
        content = await _content(client, piece, load)
        if content is None:  # an unusable picture/file: logged, the rest goes on
            return _next(out)
        related = relations(out)
        if related is not None:
            content = {**content, "m.relates_to": related}
        event_id = await client.send_message_event(
            RoomID(out.room), EventType.ROOM_MESSAGE, content, txn_id=out.txn
        )
    except asyncio.CancelledError:
        out.finish(AdapterError(f"matrix: stopped before the message to {out.room} went out"))
        raise
    except Exception as exc:
        if is_bad_token(exc) and out.may_retry() and await reauth():
            out.retries += 1  # a password session logged out meanwhile: logged in again
            return 0.0
        return _retry_or_fail(out, exc)
    on_sent(out.room, str(event_id), content)
    out.last = str(event_id)
    return _next(out)


async def _content(client: ClientAPI, piece: Piece, load: Loader) -> dict[str, Any] | None:
    if not piece.source:
        return piece.content
    known = mxc_of(piece.source, download_base(str(client.api.base_url)))
    if known:
        name = file_name(piece.source, "", piece.kind)
        piece.content, piece.source = media_content(piece.kind, known, name), ""
        return piece.content
    try:
        data, mime = await load(piece.source)
    except media.MediaError as exc:
        log.error("matrix.reply_invalid", error=str(exc))
        return None
    name = file_name(piece.source, mime, piece.kind)
    mxc = await client.upload_media(data, mime_type=mime, filename=name)
    piece.content = media_content(piece.kind, str(mxc), name, mime, len(data))
    piece.source = ""
    return piece.content


def _next(out: QueuedReply) -> float | None:
    out.txn = ""  # the next event gets its own transaction id
    return out.piece_sent(len(out.pieces))


def _retry_or_fail(out: QueuedReply, exc: Exception) -> float | None:
    wait = retry_after(exc)
    if wait is not None and out.may_retry(wait):
        log.warning("matrix.rate_limited", room=out.room, retry_after=wait)
        out.retries += 1
        return wait
    if wait is None and out.may_retry() and is_transient(exc):
        delay = out.backoff.next()
        log.warning(
            "matrix.send_retry", room=out.room, error=describe(exc), retry_in=round(delay, 2)
        )
        out.retries += 1
        return delay
    why = describe(exc)
    log.warning("matrix.send_failed", room=out.room, error=why, retries=out.retries)
    out.finish(AdapterError(f"matrix: sending to {out.room} failed: {why}"))
    return None
