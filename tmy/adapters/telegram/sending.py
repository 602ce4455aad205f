"""Sending to Telegram: a queued reply (or ``send``) and the ``sendMessage`` step, with retries.

**Sending.** Replies go to the same chat (and forum topic) as a reply to the
triggering message, split into pieces of at most :data:`MAX_TEXT` UTF-16
units (Telegram's own count), on a line break when there is one in the
second half of the piece, else on a space. Sent as plain text (no parse mode),
so nothing a user typed can turn into markup. A 429 waits Telegram's
``retry_after`` and tries again (at most :data:`MAX_SEND_RETRIES` times and
never for longer than :data:`MAX_FLOOD_WAIT` per wait) — only that chat waits:
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

from tmy.adapters.base import Backoff
from tmy.adapters.fairness import PendingSend
from tmy.adapters.telegram.errors import describe, error_code
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.telegram")

MAX_SEND_RETRIES = 3  # retries of one sendMessage after 429 / migration / network / 5xx
MAX_FLOOD_WAIT = 120  # a 429 asking for a longer wait fails the send instead of blocking it


class Outgoing(PendingSend):
    """One reply (or ``send``) waiting in its chat's queue, with its retry state."""

    __slots__ = ("backoff", "chat", "index", "pieces", "reply_to", "retries", "thread")
    platform = "telegram"

    def __init__(
        self,
        chat: int | str,
        pieces: list[str],
        reply_to: int | None,
        thread: int | None,
        done: asyncio.Future[None] | None,
    ) -> None:
        self.chat = chat  # followed to the supergroup's id after a migration
        self.pieces = pieces
        self.index = 0  # the next piece to send
        self.reply_to = reply_to  # quoted by the first piece
        self.thread = thread
        super().__init__(done)  # send() waits on it; None for replies
        self.retries = 0  # of the current piece
        self.backoff = Backoff()


async def send_piece(bot: Bot | None, out: Outgoing) -> float | None:
    """One ``sendMessage`` of ``out``'s next piece (the adapter's ChatQueues work).

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
    try:
        await bot.send_message(chat, out.pieces[out.index], message_thread_id=out.thread,
                               reply_parameters=reply)  # fmt: skip
    except TelegramRetryAfter as exc:
        if out.retries >= MAX_SEND_RETRIES or exc.retry_after > MAX_FLOOD_WAIT:
            return _give_up(out, exc)
        log.warning("telegram.flood_wait", chat=str(chat), retry_after=exc.retry_after)
        out.retries += 1
        return float(exc.retry_after)
    except TelegramMigrateToChat as exc:
        if out.retries >= MAX_SEND_RETRIES:
            return _give_up(out, exc)
        log.info("telegram.chat_migrated", chat=str(chat), to=exc.migrate_to_chat_id)
        out.chat, out.reply_to, out.thread = exc.migrate_to_chat_id, None, None
        out.retries += 1
        return 0.0
    except (TelegramNetworkError, TelegramServerError) as exc:
        if out.retries >= MAX_SEND_RETRIES or isinstance(exc, TelegramEntityTooLarge):
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
    out.index += 1
    out.retries = 0
    out.backoff.reset()
    if out.index < len(out.pieces):
        return 0.0
    out.finish(None)
    return None


def _give_up(out: Outgoing, exc: Exception) -> None:
    out.finish(_send_failed(out.chat, exc, out.retries))
    return None


def _send_failed(chat: int | str, exc: Exception, retries: int) -> AdapterError:
    code = error_code(exc)
    why = describe(exc)
    log.warning("telegram.send_failed", chat=str(chat), error_code=code, description=why,
                retries=retries)  # fmt: skip
    return AdapterError(f"telegram: sendMessage to {chat} failed (error_code {code}): {why}")
