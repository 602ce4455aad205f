"""OneBot notices and requests as tmy events (``EVENT``, ``EVENT_DATA``, ``EVENT_RAW``).

=====================================  ================  =======================
OneBot (``EVENT_RAW``)                 ``EVENT``         ``CHAT``
=====================================  ================  =======================
``notice.group_increase``              member_join       ``group:<id>``
``notice.group_decrease``              member_leave      ``group:<id>``
``notice.notify.poke``                 poke              group, or ``private:<poker>``
``notice.group_recall``                message_recall    ``group:<id>``
``notice.friend_recall``               message_recall    ``private:<user>``
``notice.group_msg_emoji_like``        reaction          ``group:<id>`` (NapCat, LLOneBot)
``notice.reaction``                    reaction          ``group:<id>`` (Lagrange)
``request.friend``                     friend_request    ``private:<requester>``
``request.group.invite``               group_invite      ``private:<inviter>``
``request.group.add``                  join_request      ``group:<id>``
=====================================  ================  =======================

``USER`` is the member who joined or left, the poker, the reacting user, the
message's author for a recall, the requester (the inviter for an invite: the
bot is not in that group yet, so its answer goes to the inviter privately).
The bot's own doings (it joined, left or was kicked, it poked, reacted or
recalled) are not events for its rules. Any other notice (group_admin,
group_ban, group_upload, friend_add, honor, essence …) is logged at debug as
``onebot.event_unmapped`` with its name, never dropped without a word.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tmy.adapters.onebot.events import is_id
from tmy.logs import get_logger
from tmy.message import Event, Message

log = get_logger("tmy.adapter.onebot")

PLATFORM = "onebot"
Built = tuple[str, str, str, dict[str, Any]]  # kind, USER, CHAT, EVENT_DATA (without user/chat)


def to_event(self_id: str, payload: dict[str, Any]) -> Message | None:
    """The engine's Message for a notice or request, or None when no rule should see it."""
    raw = raw_name(payload)
    build = _BUILDERS.get(raw)
    built = build(payload) if build is not None else None
    if built is None:
        log.debug(
            "onebot.event_unmapped", raw=raw, self_id=self_id,
            group=payload.get("group_id"), user=payload.get("user_id"),
        )  # fmt: skip
        return None
    kind, user, chat, data = built
    actor = data.get("operator") if kind == "message_recall" else user
    if not user or actor == self_id:
        log.debug("onebot.own_event", raw=raw, self_id=self_id, user=user)
        return None
    return Message.new(
        "",
        user=user,
        chat=chat,
        platform=PLATFORM,
        private=chat.startswith("private:"),
        raw=payload,
        self_id=self_id,
        event=Event(kind, raw, {"user": user, "chat": chat, **data}),
    )


def raw_name(payload: dict[str, Any]) -> str:
    """``notice.group_increase``, ``notice.notify.poke``, ``request.group.invite`` …"""
    post = str(payload.get("post_type", ""))
    name = str(payload.get(f"{post}_type", ""))
    if (post, name) in (("notice", "notify"), ("request", "group")):
        return f"{post}.{name}.{payload.get('sub_type', '')}"
    return f"{post}.{name}"


def _id(value: Any) -> str:
    """An id as text; "" for none (absent, 0, a bool) and for anything that is not an id
    (a map, a list, a negative number): the event is then dropped, not built on it."""
    if value is None or isinstance(value, bool) or value in (0, "0", "") or not is_id(value):
        return ""
    return str(value)


def _flag(value: Any) -> str:
    """A request's flag: the platform's handle, text only (anything else: none)."""
    return value if isinstance(value, str) and len(value) <= 256 else ""


def _group(payload: dict[str, Any]) -> str:
    group = _id(payload.get("group_id"))
    return f"group:{group}" if group else ""


def _member_join(p: dict[str, Any]) -> Built | None:
    user, operator = _id(p.get("user_id")), _id(p.get("operator_id"))
    data = {"operator": "" if operator == user else operator, "sub_type": p.get("sub_type", "")}
    return ("member_join", user, _group(p), data) if _group(p) else None


def _member_leave(p: dict[str, Any]) -> Built | None:
    user, operator = _id(p.get("user_id")), _id(p.get("operator_id"))
    kicked = p.get("sub_type") in ("kick", "kick_me")
    data = {"operator": operator if kicked and operator != user else "", "kicked": kicked,
            "sub_type": p.get("sub_type", "")}  # fmt: skip
    return ("member_leave", user, _group(p), data) if _group(p) else None


def _poke(p: dict[str, Any]) -> Built | None:
    # go-cqhttp/NapCat friend pokes name the poker in sender_id (user_id is the friend)
    user = _id(p.get("sender_id")) or _id(p.get("user_id"))
    chat = _group(p) or f"private:{user}"
    return "poke", user, chat, {"target": _id(p.get("target_id"))}


def _recall(p: dict[str, Any]) -> Built | None:
    user = _id(p.get("user_id"))
    operator = _id(p.get("operator_id")) or user
    chat = _group(p) or f"private:{user}"
    return (
        "message_recall",
        user,
        chat,
        {"operator": operator, "message_id": _id(p.get("message_id"))},
    )


def _emoji_like(p: dict[str, Any]) -> Built | None:
    """NapCat/LLOneBot ``group_msg_emoji_like``: ``likes`` [{emoji_id, count}]; newer NapCat
    says ``is_add`` (older ones report only additions)."""
    likes = p.get("likes")
    first = likes[0] if isinstance(likes, list) and likes and isinstance(likes[0], dict) else {}
    data = {
        "message_id": _id(p.get("message_id")),
        "emoji": str(first.get("emoji_id", "")),
        "added": p.get("is_add") is not False,
        "count": first.get("count"),
    }
    return ("reaction", _id(p.get("user_id")), _group(p), data) if _group(p) else None


def _lagrange_reaction(p: dict[str, Any]) -> Built | None:
    """Lagrange ``reaction``: sub_type add/remove, operator_id, code (the face id), count."""
    data = {
        "message_id": _id(p.get("message_id")),
        "emoji": str(p.get("code", "")),
        "added": p.get("sub_type") != "remove",
        "count": p.get("count"),
    }
    return ("reaction", _id(p.get("operator_id")), _group(p), data) if _group(p) else None


def _friend_request(p: dict[str, Any]) -> Built | None:
    user = _id(p.get("user_id"))
    data = {"comment": str(p.get("comment") or ""), "flag": _flag(p.get("flag"))}
    return "friend_request", user, f"private:{user}", data


def _group_request(kind: str) -> Callable[[dict[str, Any]], Built | None]:
    def build(p: dict[str, Any]) -> Built | None:
        user, group = _id(p.get("user_id")), _id(p.get("group_id"))
        if not group:
            return None
        data = {
            "group": group,
            "comment": str(p.get("comment") or ""),
            "flag": _flag(p.get("flag")),
            "sub_type": p.get("sub_type", ""),
        }
        chat = f"private:{user}" if kind == "group_invite" else f"group:{group}"
        return kind, user, chat, data

    return build


_BUILDERS: dict[str, Callable[[dict[str, Any]], Built | None]] = {
    "notice.group_increase": _member_join,
    "notice.group_decrease": _member_leave,
    "notice.notify.poke": _poke,
    "notice.group_recall": _recall,
    "notice.friend_recall": _recall,
    "notice.group_msg_emoji_like": _emoji_like,
    "notice.reaction": _lagrange_reaction,
    "request.friend": _friend_request,
    "request.group.invite": _group_request("group_invite"),
    "request.group.add": _group_request("join_request"),
}
