"""What a OneBot event becomes: a Message for the rules, or a frame worth logging.

**Anonymous** group messages (``user_id`` 80000000 with an ``anonymous``
object) are keyed on the anonymous id: ``USER`` is ``anonymous:<id>``, so two
anonymous senders never share memory or variables. ``anonymous: ignore``
drops them instead.

**Roles** (``adapters.onebot.admins_from``): a group message whose
``sender.role`` is listed there (``owner``, ``admin``) comes with
``chat_admin`` set: that sender is an admin of that group only, for
``admin_only`` rules and chat-scoped admin commands.

**Media**: images, files, voice, video and stickers become
``Message.attachments`` (:mod:`tmy.adapters.onebot.media`).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from tmy import redact
from tmy.adapters.onebot.codec import parse_cq, read_message, segments_of
from tmy.adapters.onebot.media import attachments_of
from tmy.logs import get_logger
from tmy.message import Message

log = get_logger("tmy.adapter.onebot")

PLATFORM = "onebot"
# account, user, group ids: QQ numbers, or the string ids of other OneBot platforms
ID = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")
ANONYMOUS_PREFIX = "anonymous:"  # USER of an anonymous group sender: anonymous:<anonymous.id>


def _anonymous_user(anonymous: Any, anonymous_policy: str, chat: str) -> str | None:
    """An anonymous group sender's own user id, or None (ignored: the policy says so, or
    the event names no anonymous id). All of them share user_id 80000000: they must
    never share its identity."""
    if anonymous_policy == "ignore":
        log.debug("onebot.ignored", reason="anonymous (adapters.onebot.anonymous)")
        return None
    anon_id = _anonymous_id(anonymous)
    if anon_id is None:
        log.warning("onebot.ignored", reason="anonymous message without an anonymous id", chat=chat)
        return None
    return ANONYMOUS_PREFIX + anon_id


def to_message(
    self_id: str,
    event: dict[str, Any],
    sent: Collection[str],
    anonymous_policy: str,
    admins_from: Collection[str] = (),
) -> Message | None:
    """The engine's Message for a ``message`` event, or None when it is not one we answer.

    ``sent`` holds the ids of the account's own sent messages (a reply to one
    mentions the bot); ``anonymous_policy`` is ``adapters.onebot.anonymous``;
    ``admins_from`` the group roles that make their holder an admin there.
    """
    kind = event.get("message_type")
    user_id = event.get("user_id")
    # QQ numbers are ints: their check inline (a call per id is a tenth of this function)
    if kind not in ("group", "private") or not (
        user_id >= 0 if type(user_id) is int else is_id(user_id)
    ):
        log.debug("onebot.ignored", reason="not a private or group message", kind=kind)
        return None
    user = str(user_id)
    if user == self_id:
        return None  # the bot's own message reported back
    anonymous = event.get("anonymous")
    if kind == "group":
        group_id = event.get("group_id")
        if not (group_id >= 0 if type(group_id) is int else is_id(group_id)):
            log.warning("onebot.ignored", reason="group message without a group_id")
            return None
        chat = f"group:{group_id}"
        if anonymous is not None or event.get("sub_type") == "anonymous":
            anonymous_user = _anonymous_user(anonymous, anonymous_policy, chat)
            if anonymous_user is None:
                return None
            user = anonymous_user
    else:
        chat = f"private:{user}"
    segments = event.get("message")
    text = _one_text(segments)  # the usual message: one text segment, read in place
    if text is None:
        text = _plain_text(segments)  # text segments only (no copies, no attachments)
    mentions_bot, reply_to, attachments = False, None, ()
    if text is None:  # segments other than text: read them (mentions, quotes, media)
        segments = segments_of(segments)
        if not segments and isinstance(event.get("raw_message"), str):
            segments = parse_cq(event["raw_message"])
        parsed = read_message(segments, self_id, sent)
        text, mentions_bot, reply_to = parsed.text, parsed.mentions_bot, parsed.reply_to
        attachments = attachments_of(segments)
    message_id = event.get("message_id")
    sender = event.get("sender")
    name = sender.get("card") or sender.get("nickname") if type(sender) is dict else None
    if type(name) is not str or anonymous is not None:
        name = _display_name(event)  # an anonymous sender's name, or a number to read as text
    return Message.new(
        text,
        user=user,
        chat=chat,
        platform=PLATFORM,
        user_name=name or user,
        private=kind == "private",
        raw=event,
        mentions_bot=mentions_bot,
        reply_to=reply_to,
        self_id=self_id,
        message_id="" if message_id is None else str(message_id),
        attachments=attachments,
        # an anonymous sender is nobody's admin, whatever role QQ reports
        chat_admin=bool(admins_from)
        and kind == "group"
        and user == str(user_id)
        and _role(event) in admins_from,
    )


def _one_text(message: Any) -> str | None:
    """The text of a segment array of exactly one text segment (what most messages are),
    stripped; None for anything else."""
    if type(message) is list and len(message) == 1:
        seg = message[0]
        if type(seg) is dict and seg.get("type") == "text":
            data = seg.get("data")
            text = data.get("text", "") if type(data) is dict else ""
            if type(text) is str:
                return text.strip()
    return None


def _plain_text(message: Any) -> str | None:
    """What :func:`read_message` reads from a segment array of text segments only (their
    texts joined, stripped), or None for anything else (then the segments are read)."""
    if type(message) is not list or not message:
        return None
    parts = []
    for seg in message:
        if type(seg) is not dict or seg.get("type") != "text":
            return None
        data = seg.get("data")
        text = data.get("text", "") if type(data) is dict else ""
        if type(text) is not str:
            return None
        parts.append(text)
    return "".join(parts).strip()


def frame_failure(frame: dict[str, Any]) -> str | None:
    """What an implementation said outside any event (a refused token, say), or None.

    A frame that says nothing failed is logged as unknown (and None returned).
    """
    detail = next(
        (str(frame[k]) for k in ("wording", "message", "msg", "error") if frame.get(k)), ""
    )
    retcode = frame.get("retcode")
    status = frame.get("status")
    failed = status == "failed" or retcode not in (None, 0, 1) or bool(frame.get("error"))
    if not failed:
        return None
    return redact.redact(f"status {status}, retcode {retcode}" + (f": {detail}" if detail else ""))


def _anonymous_id(anonymous: Any) -> str | None:
    """The sender's anonymous id (``anonymous.id``, an int64), or None when there is none."""
    if not isinstance(anonymous, dict):
        return None
    value = anonymous.get("id")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and ID.fullmatch(value):
        return value
    return None


def _role(event: dict[str, Any]) -> str:
    sender = event.get("sender")
    role = sender.get("role") if isinstance(sender, dict) else None
    return role if isinstance(role, str) else ""


def _display_name(event: dict[str, Any]) -> str:
    anonymous = event.get("anonymous")
    if isinstance(anonymous, dict) and anonymous.get("name"):
        return str(anonymous["name"])
    sender = event.get("sender")
    if not isinstance(sender, dict):
        return ""
    return str(sender.get("card") or sender.get("nickname") or "")


def is_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and ID.fullmatch(value) is not None
