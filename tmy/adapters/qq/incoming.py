"""What a QQ dispatch becomes for the rules (decisions, documented in the README).

=========================  ==================  ============================  ==========
QQ event (``t``)           CHAT                USER                          private
=========================  ==================  ============================  ==========
GROUP_AT_MESSAGE_CREATE    ``group:<openid>``  the member's member_openid    no
C2C_MESSAGE_CREATE         ``private:<openid>`` the user's user_openid       yes
AT_MESSAGE_CREATE          ``channel:<id>``    the author's id               no
MESSAGE_CREATE (private    ``channel:<id>``    the author's id               no
guild bots: all messages)
DIRECT_MESSAGE_CREATE      ``dm:<guild_id>``   the author's id               yes
GUILD_MEMBER_ADD/REMOVE    ``guild:<id>``      the member's id               no
=========================  ==================  ============================  ==========

* QQ delivers a group message only when it @-mentions the bot, so every group
  message has ``mentions_bot``; in a guild channel ``AT_MESSAGE_CREATE`` always
  mentions the bot and ``MESSAGE_CREATE`` does when ``mentions`` lists it or it
  quotes one of the bot's own messages (their ids are kept as they are sent). The
  bot's ``<@!id>`` / ``<@id>`` is removed from the text.
* Attachments (``content_type`` ``image/…``, ``video/…``, ``voice``, ``file``)
  become :class:`~tmy.message.Attachment`; a message with only attachments reads
  as their placeholder (``[image]``).
* A guild message quoting another (``message_reference``) has ``reply_to`` its id
  (REPLY_TO itself stays empty: QQ's events do not carry the quoted text).
* Guild members' ``roles`` are QQ's role ids: ``4`` the guild's creator
  (``admins_from: owner``), ``2`` a super admin and ``5`` a channel admin
  (``admins_from: admin``). Groups and C2C give no roles.
* ``GUILD_MEMBER_ADD`` / ``GUILD_MEMBER_REMOVE`` are ``member_join`` /
  ``member_leave`` (``operator``: ``op_user_id`` when someone else did it). QQ's
  official API has no member-join event for groups; ``GROUP_ADD_ROBOT`` and
  ``FRIEND_ADD`` (the bot itself added) fit none of tmy's event kinds and are
  not events for the rules. Messages from bots are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from tmy.adapters.base import placeholder
from tmy.errors import AdapterError
from tmy.message import Attachment, Event, Message

PLATFORM = "qq"
OWNER_ROLES = frozenset({"4"})  # 频道主 (the guild's creator)
ADMIN_ROLES = frozenset({"2", "5"})  # 超级管理员, 子频道管理员
MESSAGE_EVENTS = frozenset(
    {
        "GROUP_AT_MESSAGE_CREATE",
        "C2C_MESSAGE_CREATE",
        "AT_MESSAGE_CREATE",
        "MESSAGE_CREATE",
        "DIRECT_MESSAGE_CREATE",
    }
)


@dataclass(slots=True)
class Incoming:
    """One message or event for the rules, with what answering it needs.

    ``kind`` is where a reply goes (``group``, ``c2c``, ``channel``, ``dm``,
    ``guild``), ``target`` the id in its URL; ``msg_id`` makes the reply a passive
    one (``event_id`` for an event); ``admin`` is the sender's guild roles read
    against ``admins_from``.
    """

    message: Message
    kind: str
    target: str
    msg_id: str = ""
    event_id: str = ""

    @property
    def chat(self) -> str:
        return self.message.chat


def read_dispatch(
    kind: str,
    d: Any,
    event_id: str,
    me: dict[str, str],
    admins_from: tuple[str, ...],
    own: Container[str] = (),
) -> Incoming | None:
    """The Incoming for one dispatch ``t=kind`` with data ``d``, or None: not for the rules.

    ``own`` holds ids of the bot's own guild messages: quoting one addresses the bot."""
    if not isinstance(d, dict):
        return None
    if kind in MESSAGE_EVENTS:
        return _message(kind, d, me, admins_from, own)
    if kind in ("GUILD_MEMBER_ADD", "GUILD_MEMBER_REMOVE"):
        return _member(kind, d, event_id, me)
    return None


def _message(
    kind: str,
    d: dict[str, Any],
    me: dict[str, str],
    admins_from: tuple[str, ...],
    own: Container[str],
) -> Incoming | None:
    author = d.get("author") or {}
    if author.get("bot"):
        return None
    attachments = attachments_of(d.get("attachments"))
    text = str(d.get("content") or "")
    mentioned = True
    if kind == "GROUP_AT_MESSAGE_CREATE":
        user = str(author.get("member_openid") or author.get("id") or "")
        target = str(d.get("group_openid") or "")
        where, chat, private = "group", f"group:{target}", False
    elif kind == "C2C_MESSAGE_CREATE":
        user = str(author.get("user_openid") or author.get("id") or "")
        where, target, chat, private = "c2c", user, f"private:{user}", True
    elif kind == "DIRECT_MESSAGE_CREATE":
        user = str(author.get("id") or "")
        target = str(d.get("guild_id") or "")
        where, chat, private = "dm", f"dm:{target}", True
    else:  # AT_MESSAGE_CREATE, MESSAGE_CREATE: a guild's text channel
        user = str(author.get("id") or "")
        target = str(d.get("channel_id") or "")
        where, chat, private = "channel", f"channel:{target}", False
        if kind == "MESSAGE_CREATE":
            bot_id = me.get("id", "")
            quoted_id = str((d.get("message_reference") or {}).get("message_id") or "")
            mentioned = quoted_id in own or any(
                str(m.get("id")) == bot_id for m in d.get("mentions") or ()
            )
    text = strip_mention(text, me.get("id", "")).strip()
    if not text:
        text = placeholder(attachments)
    if not text or not user or not target:
        return None
    roles = {str(r) for r in (d.get("member") or {}).get("roles") or ()}
    quoted = (d.get("message_reference") or {}).get("message_id")  # guild messages only
    message = Message.new(
        text,
        user=user,
        chat=chat,
        platform=PLATFORM,
        user_name=str(author.get("username") or (d.get("member") or {}).get("nick") or user),
        private=private,
        raw=d,
        mentions_bot=mentioned if not private else False,
        reply_to=str(quoted) if quoted else None,
        self_id=me.get("app_id", ""),
        message_id=str(d.get("id") or ""),
        attachments=attachments,
        chat_admin=is_admin(roles, admins_from) if where == "channel" else False,
        api=MEDIA,
    )
    return Incoming(message, where, target, msg_id=message.message_id)


def _member(kind: str, d: dict[str, Any], event_id: str, me: dict[str, str]) -> Incoming | None:
    user = d.get("user") or {}
    user_id, guild = str(user.get("id") or ""), str(d.get("guild_id") or "")
    if not user_id or not guild or user_id == me.get("id") or user.get("bot"):
        return None
    operator = str(d.get("op_user_id") or "")
    operator = "" if operator == user_id else operator
    chat = f"guild:{guild}"
    data: dict[str, Any] = {"user": user_id, "chat": chat, "operator": operator, "guild": guild}
    event_kind = "member_join"
    if kind == "GUILD_MEMBER_REMOVE":
        event_kind, data["kicked"] = "member_leave", bool(operator)
    message = Message.new(
        "",
        user=user_id,
        chat=chat,
        platform=PLATFORM,
        user_name=str(d.get("nick") or user.get("username") or user_id),
        private=False,
        raw=d,
        self_id=me.get("app_id", ""),
        event=Event(event_kind, kind, data),
    )
    return Incoming(message, "guild", guild, event_id=event_id)


class QQMedia:
    """``Message.api`` for QQ: attachment URLs are QQ's CDN links, which expire (and which
    some fetchers are refused), so they are marked ``inline`` and tmy downloads them
    itself; QQ's events carry no quoted message (REPLY_TO is empty)."""

    async def media_source(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        if not attachment.url:
            raise AdapterError(f"qq: the {attachment.kind} {attachment.name!r} has no URL")
        return attachment.url, {}

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        return None


MEDIA = QQMedia()


def strip_mention(text: str, bot_id: str) -> str:
    """``text`` without the bot's ``<@!id>`` / ``<@id>`` mentions."""
    if not bot_id:
        return text
    return re.sub(rf"<@!?{re.escape(bot_id)}>\s*", "", text)


def attachments_of(items: Any) -> tuple[Attachment, ...]:
    """QQ's ``attachments`` as tmy Attachments (a URL without scheme gets https)."""
    found: list[Attachment] = []
    for item in items or ():
        if not isinstance(item, dict):
            continue
        mime = str(item.get("content_type") or "")
        head = mime.partition("/")[0]
        kind = {"image": "image", "video": "video", "audio": "voice", "voice": "voice"}.get(
            head, "file"
        )
        url = str(item.get("url") or "")
        if url and "://" not in url:
            url = "https://" + url.lstrip("/")
        size = item.get("size")
        found.append(
            Attachment(
                kind,
                url=url,
                size=int(size) if isinstance(size, int) else None,
                mime=mime if "/" in mime else "",
                name=str(item.get("filename") or ""),
                inline=True,
            )
        )
    return tuple(found)


def is_admin(roles: set[str], admins_from: tuple[str, ...]) -> bool:
    """Whether guild ``roles`` make their holder an admin by ``admins_from``."""
    wanted: set[str] = set()
    if "owner" in admins_from:
        wanted |= OWNER_ROLES
    if "admin" in admins_from:
        wanted |= ADMIN_ROLES
    return bool(roles & wanted)
