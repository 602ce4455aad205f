"""What a Telegram update becomes for the rules (decisions, documented in the README).

* messages from bots (``from.is_bot``) are ignored, so two bots cannot answer
  each other forever (this includes anonymous group admins, who post as
  ``@GroupAnonymousBot``);
* the text is ``text``, or the ``caption`` of a photo/video/document, or for
  a file without caption its placeholder (``[image]``, ``[sticker]`` …: see
  :mod:`~tmy.adapters.telegram.media`); the files are ``attachments``; a
  message with none of these (a service message) is not a chat message
  (:mod:`~tmy.adapters.telegram.events` reads joins and leaves);
* ``/command@thisbot`` becomes ``/command``; a message that starts with a
  command for **another** bot (``/start@otherbot``) is ignored, as Telegram
  means it for that bot only;
* ``mentions_bot`` is set by an ``@thisbot`` mention (stripped from the text),
  a ``text_mention`` of the bot (stripped too), a reply to one of the bot's
  messages, or a message that starts with a command (bare ``/cmd`` or
  ``/cmd@thisbot``: Telegram treats commands as addressed to bots);
* ``CHAT`` is the chat id (negative for groups), ``USER`` the sender's user id,
  ``USER_NAME`` their full name.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiogram.types import MessageEntity, Update, User

from tmy.adapters.base import placeholder
from tmy.adapters.telegram.media import attachments_of
from tmy.adapters.telegram.text import utf16_index
from tmy.message import Message

PLATFORM = "telegram"


def to_message(update: Update, me: User | None) -> Message | None:
    """The tmy Message for one update, or None when it is not for the rules."""
    m = update.message
    if m is None or me is None:
        return None
    sender = m.from_user
    if sender is None or sender.is_bot:
        return None
    attachments = attachments_of(m)
    if m.text is not None:
        text, entities = m.text, m.entities
    elif m.caption is not None:
        text, entities = m.caption, m.caption_entities
    elif attachments:
        text, entities = placeholder(attachments), None
    else:
        return None  # a service message (events.py), a poll, a location …
    text, mentioned = read_addressing(text, entities or [], me.id, me.username or "")
    if text is None:
        return None  # a command for another bot
    reply_to = None
    quoted = m.reply_to_message
    # in a forum topic every message "replies" to the topic's first message: not a quote
    if quoted is not None and not (m.is_topic_message and quoted.forum_topic_created):
        reply_to = str(quoted.message_id)
        if quoted.from_user is not None and quoted.from_user.id == me.id:
            mentioned = True
    return Message.new(
        text,
        user=str(sender.id),
        chat=str(m.chat.id),
        platform=PLATFORM,
        user_name=sender.full_name or sender.username or str(sender.id),
        private=m.chat.type == "private",
        raw=update.model_dump(mode="json", exclude_none=True, by_alias=True),
        mentions_bot=mentioned,
        reply_to=reply_to,
        self_id=str(me.id),
        message_id=str(m.message_id),
        attachments=attachments,
    )


def read_addressing(
    text: str, entities: Sequence[MessageEntity], bot_id: int, username: str
) -> tuple[str | None, bool]:
    """(text for the rules, addressed to the bot?) — text is None for another bot's command.

    Strips ``@username`` mentions and text mentions of the bot, turns
    ``/cmd@username`` into ``/cmd``; a leading command (bare or for this bot)
    counts as addressed to the bot.
    """
    name = username.lower()
    cuts: list[tuple[int, int, str]] = []
    addressed = False
    for entity in sorted(entities, key=lambda e: e.offset):
        start = utf16_index(text, entity.offset)
        end = utf16_index(text, entity.offset + entity.length)
        span = text[start:end]
        if entity.type == "mention" and name and span[1:].lower() == name:
            cuts.append((start, end, ""))
            addressed = True
        elif entity.type == "text_mention" and entity.user is not None:
            if entity.user.id == bot_id:
                cuts.append((start, end, ""))
                addressed = True
        elif entity.type == "bot_command":
            command, at, target = span.partition("@")
            if at and target.lower() != name:
                if not text[:start].strip():
                    return None, False  # the message is a command for another bot
                continue
            if at:
                cuts.append((start, end, command))
            if not text[:start].strip():
                addressed = True
    for start, end, replacement in reversed(cuts):
        text = _cut(text, start, end, replacement)
    return text.strip(), addressed


def _cut(text: str, start: int, end: int, replacement: str) -> str:
    """Replace ``text[start:end]``; a removed mention takes one side's spacing with it."""
    before, after = text[:start], text[end:]
    if replacement:
        return before + replacement + after
    if not before.strip():  # "@bot, hello" -> "hello"
        after = after.lstrip(" \t").lstrip(",:，：").lstrip()
    elif before[-1:].isspace():  # "hi @bot there" -> "hi there"
        after = after.lstrip(" \t")
    return before + after
