"""Telegram updates that are not chat messages, as tmy events (``EVENT``, ``EVENT_DATA``).

=====================  ===============  =========================================
Telegram               EVENT            USER / CHAT / EVENT_DATA
=====================  ===============  =========================================
``new_chat_members``   member_join      one event per member; USER the member,
                                        ``operator`` who added them ("" when
                                        they joined themselves)
``left_chat_member``   member_leave     USER the member; ``operator`` who removed
                                        them, ``kicked`` true then
``message_reaction``   reaction         USER who reacted; ``message_id``,
                                        ``emoji`` (a custom emoji's id), ``added``;
                                        one event per emoji set or taken back
``callback_query``     button           USER who pressed; ``data``, ``message_id``
                                        of the message carrying the button
``chat_join_request``  join_request     USER the requester; ``comment`` their
                                        bio, ``flag`` their private chat id
=====================  ===============  =========================================

CHAT is the chat the event happened in (a button on an inline message, which
has no chat, answers in the presser's private chat). ``EVENT_RAW`` is the
update's field name. The bot's own joins and leaves are not events for the
rules. Telegram sends ``message_reaction`` only to administrators and only
when asked for it (``allowed_updates``).
"""

from __future__ import annotations

from typing import Any

from aiogram.types import Chat, Update, User
from aiogram.types import Message as TgMessage

from tmy.message import Event, Message

PLATFORM = "telegram"


def events_of(update: Update, me: User) -> list[tuple[Message, dict[str, Any]]]:
    """The events in ``update``, each with what the adapter needs to act on it:
    ``callback`` (the query id to answer), ``join`` (the requester's user id)."""
    raw = update.model_dump(mode="json", exclude_none=True, by_alias=True)
    m = update.message
    if m is not None and m.new_chat_members:
        by = m.from_user
        return [
            (_event(m.chat, u, "member_join", "new_chat_members", raw, me,
                    operator=_other(by, u), message_id=str(m.message_id)), {})
            for u in m.new_chat_members
            if u.id != me.id
        ]  # fmt: skip
    if m is not None and m.left_chat_member is not None and m.left_chat_member.id != me.id:
        u, operator = m.left_chat_member, _other(m.from_user, m.left_chat_member)
        event = _event(m.chat, u, "member_leave", "left_chat_member", raw, me,
                       operator=operator, kicked=bool(operator))  # fmt: skip
        return [(event, {})]
    if update.callback_query is not None:
        return [_button(update, raw, me)]
    if update.message_reaction is not None:
        return _reactions(update, raw, me)
    r = update.chat_join_request
    if r is not None:
        event = _event(r.chat, r.from_user, "join_request", "chat_join_request", raw, me,
                       comment=r.bio or "", flag=str(r.user_chat_id))  # fmt: skip
        return [(event, {"join": r.from_user.id})]
    return []


def _other(operator: User | None, member: User) -> str:
    """``operator``'s id when someone else than ``member`` did it, else ""."""
    return str(operator.id) if operator is not None and operator.id != member.id else ""


def _event(
    chat: Chat | None, user: User, kind: str, raw_kind: str, raw: Any, me: User, **data: Any
) -> Message:
    chat_id = str(chat.id) if chat is not None else str(user.id)
    return Message.new(
        "",
        user=str(user.id),
        chat=chat_id,
        platform=PLATFORM,
        user_name=user.full_name or user.username or str(user.id),
        private=chat is None or chat.type == "private",
        raw=raw,
        self_id=str(me.id),
        event=Event(kind, raw_kind, {"user": str(user.id), "chat": chat_id, **data}),
    )


def _button(update: Update, raw: Any, me: User) -> tuple[Message, dict[str, Any]]:
    q = update.callback_query
    assert q is not None
    carrier = q.message if isinstance(q.message, TgMessage) else None
    chat = q.message.chat if q.message is not None else None
    message_id = str(q.message.message_id) if q.message is not None else ""
    event = _event(chat, q.from_user, "button", "callback_query", raw, me,
                   data=q.data or "", message_id=message_id)  # fmt: skip
    thread = carrier.message_thread_id if carrier is not None and carrier.is_topic_message else None
    return event, {"callback": q.id, "thread": thread}


def _reactions(update: Update, raw: Any, me: User) -> list[tuple[Message, dict[str, Any]]]:
    r = update.message_reaction
    assert r is not None
    who = r.user
    if who is None:  # an anonymous admin reacting as the chat: the chat stands for them
        actor = r.actor_chat or r.chat
        who = User(id=actor.id, is_bot=False, first_name=actor.title or str(actor.id))
    old = [_emoji(x) for x in r.old_reaction]
    new = [_emoji(x) for x in r.new_reaction]
    changes = [(e, True) for e in new if e not in old] + [(e, False) for e in old if e not in new]
    return [
        (_event(r.chat, who, "reaction", "message_reaction", raw, me,
                message_id=str(r.message_id), emoji=emoji, added=added), {})
        for emoji, added in changes
    ]  # fmt: skip


def _emoji(reaction: Any) -> str:
    """A reaction's emoji; a custom emoji's id; ``paid`` for a paid (star) reaction."""
    return getattr(reaction, "emoji", None) or getattr(reaction, "custom_emoji_id", None) or "paid"
