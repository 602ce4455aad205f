"""What a Feishu event becomes for the rules (decisions, documented in the README).

Events arrive in the 2.0 schema ``{"schema": "2.0", "header": {event_id,
event_type, token, …}, "event": {…}}`` over either transport.

* ``im.message.receive_v1``: a chat message. Messages from apps
  (``sender_type: app``) are ignored, so two bots cannot answer each other.
  ``text`` is the text; ``post`` (rich text) its title and paragraphs, its
  pictures as attachments; ``image``/``file`` a placeholder (``[image]``,
  ``[file]``) with the attachment. Mentions arrive as ``@_user_N`` keys in the
  text: the bot's own (its ``open_id``) sets ``mentions_bot`` and is removed,
  anyone else's becomes ``@<name>``. A reply (``parent_id``) to one of the
  bot's messages sets ``mentions_bot`` too.
* ``CHAT`` is the ``chat_id`` (``oc_…``) for groups *and* private (``p2p``)
  chats — Feishu gives a p2p chat its own chat id, and sending to it works the
  same way; ``Message.private`` says which. ``USER`` is the sender's
  ``open_id`` (``ou_…``); events carry no sender name, so ``USER_NAME`` is the
  open_id too.
* Events (``EVENT``): ``im.chat.member.user.added_v1`` → ``member_join`` (one
  per user, ``operator`` who added them), ``…deleted_v1`` → ``member_leave``
  (``kicked`` true, ``operator``), ``…withdrawn_v1`` → ``member_leave`` (left on
  their own), ``im.message.reaction.created_v1``/``deleted_v1`` → ``reaction``
  (``message_id``, ``emoji`` Feishu's emoji_type, ``added``; the event names no
  chat, so the adapter looks the message up), ``card.action.trigger`` →
  ``button`` (``data`` the button's value, ``message_id`` the card).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tmy.message import Attachment, Event, Message

PLATFORM = "feishu"
MEMBER_EVENTS = {
    "im.chat.member.user.added_v1": ("member_join", False),
    "im.chat.member.user.deleted_v1": ("member_leave", True),
    "im.chat.member.user.withdrawn_v1": ("member_leave", False),
}
REACTION_EVENTS = {
    "im.message.reaction.created_v1": True,
    "im.message.reaction.deleted_v1": False,
}
PLACEHOLDERS = {
    "image": "[image]",
    "file": "[file]",
    "audio": "[voice]",
    "media": "[video]",
    "sticker": "[sticker]",
}
_MENTION_KEY = re.compile(r"@_user_\d+|@_all")


@dataclass(slots=True)
class Incoming:
    """One message or event for the rules, with what answering it needs."""

    message: Message
    chat_id: str  # where a reply goes ("" until looked up: a reaction)
    reply_to: str | None = None  # the message a reply answers (None for events)
    thread: bool = False  # it came from a thread: the reply stays in it
    parent: str | None = None  # the quoted message, to ask whether it is the bot's
    lookup: str | None = None  # a message id whose chat must be looked up (reactions)


def read_event(
    envelope: dict[str, Any], bot_open_id: str, app_id: str, api_base: str
) -> list[Incoming]:
    """The messages and events in one 2.0 envelope (``[]``: nothing for the rules)."""
    header = envelope.get("header") or {}
    kind = str(header.get("event_type") or "")
    event = envelope.get("event") or {}
    if not isinstance(event, dict):
        return []
    if kind == "im.message.receive_v1":
        found = _message(event, envelope, bot_open_id, app_id, api_base)
        return [found] if found is not None else []
    if kind in MEMBER_EVENTS:
        return _members(kind, event, envelope, app_id)
    if kind in REACTION_EVENTS:
        return _reaction(kind, event, envelope, app_id)
    if kind == "card.action.trigger":
        return _button(event, envelope, app_id)
    return []


def _open_id(ids: Any) -> str:
    return str(ids.get("open_id") or "") if isinstance(ids, dict) else ""


def _message(
    event: dict[str, Any], raw: Any, bot: str, app_id: str, api_base: str
) -> Incoming | None:
    sender = event.get("sender") or {}
    m = event.get("message") or {}
    if sender.get("sender_type") != "user" or not m.get("chat_id"):
        return None
    user = _open_id(sender.get("sender_id"))
    message_id = str(m.get("message_id") or "")
    text, attachments = _content(m, message_id, api_base)
    text, mentioned = _mentions(text, m.get("mentions") or [], bot)
    if not text.strip() and not attachments:
        return None
    parent = str(m.get("parent_id") or "") or None
    message = Message.new(
        text.strip(),
        user=user,
        chat=str(m["chat_id"]),
        platform=PLATFORM,
        private=m.get("chat_type") == "p2p",
        raw=raw,
        mentions_bot=mentioned,
        reply_to=parent,
        self_id=app_id,
        message_id=message_id,
        attachments=tuple(attachments),
    )
    return Incoming(
        message,
        str(m["chat_id"]),
        reply_to=message_id,
        thread=bool(m.get("thread_id")),
        parent=parent,
    )


def _content(m: dict[str, Any], message_id: str, api_base: str) -> tuple[str, list[Attachment]]:
    """(text, attachments) of a message's ``content`` JSON by its ``message_type``."""
    try:
        content = json.loads(m.get("content") or "{}")
    except ValueError:
        content = {}
    if not isinstance(content, dict):
        content = {}
    kind = m.get("message_type")
    if kind == "text":
        return str(content.get("text") or ""), []
    if kind == "post":
        return _post(content, message_id, api_base)
    key = content.get("image_key") if kind == "image" else content.get("file_key")
    if kind in PLACEHOLDERS and isinstance(key, str) and key:
        att_kind = {"audio": "voice", "media": "video"}.get(str(kind), str(kind))
        resource = "image" if kind == "image" else "file"
        return PLACEHOLDERS[str(kind)], [
            _attachment(
                att_kind, key, message_id, resource, api_base, str(content.get("file_name") or "")
            )
        ]
    return "", []


def _attachment(
    kind: str, key: str, message_id: str, resource: str, api_base: str, name: str = ""
) -> Attachment:
    """The message resource API's URL: downloading it needs the tenant token (inline)."""
    url = (
        f"{api_base.rstrip('/')}/open-apis/im/v1/messages/{message_id}"
        f"/resources/{key}?type={resource}"
    )
    return Attachment(kind, url=url, file_id=key, name=name, inline=True)


def _post(content: dict[str, Any], message_id: str, api_base: str) -> tuple[str, list[Attachment]]:
    """A rich-text message's title and paragraphs as text (mentions kept as their keys)."""
    lines = [str(content["title"])] if content.get("title") else []
    attachments: list[Attachment] = []
    for paragraph in content.get("content") or []:
        parts = []
        for element in paragraph if isinstance(paragraph, list) else []:
            tag = element.get("tag") if isinstance(element, dict) else None
            if tag in ("text", "a", "code_block", "md"):
                parts.append(str(element.get("text") or ""))
            elif tag == "at":
                parts.append(str(element.get("user_id") or ""))
            elif tag == "img" and element.get("image_key"):
                key = str(element["image_key"])
                attachments.append(_attachment("image", key, message_id, "image", api_base))
            elif tag == "emotion":
                parts.append(f":{element.get('emoji_type', '')}:")
        lines.append("".join(parts))
    text = "\n".join(lines).strip()
    return text or (PLACEHOLDERS["image"] if attachments else ""), attachments


def _mentions(text: str, mentions: list[Any], bot: str) -> tuple[str, bool]:
    """Replace ``@_user_N`` keys: the bot's removed (and noted), others by ``@name``."""
    names: dict[str, str] = {}
    mentioned = False
    for mention in mentions:
        if not isinstance(mention, dict):
            continue
        key = str(mention.get("key") or "")
        if bot and _open_id(mention.get("id")) == bot:
            names[key] = ""
            mentioned = True
        else:
            names[key] = "@" + str(mention.get("name") or key.lstrip("@"))

    def swap(match: re.Match[str]) -> str:
        return names.get(match.group(0), match.group(0))

    text = _MENTION_KEY.sub(swap, text)
    return re.sub(r"[ \t]{2,}", " ", text).strip(), mentioned


def _event(
    kind: str,
    raw_kind: str,
    raw: Any,
    app_id: str,
    user: str,
    chat: str,
    name: str = "",
    **data: Any,
) -> Message:
    return Message.new(
        "",
        user=user,
        chat=chat or f"private:{user}",
        platform=PLATFORM,
        user_name=name or user,
        private=not chat,
        raw=raw,
        self_id=app_id,
        event=Event(kind, raw_kind, {"user": user, "chat": chat or f"private:{user}", **data}),
    )


def _members(kind: str, event: dict[str, Any], raw: Any, app_id: str) -> list[Incoming]:
    what, kicked = MEMBER_EVENTS[kind]
    chat = str(event.get("chat_id") or "")
    operator = _open_id(event.get("operator_id"))
    found = []
    for user in event.get("users") or []:
        if not isinstance(user, dict):
            continue
        uid = _open_id(user.get("user_id"))
        data: dict[str, Any] = {"operator": operator if operator != uid else ""}
        if what == "member_leave":
            data["kicked"] = kicked and operator != uid
        message = _event(what, kind, raw, app_id, uid, chat, str(user.get("name") or ""), **data)
        found.append(Incoming(message, chat))
    return found


def _reaction(kind: str, event: dict[str, Any], raw: Any, app_id: str) -> list[Incoming]:
    if event.get("operator_type") not in (None, "user"):
        return []  # an app's reaction (this bot's own among them)
    user = _open_id(event.get("user_id"))
    message_id = str(event.get("message_id") or "")
    emoji = str((event.get("reaction_type") or {}).get("emoji_type") or "")
    message = _event(
        "reaction",
        kind,
        raw,
        app_id,
        user,
        "",
        message_id=message_id,
        emoji=emoji,
        added=REACTION_EVENTS[kind],
    )
    return [Incoming(message, "", lookup=message_id)]


def _button(event: dict[str, Any], raw: Any, app_id: str) -> list[Incoming]:
    user = _open_id(event.get("operator"))
    context = event.get("context") or {}
    chat = str(context.get("open_chat_id") or "")
    value = (event.get("action") or {}).get("value")
    data = value.get("data") if isinstance(value, dict) and "data" in value else value
    data = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    message = _event(
        "button",
        "card.action.trigger",
        raw,
        app_id,
        user,
        chat,
        data=data,
        message_id=str(context.get("open_message_id") or ""),
    )
    return [Incoming(message, chat)]


def with_chat(incoming: Incoming, chat: str) -> Incoming:
    """A looked-up event (a reaction) placed in ``chat``."""
    m = incoming.message
    m.chat, m.private = chat, False
    if m.event is not None:
        m.event.data["chat"] = chat
    incoming.chat_id = chat
    return incoming
