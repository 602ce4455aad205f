"""What a Satori ``EVENT`` becomes for the rules: a :class:`~tmy.message.Message`, or an
event Message (``Message.event``), with what answering it needs.

=========================  ===============  ==================================================
Satori event               EVENT            USER, CHAT, EVENT_DATA
=========================  ===============  ==================================================
``message-created``        (a message)      the author; the channel (``channel.type`` 1,
                                            DIRECT, is a private chat)
``guild-member-added``     member_join      the member; the channel (else the guild);
                                            ``operator``, ``guild``
``guild-member-removed``   member_leave     ``operator``, ``kicked`` (an operator other
                                            than the member), ``guild``
``reaction-added/-removed`` reaction        ``message_id``, ``emoji``, ``added``
``message-deleted``        message_recall   the author; ``operator``, ``message_id``
``interaction/button``     button           who pressed; ``data`` (the button id),
                                            ``message_id``
``friend-request``         friend_request   the requester, private; ``comment``, ``flag``
``guild-request``          group_invite     who invited (private); ``group``, ``comment``,
                                            ``flag``
``guild-member-request``   join_request     the requester; the guild; ``comment``, ``flag``
=========================  ===============  ==================================================

A request's ``flag`` is the ``message.id`` Satori gives it (the id
``friend.approve`` / ``guild.approve`` / ``guild.member.approve`` take), its
``comment`` the ``message.content``. PLATFORM is ``satori:<login.platform>`` and
``self_id`` the login's user id; messages the bot wrote itself are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tmy.adapters.satori.incoming import Content, read_content
from tmy.message import Attachment, Event, Message

DIRECT = 1  # Channel.type of a private channel
REQUESTS = {
    "friend-request": ("friend_request", "friend.approve"),
    "guild-request": ("group_invite", "guild.approve"),
    "guild-member-request": ("join_request", "guild.member.approve"),
}


@dataclass(slots=True)
class Incoming:
    """One message or event to run, with where its answer goes."""

    message: Message
    platform: str  # the login's platform (qq, discord …)
    self_id: str  # the login's user id
    channel: str  # where the answer goes ("" for a request that has no channel)
    guild: str = ""
    quote_id: str | None = None  # the message the answer quotes
    quoted: dict[str, Any] | None = None  # REPLY_TO, when the quote carried it
    approve_with: str = ""  # the API answering a request (friend.approve …)
    member_roles: tuple[str, ...] | None = None  # roles the event carried, if any

    @property
    def key(self) -> tuple[str, str, str]:
        """The chat's queue: account and channel (two accounts in one channel are two)."""
        return (self.platform, self.self_id, self.channel or f"private:{self.message.user}")


def read_event(
    body: dict[str, Any], platform: str, self_id: str, sent_by_bot: frozenset[str] = frozenset()
) -> Incoming | None:
    """The Incoming ``body`` (an EVENT's body) is, or None for what tmy does not take.

    ``sent_by_bot``: ids of messages this account sent, so quoting one is replying to the bot.
    """
    kind = body.get("type")
    if kind == "message-created":
        return _message(body, platform, self_id, sent_by_bot)
    if kind == "guild-member-added":
        return _member(body, platform, self_id, "member_join")
    if kind == "guild-member-removed":
        return _member(body, platform, self_id, "member_leave")
    if kind in ("reaction-added", "reaction-removed"):
        emoji = _obj(body, "emoji")
        data = {"message_id": _id(body, "message"), "added": kind == "reaction-added",
                "emoji": str(emoji.get("name") or emoji.get("id") or "")}  # fmt: skip
        return _event(body, platform, self_id, "reaction", data)
    if kind == "message-deleted":
        data = {"operator": _id(body, "operator"), "message_id": _id(body, "message")}
        return _event(body, platform, self_id, "message_recall", data)
    if kind == "interaction/button":
        data = {"data": _id(body, "button"), "message_id": _id(body, "message")}
        return _event(body, platform, self_id, "button", data)
    if kind in REQUESTS:
        return _request(body, platform, self_id, kind)
    return None


def _message(
    body: dict[str, Any], platform: str, self_id: str, sent_by_bot: frozenset[str]
) -> Incoming | None:
    message, channel = _obj(body, "message"), _obj(body, "channel")
    user = _user(body)
    if not user or user == self_id:
        return None  # the bot's own message (some servers echo them)
    content = read_content(str(message.get("content") or ""), self_id)
    _quote_field(message, content)
    private = channel.get("type") == DIRECT
    if content.reply_to is not None and not private:
        quoted_user = (content.quoted or {}).get("user", "")
        if quoted_user == self_id or content.reply_to in sent_by_bot:
            content.mentions_bot = True  # a reply to the bot addresses it
    msg = Message.new(
        content.text,
        user=user,
        chat=str(channel.get("id") or ""),
        platform=f"satori:{platform}",
        user_name=_name(body),
        private=private,
        raw=body,
        mentions_bot=content.mentions_bot,
        reply_to=content.reply_to,
        self_id=self_id,
        message_id=str(message.get("id") or ""),
        attachments=tuple[Attachment, ...](content.attachments),
    )
    return Incoming(
        msg, platform, self_id, msg.chat, guild=_id(body, "guild"),
        quote_id=msg.message_id or None, quoted=content.quoted, member_roles=_roles(body),
    )  # fmt: skip


def _quote_field(message: dict[str, Any], content: Content) -> None:
    """``message.quote`` (a Message: Koishi's adapters fill it beside or instead of a
    ``<quote>`` element) as ``reply_to`` and REPLY_TO."""
    quote = message.get("quote")
    if content.reply_to is not None or not isinstance(quote, dict) or not quote.get("id"):
        return
    user = quote.get("user") if isinstance(quote.get("user"), dict) else {}
    text = read_content(str(quote.get("content") or ""), "").text
    content.reply_to = str(quote["id"])
    content.quoted = {"text": text, "user": str(user.get("id") or ""), "id": content.reply_to}


def _member(body: dict[str, Any], platform: str, self_id: str, kind: str) -> Incoming:
    operator, user = _id(body, "operator"), _user(body)
    data: dict[str, Any] = {"operator": operator, "guild": _id(body, "guild")}
    if kind == "member_leave":
        data["kicked"] = bool(operator) and operator != user
    return _event(body, platform, self_id, kind, data)


def _request(body: dict[str, Any], platform: str, self_id: str, raw_kind: str) -> Incoming:
    kind, method = REQUESTS[raw_kind]
    message = _obj(body, "message")
    data: dict[str, Any] = {"flag": str(message.get("id") or ""),
                            "comment": str(message.get("content") or "")}  # fmt: skip
    if kind == "group_invite":
        data["group"] = _id(body, "guild")
    incoming = _event(body, platform, self_id, kind, data, private=kind != "join_request")
    incoming.approve_with = method
    if kind != "join_request":
        incoming.channel = ""  # answered in a private channel made on demand, if at all
    return incoming


def _event(
    body: dict[str, Any],
    platform: str,
    self_id: str,
    kind: str,
    data: dict[str, Any],
    *,
    private: bool | None = None,
) -> Incoming:
    user = _user(body) or _id(body, "operator")
    channel = _obj(body, "channel")
    if private is None:
        private = channel.get("type") == DIRECT
    chat = str(channel.get("id") or _id(body, "guild"))
    if private and channel.get("type") != DIRECT:
        chat = ""  # no private channel given: CHAT is private:<user>
    fields = {**data, "user": user, "chat": chat or f"private:{user}"}
    message = Message.new(
        "",
        user=user,
        chat=chat,
        platform=f"satori:{platform}",
        user_name=_name(body),
        private=private,
        raw=body,
        self_id=self_id,
        event=Event(kind, str(body.get("type") or ""), fields),
    )
    return Incoming(message, platform, self_id, chat, guild=_id(body, "guild"))


def _obj(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    return value if isinstance(value, dict) else {}


def _id(body: dict[str, Any], key: str) -> str:
    return str(_obj(body, key).get("id") or "")


def _user(body: dict[str, Any]) -> str:
    """The event's user: ``user`` (promoted), else the member's or the message's own."""
    for holder in (body, _obj(body, "member"), _obj(body, "message")):
        found = _id(holder, "user")
        if found:
            return found
    return ""


def _name(body: dict[str, Any]) -> str:
    """A display name: the member's nick in the guild, else the user's nick, else name."""
    member, user = _obj(body, "member"), _obj(body, "user")
    return str(member.get("nick") or member.get("name") or user.get("nick")
               or user.get("name") or "")  # fmt: skip


def _roles(body: dict[str, Any]) -> tuple[str, ...] | None:
    """The member's roles as the event carries them (Koishi's OneBot adapter: owner,
    admin, member); None when it carries none."""
    roles = _obj(body, "member").get("roles")
    if not isinstance(roles, list):
        return None
    out = []
    for role in roles:
        if isinstance(role, dict):
            out.append(str(role.get("name") or role.get("id") or ""))
        else:
            out.append(str(role))
    return tuple(out)
