"""What a Slack event becomes for the rules: chat messages (decisions, as in the README).

* ``message`` events in channels, private channels, group DMs and DMs, and
  ``app_mention``: Slack sends both for one message that mentions the bot
  when the app subscribes to both; they carry the same channel and ``ts``, the
  message's id, so the delivery check (:mod:`tmy.adapters.dedup`, keyed
  ``<channel>:<ts>``) runs it once;
* skipped: messages from bots (``bot_id``, ``bot_message``) and the bot's own,
  so two bots cannot answer each other forever; subtypes that are not a user
  writing (edits, joins, channel topic changes …) except ``file_share`` (a
  message with files) and ``thread_broadcast`` (a thread reply also sent to the
  channel); a deletion is the ``message_recall`` event
  (:mod:`~tmy.adapters.slack.events`);
* ``mentions_bot``: the bot's ``<@BOT>`` in the text (removed from it), or a
  message in a thread whose first message is the bot's (Slack's
  ``parent_user_id``, or a thread the bot started in this process);
* files become attachments (:mod:`~tmy.adapters.slack.media`); a message
  without text reads as their placeholder (``[image]``, ``[file]`` …);
* ``CHAT`` is the channel id (``C…`` channel, ``G…`` private channel or group
  DM, ``D…`` DM), ``USER`` the user id (``U…``/``W…``); a DM (``im``) is
  private. ``reply_to`` is the thread's first message when the message is a
  thread reply, and the answer goes into that thread.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from tmy.adapters.base import placeholder
from tmy.adapters.slack.media import attachments_of
from tmy.adapters.slack.text import mentioned_users, strip_bot_mention
from tmy.message import Message

PLATFORM = "slack"
USER_SUBTYPES = frozenset({"", "file_share", "thread_broadcast", "me_message"})
# mentions of one message shown by name (each a users.info call, rate-limited per
# workspace); the rest read as their <@U…|label> label or their id
MAX_NAMED = 50


@dataclass(frozen=True, slots=True)
class Me:
    """Who the bot is (``auth.test``)."""

    user_id: str
    bot_id: str = ""
    team_id: str = ""
    team: str = ""


@dataclass(slots=True)
class Incoming:
    """A Message for the engine, its delivery key and where its reply goes."""

    message: Message
    key: str  # the delivery's id for the dedup check: "<channel>:<ts>", an event_id …
    channel: str
    thread: str | None = None  # the thread the reply goes into (None: the channel itself)
    raw_text: str = ""  # the text as Slack wrote it (its <@U…> markup made readable later)
    users: list[str] = field(default_factory=list)  # users whose names the text needs


def to_message(event: dict[str, Any], me: Me, threads: Container[str]) -> Incoming | None:
    """The Incoming for a ``message`` or ``app_mention`` event, or None when it is not for
    the rules. ``threads``: first messages of threads the bot started (their ``ts``)."""
    subtype = event.get("subtype") or ""
    user = event.get("user") or ""
    if subtype not in USER_SUBTYPES or event.get("bot_id") or not user or user == me.user_id:
        return None
    channel, ts = event.get("channel") or "", event.get("ts") or ""
    if not channel or not ts or event.get("hidden"):
        return None
    attachments = attachments_of(event.get("files") or ())
    text = event.get("text") or ""
    if not text.strip():
        text = placeholder(attachments)
        if not text:
            return None
    text, mentioned = strip_bot_mention(text, me.user_id)
    thread = event.get("thread_ts") or None
    in_thread = thread is not None and thread != ts
    if in_thread and (event.get("parent_user_id") == me.user_id or thread in threads):
        mentioned = True
    private = event.get("channel_type") == "im" or channel.startswith("D")
    message = Message.new(
        text,
        user=user,
        chat=channel,
        platform=PLATFORM,
        private=private,
        raw=event,
        mentions_bot=mentioned,
        reply_to=thread if in_thread else None,
        self_id=me.user_id,
        message_id=ts,
        attachments=attachments,
    )
    named = mentioned_users(text)[:MAX_NAMED]
    return Incoming(message, f"{channel}:{ts}", channel, thread, text, named)
