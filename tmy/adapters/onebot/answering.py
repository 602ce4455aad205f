"""Answering one OneBot message or event: the engine, then its reply queued for the chat.

A mixin of :class:`~tmy.adapters.onebot.adapter.OneBotAdapter` (its ``config``,
``_accounts``, ``_outbound``, ``_answer``, ``rules_dir``): :meth:`Answering._run` is the
inbound ChatQueues' work. The usual message — a text reply the engine gives at once, a
FAQ answer (:func:`tmy.types.answer_of`) — is answered as its event is read, no task
made; a run that awaits, a request to accept or decline, a reply with parts (local
files to read) goes on in the coroutine :meth:`Answering._answered`, on a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Hashable
from pathlib import Path
from typing import Any

from tmy.adapters.onebot.outbound import localize
from tmy.adapters.onebot.requests import answer_request
from tmy.adapters.onebot.sending import Outgoing, addressing_of, sentence_stream
from tmy.adapters.streaming import SentenceChunks
from tmy.logs import get_logger
from tmy.message import Message, Reply
from tmy.message import Outgoing as Parts
from tmy.types import Answer

log = get_logger("tmy.adapter.onebot")


class Answering:
    """The inbound work of the OneBot adapter (see the module docstring)."""

    config: Any
    rules_dir: Path | None
    media_private_hosts: tuple[str, ...]
    _accounts: Any
    _outbound: Any
    _answer: Answer | None

    def _run(
        self, key: Hashable, incoming: tuple[Message, dict[str, Any]]
    ) -> Coroutine[Any, Any, None] | None:
        """Answer one message or event (a ChatQueues work; its first delivery, checked as it
        arrived): the engine, then queue the reply (and answer a request). A text reply the
        engine gives at once (a FAQ answer: :func:`~tmy.types.answer_of`) is queued here
        (None: done, no task); else the coroutine that awaits the rest."""
        self_id = key[0]  # type: ignore[index]
        message, event = incoming
        try:
            if message.reply_to is not None and message.reply_to in self._accounts.sent(self_id):
                message.mentions_bot = True  # quotes a send whose id arrived after the event
            assert self._answer is not None
            config = self.config
            addressing = (  # the defaults add neither a quote nor an @: no call for them
                addressing_of(config, message, event)
                if config.quote_reply or config.at_sender
                else {}
            )
            reply = self._answer(message)
            stream = None
            if type(reply) is Reply:  # answered at once: nothing was streamed
                if message.event is None and reply.outgoing is None:
                    self._queue_reply(key, message, reply.text, None, addressing)
                    return None
            elif message.event is None:  # a run to await, not made yet: it may stream
                stream = message.stream = sentence_stream(self._outbound, key, message, addressing)
        except Exception:
            log.exception("onebot.message_failed", self_id=self_id, message_id=message.message_id)
            return None
        return self._answered(key, message, reply, stream, addressing)

    async def _answered(
        self,
        key: Hashable,
        message: Message,
        reply: Reply | Callable[[], Awaitable[Reply]],
        stream: SentenceChunks | None,
        addressing: dict[str, Any],
    ) -> None:
        """:meth:`_run`'s rest when the reply is awaited, answers a request, or has parts."""
        try:
            if type(reply) is not Reply:
                reply = await reply()  # type: ignore[operator]
            assert type(reply) is Reply
            if message.event is not None and message.event.is_request:
                await answer_request(self._accounts, message, reply)
                if reply.error is not None:
                    return None  # a requester is no friend yet: no error text goes to them
            if reply.outgoing is None:  # the usual text reply: nothing to read first
                self._queue_reply(key, message, reply.text, stream, addressing)
            else:
                await self._reply(key, message, reply, stream, addressing)
        except Exception:
            self_id = key[0]  # type: ignore[index]
            log.exception("onebot.message_failed", self_id=self_id, message_id=message.message_id)
        return None

    async def _reply(
        self,
        key: Hashable,
        message: Message,
        reply: Reply,
        stream: SentenceChunks | None,
        addressing: dict[str, Any],
    ) -> None:
        """:meth:`_queue_reply` for a reply with parts, their local files read first."""
        local = await localize(reply.outgoing, self.rules_dir, self.media_private_hosts)
        self._queue_reply(key, message, reply.text, stream, addressing, reply.outgoing, local)

    def _queue_reply(
        self,
        key: Hashable,
        message: Message,
        text: str,
        stream: SentenceChunks | None,
        addressing: dict[str, Any],
        parts: Parts | None = None,
        local: dict[str, str] | None = None,
    ) -> None:
        """Queue ``text`` (and ``parts``) for the chat — what a stream has not yet sent —
        with ``addressing`` (the quote and @) unless a streamed sentence already carried it."""
        if stream is not None and stream.sent:
            text, addressing = stream.rest(text) or "", {}
        if parts is None and not addressing:  # the usual reply: text alone
            out = Outgoing.of(message.chat, text)
            if out.pieces:
                self._outbound.put(key, out)
            return
        out = Outgoing.of(
            message.chat,
            text,
            parts=parts,
            answering=message.message_id,
            local=local,
            **addressing,
        )
        if out.pieces:
            self._outbound.put(key, out)
