"""Running one message or event and answering it (the adapter's half that talks back).

For each :class:`~tmy.adapters.telegram.updates.Incoming`, in its chat's turn:

* a button press is acknowledged at once (``answerCallbackQuery``: the
  client stops its spinner);
* with ``admins_from`` set, ``Message.chat_admin`` says whether the sender is
  owner/admin of the group (:mod:`~tmy.adapters.telegram.admins`);
* ``Message.api`` downloads attachments and gives the quoted message;
  ``Message.stream`` is a :class:`~tmy.adapters.streaming.GrowingMessage`: a
  ``stream:`` step's answer is posted, then edited at most once per
  :attr:`Answering.stream_interval` seconds, and the reply's final text is the
  last edit (longer replies continue in further messages; if nothing was shown
  the reply is sent as usual);
* while the run works longer than :attr:`Answering.typing_after` seconds
  the chat shows "typing…" (``sendChatAction``, renewed every 5 s);
* a join request is approved (``approveChatJoinRequest``) or declined
  (``declineChatJoinRequest``) when the run set ``APPROVE`` (Telegram takes no
  reason); left pending otherwise;
* the reply (text and :class:`~tmy.message.Outgoing` parts) goes to the chat,
  quoting the message that was answered (events quote nothing).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Hashable
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any

from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.types import ReplyParameters

from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.fairness import ChatQueues
from tmy.adapters.streaming import GrowingMessage, typing_while
from tmy.adapters.telegram.admins import ChatAdmins
from tmy.adapters.telegram.compose import compose, keyboard
from tmy.adapters.telegram.errors import describe
from tmy.adapters.telegram.media import TelegramApi
from tmy.adapters.telegram.sending import QueuedReply, send_piece
from tmy.adapters.telegram.text import MAX_TEXT, fit_utf16, split_text
from tmy.adapters.telegram.updates import Incoming
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Outgoing, Reply, Target

log = get_logger("tmy.adapter.telegram")

_CHAT_RE = re.compile(r"-?\d{1,20}|@[A-Za-z0-9_]{4,64}")  # a chat id, or @channelusername


class Answering:
    """The answering half of :class:`~tmy.adapters.telegram.adapter.TelegramAdapter`."""

    backoff_base: float
    backoff_cap: float
    rules_dir: Path | None
    typing_after = 1.0  # seconds a run works before "typing…" shows (tests shrink it)
    stream_interval = 1.0  # seconds between edits of a growing answer (Telegram: ~1/s/chat)
    _handle: Handler | None
    _bot: Bot | None
    _server: TelegramAPIServer | None
    _health: AdapterHealth
    _outbound: ChatQueues[QueuedReply]
    _admins: ChatAdmins

    async def _answer(self, chat: Hashable, incoming: Incoming) -> None:
        """Run the rules on one message or event and answer it (a ChatQueues work); never raises."""
        message, bot = incoming.message, self._bot
        assert self._handle is not None
        try:
            if bot is None:
                return None
            if incoming.callback is not None:
                await _quietly("answerCallbackQuery", bot.answer_callback_query(incoming.callback))
            message.chat_admin = await self._admins.is_admin(incoming.chat_id, message.user)
            assert self._server is not None
            message.api = TelegramApi(bot, self._server, incoming.quoted)
            stream = self._growing(bot, incoming) if message.event is None else None
            message.stream = stream
            async with self._typing(bot, incoming):
                reply = await self._handle(message)
            if incoming.join is not None:
                await self._decide(bot, incoming, reply)
                if reply.error is not None:
                    return None  # a failed decision is logged; the group hears nothing of it
            await self._deliver(incoming, reply, stream)
        except Exception as exc:
            log.exception("telegram.message_failed", message_id=message.message_id, error=repr(exc))
            if isinstance(message.stream, GrowingMessage):  # stop a pending edit; leave it shown
                await message.stream.finish(message.stream.shown)
        return None

    def _typing(self, bot: Bot, incoming: Incoming) -> AbstractAsyncContextManager[Any]:
        if incoming.join is not None or not incoming.chat_id:
            return nullcontext()  # nobody to show it to (the requester is not in the group)

        async def action() -> None:
            await bot.send_chat_action(incoming.chat_id, "typing",
                                       message_thread_id=incoming.thread)  # fmt: skip

        return typing_while(action, after=self.typing_after, every=5.0)

    def _growing(self, bot: Bot, incoming: Incoming) -> GrowingMessage:
        chat, thread = incoming.chat_id, incoming.thread
        quote = _quote(incoming.reply_to)

        async def post(text: str) -> int:
            sent = await bot.send_message(chat, fit_utf16(text), message_thread_id=thread,
                                          reply_parameters=quote)  # fmt: skip
            return sent.message_id

        async def edit(message_id: int, text: str) -> None:
            await bot.edit_message_text(text=fit_utf16(text), chat_id=chat, message_id=message_id)

        return GrowingMessage(post, edit, interval=self.stream_interval, limit=MAX_TEXT)

    async def _decide(self, bot: Bot, incoming: Incoming, reply: Reply) -> None:
        """APPROVE on a join request: approve or decline it at Telegram (None: leave it)."""
        assert incoming.join is not None
        chat, user = incoming.chat_id, incoming.join
        if reply.approve is None:
            log.info("telegram.request_pending", chat=str(chat), user=str(user))
            return
        method = "approveChatJoinRequest" if reply.approve else "declineChatJoinRequest"
        try:
            if reply.approve:
                await bot.approve_chat_join_request(chat, user)
            else:
                await bot.decline_chat_join_request(chat, user)
        except Exception as exc:
            log.warning("telegram.request_failed", method=method, chat=str(chat),
                        user=str(user), error=describe(exc))  # fmt: skip
            return
        log.info("telegram.request_answered", chat=str(chat), user=str(user),
                 approve=reply.approve, reason=reply.approve_reason)  # fmt: skip

    async def _deliver(
        self, incoming: Incoming, reply: Reply, stream: GrowingMessage | None
    ) -> None:
        """The reply's text and parts to the chat (after a growing answer, what it lacks)."""
        text, parts = reply.text, reply.outgoing
        if stream is not None:
            head = (split_text(text) or [""])[0]
            if await stream.finish(head):  # the head is on screen: send only what it lacks
                text = text[len(head) :].lstrip() if text.startswith(head) else ""
                incoming.reply_to = None  # the growing message quoted it already
                if parts and parts.buttons and not text.strip():
                    await self._buttons_on(stream.handle, incoming, parts)
                    parts = Outgoing(parts.images, parts.files)
                elif parts:  # mentions cannot be added to a message already shown
                    parts = Outgoing(parts.images, parts.files, buttons=parts.buttons)
        if not text.strip() and not parts:
            return
        names = {incoming.message.user: incoming.message.user_name}
        try:
            pieces = compose(text, parts, names=names, rules_dir=self.rules_dir)
        except AdapterError as exc:  # a bad part: say so, and send the text alone
            log.error("telegram.reply_invalid", chat=str(incoming.chat_id), error=str(exc))
            pieces = compose(text, None)
        self._queue(incoming.chat_id, pieces, reply_to=_quoted_id(parts, incoming.reply_to),
                    thread=incoming.thread)  # fmt: skip

    async def _buttons_on(self, message_id: Any, incoming: Incoming, parts: Outgoing) -> None:
        """Put the reply's buttons under the growing message once it is final."""
        assert self._bot is not None
        try:
            markup = keyboard(parts.buttons)
        except AdapterError as exc:
            log.error("telegram.reply_invalid", chat=str(incoming.chat_id), error=str(exc))
            return
        await _quietly("editMessageReplyMarkup", self._bot.edit_message_reply_markup(
            chat_id=incoming.chat_id, message_id=message_id, reply_markup=markup))  # fmt: skip

    # -- sending -----------------------------------------------------------------------------

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post ``text`` (and ``outgoing``'s pictures, files, mentions, buttons) to the chat id
        ``target.chat`` (or the private chat of ``target.user``)."""
        chat = (target.chat or target.user).strip()
        if not _CHAT_RE.fullmatch(chat):
            raise AdapterError(
                f"telegram: the target chat must be a chat id (a number, negative for groups) "
                f"or @channelname (got {chat!r})"
            )
        if not text.strip() and not outgoing:
            raise AdapterError("telegram: refusing to send an empty message")
        if self._bot is None:
            raise AdapterError(f"telegram: not connected ({self._health.error or 'starting'})")
        pieces = compose(text, outgoing, rules_dir=self.rules_dir)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        chat_id: int | str = int(chat) if chat[0] != "@" else chat
        self._queue(chat_id, pieces, reply_to=_quoted_id(outgoing, None), done=done)
        await done

    def _queue(
        self,
        chat: int | str,
        pieces: list[Any],
        *,
        reply_to: int | None = None,
        thread: int | None = None,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        """Queue ``pieces`` for ``chat``; the first one quotes ``reply_to``."""
        out = QueuedReply(chat, pieces, reply_to, thread, done)
        out.backoff = Backoff(self.backoff_base, self.backoff_cap)
        if not out.pieces:
            out.finish(None)
            return
        self._outbound.put(str(chat), out)

    async def _send_step(self, key: Hashable, out: QueuedReply) -> float | None:
        """One send of ``out``'s next piece (a ChatQueues work; see ``sending``)."""
        return await send_piece(self._bot, out)


def _quote(message_id: int | None) -> ReplyParameters | None:
    if message_id is None:
        return None
    return ReplyParameters(message_id=message_id, allow_sending_without_reply=True)


def _quoted_id(parts: Outgoing | None, answered: int | None) -> int | None:
    """The message the reply quotes: ``reply_to`` of its parts ("" = the answered message),
    else the answered message."""
    if parts is None or parts.reply_to is None or parts.reply_to == "":
        return answered
    return int(parts.reply_to) if str(parts.reply_to).lstrip("-").isdigit() else answered


async def _quietly(method: str, call: Any) -> bool:
    """Await a Bot API call whose failure must not stop the answer; log it instead."""
    try:
        await call
    except Exception as exc:
        log.warning("telegram.call_failed", method=method, error=describe(exc))
        return False
    return True
