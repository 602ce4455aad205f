"""A ``/sync`` answer read into what tmy's rules get: messages and events per room.

=========================  ==============  ======================================
Matrix event               tmy             USER / EVENT_DATA
=========================  ==============  ======================================
``m.room.message``         a message       ``m.text`` / ``m.emote`` text;
                                           ``m.image`` ``m.file`` ``m.audio``
                                           ``m.video`` attachments
``m.room.member`` join     member_join     the member; ``operator`` who invited
                                           them, when tmy saw the invite (else "")
``m.room.member`` leave    member_leave    the member; ``operator`` who removed
(or ban)                                   them, ``kicked`` true then
``m.reaction``             reaction        who reacted; ``message_id``,
                                           ``emoji`` (the key), ``added``
``m.room.redaction``       reaction        a reaction taken back (``added``
                                           false), when tmy saw it given
``m.room.redaction``       message_recall  the author when tmy saw the message
                                           (else who redacted); ``operator``
=========================  ==============  ======================================

Left out on purpose: ``m.notice`` (what bots send: answering it would let two
bots talk to each other forever), edits (``m.replace``: the message was answered
when it was sent), the bot's own events, and a member's display-name or avatar
change (a ``join`` after a ``join``). An ``m.room.encrypted`` event is reported
as such (:attr:`Incoming.encrypted`): tmy cannot read it.

A message **mentions the bot** when its ``m.mentions.user_ids`` (intentional
mentions, Matrix 1.7) holds the bot, its HTML has a pill to the bot, its text
holds the bot's user id, or starts with its display name as an address
(``Tmy: hi``); the mention is removed from the text
(:func:`~tmy.adapters.matrix.text.strip_mention`). A
reply (``m.relates_to.m.in_reply_to``) to one of the bot's messages counts as a
mention too: the adapter checks the quoted event's sender before running it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tmy.adapters.base import placeholder
from tmy.adapters.matrix.paths import download_url
from tmy.adapters.matrix.text import count_pills, strip_mention, strip_reply_fallback
from tmy.logs import get_logger
from tmy.message import Attachment, Event, Message

log = get_logger("tmy.adapter.matrix")

PLATFORM = "matrix"
MEDIA = {"m.image": "image", "m.file": "file", "m.audio": "voice", "m.video": "video"}
MAX_REMEMBERED = 4096  # events whose sender and text are kept (REPLY_TO, recalls, reactions)


@dataclass(slots=True)
class Incoming:
    """One message or event for the rules, with what answering it needs."""

    message: Message
    room: str
    thread: str | None = None  # the thread root, when it came from a thread
    in_reply_to: str | None = None  # the event it replies to
    encrypted: bool = False  # an m.room.encrypted event tmy cannot read


class Recent:
    """The last :data:`MAX_REMEMBERED` events seen or sent: ``{text, user, id}`` by event id."""

    def __init__(self) -> None:
        self._events: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def keep(self, event_id: str, user: str, text: str, **extra: Any) -> None:
        self._events[event_id] = {"text": text, "user": user, "id": event_id, **extra}
        self._events.move_to_end(event_id)
        if len(self._events) > MAX_REMEMBERED:
            self._events.popitem(last=False)

    def get(self, event_id: str) -> dict[str, Any] | None:
        return self._events.get(event_id)


@dataclass(slots=True)
class Me:
    """The bot as the reading needs it."""

    user_id: str
    display_name: str = ""
    download_base: str = ""  # <api_base>/_matrix/client/v1/media/download


def after_own_join(events: list[dict[str, Any]], me: str) -> int:
    """Where the events after the bot's own (latest) join start in a room's ``events``:
    0 when the bot did not join in this batch. A room the bot has just joined comes
    with its recent history (Synapse's sync gives a newly joined room its last events,
    from before the join too, when the room's history is visible to members), and
    messages said before the bot was there are not for it to answer."""
    for i in range(len(events) - 1, -1, -1):
        event = events[i]
        if not isinstance(event, dict) or event.get("type") != "m.room.member":
            continue
        content, unsigned = event.get("content") or {}, event.get("unsigned") or {}
        before = (unsigned.get("prev_content") or {}).get("membership")
        joined = event.get("state_key") == me and content.get("membership") == "join"
        if joined and before != "join":  # not a change of its display name or avatar
            return i + 1
    return 0


def read_room_events(
    room: str, events: list[dict[str, Any]], me: Me, recent: Recent, names: dict[str, str]
) -> list[Incoming]:
    """The timeline ``events`` of one joined room that reach the rules, in order.

    An event that cannot be read (a malformed one a homeserver let through) is
    logged and skipped: it must not stop the sync that carried it."""
    found: list[Incoming] = []
    for event in events:
        try:
            incoming = _read(room, event, me, recent, names)
        except Exception as exc:
            log.exception(
                "matrix.event_unreadable",
                room=room,
                event_id=event.get("event_id"),
                error=repr(exc),
            )
            continue
        if incoming is not None:
            found.append(incoming)
    return found


def _read(
    room: str, event: dict[str, Any], me: Me, recent: Recent, names: dict[str, str]
) -> Incoming | None:
    kind, sender = event.get("type"), event.get("sender", "")
    event_id = event.get("event_id", "")
    if not isinstance(sender, str) or not isinstance(event_id, str) or not event_id:
        return None
    if kind == "m.room.member":
        return _membership(room, event, me, recent, names)
    if sender == me.user_id:
        return None
    if kind == "m.room.message":
        return _message(room, event, me, recent, names)
    if kind == "m.room.encrypted":
        return Incoming(_base(room, event, me, names), room, encrypted=True)
    if kind == "m.reaction":
        return _reaction(room, event, me, recent, names)
    if kind == "m.room.redaction":
        return _redaction(room, event, me, recent, names)
    return None


def _base(
    room: str,
    raw: dict[str, Any],
    me: Me,
    names: dict[str, str],
    text: str = "",
    user: str = "",
    **fields: Any,
) -> Message:
    """A Message from ``user`` (default: ``raw``'s sender) in ``room`` (``fields``: the
    rest of Message's)."""
    user = user or raw["sender"]
    return Message.new(
        text,
        user=user,
        chat=room,
        platform=PLATFORM,
        user_name=names.get(user) or user,
        private=False,
        raw=raw,
        self_id=me.user_id,
        message_id=raw["event_id"],
        **fields,
    )


def _message(
    room: str, event: dict[str, Any], me: Me, recent: Recent, names: dict[str, str]
) -> Incoming | None:
    content = event.get("content") or {}
    relates = content.get("m.relates_to") or {}
    msgtype, body = content.get("msgtype"), content.get("body")
    if relates.get("rel_type") == "m.replace" or msgtype == "m.notice":
        return None
    if not isinstance(body, str):
        return None
    attachments: tuple[Attachment, ...] = ()
    if msgtype in MEDIA:
        attachments = _attachment(content, MEDIA[msgtype], me.download_base)
        if not attachments:
            return None
        filename = content.get("filename")  # set and unlike the body: the body is a caption
        captioned = isinstance(filename, str) and filename != "" and filename != body
        text = body if captioned else placeholder(attachments)
    elif msgtype in ("m.text", "m.emote"):
        text = body
    else:
        return None
    reply = (relates.get("m.in_reply_to") or {}).get("event_id")
    reply = reply if isinstance(reply, str) and reply else None
    if reply is not None:
        text = strip_reply_fallback(text)
    mentioned = me.user_id in _user_ids(content)
    name = names.get(me.user_id) or me.display_name  # the room's name for it, else the profile's
    pilled = count_pills(content, me.user_id)
    text, named = strip_mention(text, me.user_id, name, pills=pilled, addressed=mentioned)
    thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
    if thread is not None and relates.get("is_falling_back"):
        reply = None  # a thread's fallback points at the thread's last event, not a quote
    message = _base(
        room,
        event,
        me,
        names,
        text,
        attachments=attachments,
        mentions_bot=mentioned or named,
        reply_to=reply,
    )
    recent.keep(event["event_id"], event["sender"], text)
    return Incoming(message, room, thread=thread, in_reply_to=reply)


def _user_ids(content: dict[str, Any]) -> list[str]:
    mentions = content.get("m.mentions")
    ids = mentions.get("user_ids") if isinstance(mentions, dict) else None
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def _attachment(content: dict[str, Any], kind: str, base: str) -> tuple[Attachment, ...]:
    url = content.get("url")
    if not isinstance(url, str) or not url.startswith("mxc://"):
        return ()  # an encrypted file (content.file) or a broken event
    info = content.get("info") if isinstance(content.get("info"), dict) else {}
    size = info.get("size")
    name = content.get("filename") or content.get("body") or ""
    return (
        Attachment(
            kind,
            url=download_url(base, url),
            file_id=url,
            size=size if isinstance(size, int) else None,
            mime=str(info.get("mimetype") or ""),
            name=str(name),
            inline=True,
        ),
    )


def _membership(
    room: str, event: dict[str, Any], me: Me, recent: Recent, names: dict[str, str]
) -> Incoming | None:
    user, sender = event.get("state_key"), event["sender"]
    content = event.get("content") or {}
    unsigned = event.get("unsigned") or {}
    before = (unsigned.get("prev_content") or event.get("prev_content") or {}).get("membership")
    now = content.get("membership")
    if not isinstance(user, str) or user == me.user_id:
        return None
    if isinstance(content.get("displayname"), str):
        names[user] = content["displayname"]
    invite_key = f"invite|{room}|{user}"
    if now == "invite":  # who invited them: the operator of the join that follows
        recent.keep(invite_key, sender, "")
        return None
    if now == "join" and before != "join":
        invited = recent.get(invite_key) if before == "invite" else None
        inviter = invited["user"] if invited is not None else ""
        data: dict[str, Any] = {"user": user, "chat": room, "operator": inviter}
        kind = "member_join"
    elif now in ("leave", "ban") and before == "join":
        kicked = sender != user
        data = {"user": user, "chat": room, "operator": sender if kicked else "", "kicked": kicked}
        kind = "member_leave"
    else:
        return None
    message = _base(room, event, me, names, user=user, event=Event(kind, "m.room.member", data))
    return Incoming(message, room)


def _reaction(
    room: str, event: dict[str, Any], me: Me, recent: Recent, names: dict[str, str]
) -> Incoming | None:
    relates = (event.get("content") or {}).get("m.relates_to") or {}
    target, key = relates.get("event_id"), relates.get("key")
    if relates.get("rel_type") != "m.annotation" or not isinstance(target, str):
        return None
    recent.keep(event["event_id"], event["sender"], "", reaction=(target, key))
    data = {
        "user": event["sender"],
        "chat": room,
        "message_id": target,
        "emoji": key,
        "added": True,
    }
    return Incoming(
        _base(room, event, me, names, event=Event("reaction", "m.reaction", data)), room
    )


def _redaction(
    room: str, event: dict[str, Any], me: Me, recent: Recent, names: dict[str, str]
) -> Incoming | None:
    content = event.get("content") or {}
    redacts = content.get("redacts") or event.get("redacts")  # room v11 moved it into content
    if not isinstance(redacts, str):
        return None
    sender = event["sender"]
    seen = recent.get(redacts)
    if seen is not None and "reaction" in seen:
        target, key = seen["reaction"]
        data = {
            "user": seen["user"],
            "chat": room,
            "message_id": target,
            "emoji": key,
            "added": False,
        }
        kind = "reaction"
    else:
        author = seen["user"] if seen is not None else sender
        data = {"user": author, "chat": room, "operator": sender, "message_id": redacts}
        kind = "message_recall"
    if data["user"] == me.user_id and kind == "reaction":
        return None
    message = Message.new(
        "",
        user=data["user"],
        chat=room,
        platform=PLATFORM,
        user_name=names.get(data["user"]) or data["user"],
        private=False,
        raw=event,
        self_id=me.user_id,
        message_id=event["event_id"],
        event=Event(kind, "m.room.redaction", data),
    )
    return Incoming(message, room)
