"""One Telegram update as what the adapter runs: chat messages and events, with where to answer.

A chat message is :func:`~tmy.adapters.telegram.incoming.to_message`, an event
:func:`~tmy.adapters.telegram.events.events_of`; either becomes an
:class:`Incoming`: the Message for the engine and what its reply and the
platform's follow-up need (the chat, the message to quote, the forum topic,
the callback query to answer, the join request to approve).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiogram.types import Update, User

from tmy.adapters.telegram.events import events_of
from tmy.adapters.telegram.incoming import to_message
from tmy.adapters.telegram.media import quoted_of
from tmy.message import Message

# what tmy asks Telegram for: messages (with joins and leaves), reactions, button
# presses, join requests (edits and channel posts are not served)
ALLOWED_UPDATES = ["message", "message_reaction", "callback_query", "chat_join_request"]


@dataclass(slots=True)
class Incoming:
    """A Message for the engine and where its reply goes."""

    message: Message
    chat_id: int
    reply_to: int | None = None  # the message a reply quotes (a chat message's own id)
    thread: int | None = None  # its forum topic
    quoted: dict[str, Any] | None = None  # REPLY_TO, when the message quotes one
    callback: str | None = None  # a button press: the query to answer
    join: int | None = None  # a join request: the requester, approved or declined by APPROVE


def read_update(update: Update, me: User | None) -> list[Incoming]:
    """What ``update`` asks the rules (nothing for what is not served)."""
    if me is None:
        return []
    m = update.message
    message = to_message(update, me)
    if message is not None and m is not None:
        quoted = quoted_of(m.reply_to_message) if message.reply_to is not None else None
        thread = m.message_thread_id if m.is_topic_message else None
        return [Incoming(message, m.chat.id, m.message_id, thread, quoted)]
    found = []
    for event, extra in events_of(update, me):
        chat = int(event.chat) if event.chat.lstrip("-").isdigit() else 0
        thread = extra.get("thread")
        if thread is None and m is not None and m.is_topic_message:
            thread = m.message_thread_id
        callback, join = extra.get("callback"), extra.get("join")
        found.append(Incoming(event, chat, None, thread, callback=callback, join=join))
    return found
