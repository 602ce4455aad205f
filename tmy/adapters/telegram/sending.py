"""Sending to Telegram: a queued reply (or ``send``) and its send steps, with retries.

**Sending.** Replies go to the same chat (and forum topic) as a reply to the
triggering message, split into pieces of at most :data:`MAX_TEXT` UTF-16
units (Telegram's own count), on a line break when there is one in the
second half of the piece, else on a space. Sent as plain text (no parse mode),
so nothing a user typed can turn into markup. Pictures, files, mentions and
buttons are :mod:`~tmy.adapters.telegram.compose`'s; each message of a reply
(``sendMessage``, ``sendPhoto``, ``sendDocument``) is one step here. A 429 waits Telegram's
``retry_after`` and tries again (at most ``max_retries`` (3) times and
never for longer than ``longest_wait`` (120 s) per wait) — only that chat waits:
replies queue per chat (at most ``max_pending_per_chat``, the oldest dropped
past it), a chat waiting out its flood wait holds no send slot, and the
:data:`MAX_SENDS` sends in flight go round-robin over the chats; a group upgraded to a
supergroup is followed to its new id; network errors and 5xx are retried with
backoff; anything else is logged with Telegram's ``error_code`` and
``description`` and raised as :class:`~tmy.errors.AdapterError`.
"""

from __future__ import annotations

import asyncio

from aiogram import Bot
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramEntityTooLarge,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.types import ReplyParameters

from tmy.adapters.fairness import PiecewiseSend
from tmy.adapters.telegram.compose import Piece
from tmy.adapters.telegram.errors import describe, error_code
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.telegram")


class QueuedReply(PiecewiseSend):
    """One reply (or ``send``) waiting in its chat's queue, with its retry state."""

    __slots__ = ("chat", "pieces", "reply_to", "thread")
    platform = "telegram"

    def __init__(
        self,
        chat: int | str,
        pieces: list[Piece],
        reply_to: int | None,
        thread: int | None,
        done: asyncio.Future[None] | None,
    ) -> None:
        self.chat = chat  # followed to the supergroup's id after a migration
        self.pieces = pieces
        self.reply_to = reply_to  # quoted by the first piece
        self.thread = thread
        super().__init__(done)  # send() waits on it; None for replies


async def send_piece(bot: Bot | None, out: QueuedReply) -> float | None:
    """One send of ``out``'s next piece (the adapter's ChatQueues work).

    Returns the pause before calling again (the next piece, or a retry: a
    429's ``retry_after`` is waited out by this chat alone), None when done.
    """
    if bot is None:
        out.finish(AdapterError("telegram: the adapter is stopped"))
        return None
    chat = out.chat
    reply = None
    if out.reply_to is not None and out.index == 0:
        reply = ReplyParameters(message_id=out.reply_to, allow_sending_without_reply=True)
    piece = out.pieces[out.index]
    try:
        await _send(bot, chat, piece, out.thread, reply)
    except TelegramRetryAfter as exc:
        if not out.may_retry(exc.retry_after):
            return _give_up(out, exc)
        log.warning("telegram.flood_wait", chat=str(chat), retry_after=exc.retry_after)
        out.retries += 1
        return float(exc.retry_after)
    except TelegramMigrateToChat as exc:
        if not out.may_retry():
            return _give_up(out, exc)
        log.info("telegram.chat_migrated", chat=str(chat), to=exc.migrate_to_chat_id)
        out.chat, out.reply_to, out.thread = exc.migrate_to_chat_id, None, None
        out.retries += 1
        return 0.0
    except (TelegramNetworkError, TelegramServerError) as exc:
        if not out.may_retry() or isinstance(exc, TelegramEntityTooLarge):
            return _give_up(out, exc)
        delay = out.backoff.next()
        log.warning("telegram.send_retry", chat=str(chat), error=describe(exc),
                    error_code=error_code(exc), retry_in=round(delay, 2))  # fmt: skip
        out.retries += 1
        return delay
    except (TelegramAPIError, ClientDecodeError) as exc:
        return _give_up(out, exc)
    except asyncio.CancelledError:
        out.finish(AdapterError(f"telegram: stopped before the message to {chat} went out"))
        raise
    return out.piece_sent(len(out.pieces))


async def _send(
    bot: Bot, chat: int | str, piece: Piece, thread: int | None, reply: ReplyParameters | None
) -> None:
    common = {"message_thread_id": thread, "reply_parameters": reply, "reply_markup": piece.markup}
    if piece.method == "message":
        await bot.send_message(chat, piece.text, entities=piece.entities, **common)
    elif piece.method == "photo":
        assert piece.media is not None
        await bot.send_photo(chat, piece.media, caption=piece.text or None,
                             caption_entities=piece.entities, **common)  # fmt: skip
    else:
        assert piece.media is not None
        await bot.send_document(chat, piece.media, caption=piece.text or None,
                                caption_entities=piece.entities, **common)  # fmt: skip


def _give_up(out: QueuedReply, exc: Exception) -> None:
    method = out.pieces[out.index].api_method if out.index < len(out.pieces) else "sendMessage"
    out.finish(_send_failed(out.chat, exc, out.retries, method))
    return None


def _send_failed(chat: int | str, exc: Exception, retries: int, method: str) -> AdapterError:
    code = error_code(exc)
    why = describe(exc)
    log.warning("telegram.send_failed", chat=str(chat), error_code=code, description=why,
                retries=retries)  # fmt: skip
    return AdapterError(f"telegram: {method} to {chat} failed (error_code {code}): {why}")
