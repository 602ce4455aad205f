"""Running one Slack message or event and answering it (the adapter's half that talks back).

For each :class:`~tmy.adapters.slack.incoming.Incoming`, in its channel's turn:

* the text's ``<@U…>`` mentions are shown as names (the first
  :data:`~tmy.adapters.slack.incoming.MAX_NAMED`) and ``USER_NAME`` is the
  sender's display name (``users.info``, cached: :mod:`~tmy.adapters.slack.users`);
  with ``admins_from`` set, ``Message.chat_admin`` says whether the sender is a
  workspace owner/admin;
* ``Message.api`` downloads files with the bot token and gives the thread's
  first message (REPLY_TO); ``Message.stream`` is a
  :class:`~tmy.adapters.streaming.GrowingMessage`: a ``stream:`` step's answer is
  posted, then edited (``chat.update``) at most once per
  :attr:`Answering.stream_interval` seconds, and the reply's final text is the
  last edit (longer replies continue in further messages);
* the reply goes to the same channel, **into the thread the message came
  from** (a thread reply is answered in its thread); a top-level message is
  answered top-level, unless the reply quotes (``reply: true`` → a thread under
  the message answered, ``reply_to: <ts>`` → under that message). A button's
  answer goes into the thread of the message carrying it.

Slack has no "typing…" for bots (the RTM ``typing`` message is gone with RTM)
and no join requests, so neither is done here.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.fairness import ChatQueues
from tmy.adapters.slack.compose import Piece, compose
from tmy.adapters.slack.incoming import MAX_NAMED, Incoming
from tmy.adapters.slack.media import SlackApi
from tmy.adapters.slack.sending import QueuedReply, error_of, retry_after, send_piece
from tmy.adapters.slack.text import (
    MAX_TEXT,
    escape,
    mentioned_users,
    readable,
    split_text,
    unescape,
)
from tmy.adapters.slack.users import Users
from tmy.adapters.streaming import GrowingMessage
from tmy.config.slack import SlackConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message, Outgoing, Reply, Target

log = get_logger("tmy.adapter.slack")

_CHANNEL_RE = re.compile(r"[CGDUW][A-Z0-9]+")  # a channel/DM id, or a user id (their DM)


class Answering:
    """The answering half of :class:`~tmy.adapters.slack.adapter.SlackAdapter`."""

    config: SlackConfig
    bot_token: str
    rules_dir: Path | None
    backoff_base: float
    backoff_cap: float
    stream_interval = 1.0  # seconds between edits of a growing answer (Slack: ~1 call/s/channel)
    _handle: Handler | None
    _client: AsyncWebClient | None
    _health: AdapterHealth
    _outbound: ChatQueues[QueuedReply]
    _users: Users

    async def _answer(self, chat: Hashable, incoming: Incoming) -> None:
        """Run the rules on one message or event and answer it (a ChatQueues work); never raises."""
        message = incoming.message
        assert self._handle is not None
        try:
            if self._client is None:
                return None
            await self._know(message, incoming)
            message.api = SlackApi(self.bot_token, self.config.api_base, self._quoted)
            stream = self._growing(incoming) if message.event is None else None
            message.stream = stream
            reply = await self._handle(message)
            await self._deliver(incoming, reply, stream)
        except Exception as exc:
            log.exception("slack.message_failed", message_id=message.message_id, error=repr(exc))
            if isinstance(message.stream, GrowingMessage):  # stop a pending edit; leave it shown
                await message.stream.finish(message.stream.shown)
        return None

    async def _know(self, message: Message, incoming: Incoming) -> None:
        """Names for the sender and the users the text mentions; the sender's role."""
        names = await self._users.names([message.user, *incoming.users])
        message.user_name = names.get(message.user) or message.user
        if incoming.raw_text:
            message.text = readable(incoming.raw_text, names)
        message.chat_admin = await self._users.is_admin(message.user, self.config.admins_from)

    async def _quoted(self, message: Message) -> dict[str, Any] | None:
        """The first message of the thread ``message`` is in (``conversations.replies``)."""
        if self._client is None or not message.reply_to:
            return None
        try:
            answer = await self._client.conversations_replies(
                channel=message.chat, ts=message.reply_to, limit=1, inclusive=True
            )
        except SlackApiError as exc:
            log.warning("slack.quote_failed", channel=message.chat, error=error_of(exc))
            return None
        found = [m for m in answer.get("messages") or () if m.get("ts") == message.reply_to]
        if not found:
            return None
        first = found[0]
        text = str(first.get("text") or "")
        names = await self._users.names(mentioned_users(text)[:MAX_NAMED])
        user = str(first.get("user") or first.get("bot_id") or "")
        return {"text": readable(text, names), "user": user, "id": str(first.get("ts"))}

    def _growing(self, incoming: Incoming) -> GrowingMessage:
        channel, thread = incoming.channel, incoming.thread

        async def post(text: str) -> str:
            try:
                sent = await self._api().chat_postMessage(
                    channel=channel, text=_shown(text), thread_ts=thread
                )
            except SlackApiError as exc:
                raise _paced(exc) from exc
            ts = str(sent.get("ts") or "")
            self._posted(channel, ts)
            return ts

        async def edit(ts: str, text: str) -> None:
            try:
                await self._api().chat_update(channel=channel, ts=ts, text=_shown(text))
            except SlackApiError as exc:
                raise _paced(exc) from exc

        return GrowingMessage(post, edit, interval=self.stream_interval, limit=MAX_TEXT)

    def _api(self) -> AsyncWebClient:
        if self._client is None:
            raise AdapterError("slack: the adapter is stopped")
        return self._client

    async def _deliver(
        self, incoming: Incoming, reply: Reply, stream: GrowingMessage | None
    ) -> None:
        """The reply's text and parts to the channel (after a growing answer, what it lacks)."""
        text, parts = reply.text, reply.outgoing
        if stream is not None:
            head = unescape((split_text(escape(text), escaped=True) or [""])[0])  # as sent
            if await stream.finish(head):  # the head is on screen: send only what it lacks
                text = text[len(head) :].lstrip() if text.startswith(head) else ""
                if parts:  # mentions cannot be added to a message already shown
                    parts = Outgoing(parts.images, parts.files, buttons=parts.buttons)
        if not text.strip() and not parts:
            return
        try:
            pieces = compose(text, parts, rules_dir=self.rules_dir)
        except AdapterError as exc:  # a bad part: say so, and send the text alone
            log.error("slack.reply_invalid", channel=incoming.channel, error=str(exc))
            pieces = compose(text, None)
        self._queue(incoming.channel, pieces, _thread_of(parts, incoming))

    # -- sending -----------------------------------------------------------------------------

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post ``text`` (and ``outgoing``'s pictures, files, mentions, buttons) to the channel
        id ``target.chat`` (or the DM of the user id ``target.user``); ``outgoing.reply_to``
        a message ``ts`` puts it in that message's thread."""
        channel = (target.chat or target.user).strip()
        if not _CHANNEL_RE.fullmatch(channel):
            raise AdapterError(
                "slack: the target must be a channel id (C…, G…, D…) or a user id (U…) "
                f"(got {channel!r})"
            )
        if not text.strip() and not outgoing:
            raise AdapterError("slack: refusing to send an empty message")
        if self._client is None or self._health.state == "failed":
            raise AdapterError(f"slack: not connected ({self._health.error or 'starting'})")
        pieces = compose(text, outgoing, rules_dir=self.rules_dir)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        thread = outgoing.reply_to if outgoing is not None and outgoing.reply_to else None
        self._queue(channel, pieces, thread, done)
        await done

    def _queue(
        self,
        channel: str,
        pieces: list[Piece],
        thread: str | None,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        out = QueuedReply(channel, pieces, thread, done)
        out.backoff = Backoff(self.backoff_base, self.backoff_cap)
        if not out.pieces:
            out.finish(None)
            return
        self._outbound.put(channel, out)

    async def _send_step(self, key: Hashable, out: QueuedReply) -> float | None:
        """One call of ``out``'s next piece (a ChatQueues work; see ``sending``)."""
        return await send_piece(self._client, out, self._posted, self._token_refused)

    def _posted(self, channel: str, ts: str) -> None:
        """A message the bot posted (overridden by the adapter: threads it started)."""

    def _token_refused(self, method: str, code: str) -> None:
        """Slack refused the bot token on ``method`` (overridden by the adapter: failed)."""


def _thread_of(parts: Outgoing | None, incoming: Incoming) -> str | None:
    """The thread a reply goes into: the message's own thread; else, when the reply quotes
    (``reply_to`` "" = the message answered, or a ``ts``), a thread under that message."""
    if incoming.thread:
        return incoming.thread
    if parts is None or parts.reply_to is None:
        return None
    if parts.reply_to == "":
        return incoming.message.message_id or None
    return str(parts.reply_to)


def _shown(text: str) -> str:
    """A growing answer as sent: escaped, at most :data:`MAX_TEXT` characters of that (the
    growing text is cut at MAX_TEXT characters before escaping, which may be 5× longer)."""
    return (split_text(escape(text), escaped=True) or [""])[0]


def _paced(exc: SlackApiError) -> Exception:
    """A refused post/edit for :class:`GrowingMessage`: a 429 carries its ``retry_after``."""
    error = AdapterError(f"slack: {error_of(exc)}")
    wait = retry_after(exc)
    if wait is not None:
        error.retry_after = wait  # type: ignore[attr-defined]
    return error
