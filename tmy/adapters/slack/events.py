"""Slack events that are not chat messages, as tmy events (``EVENT``, ``EVENT_DATA``).

=========================  ==============  ==========================================
Slack                      EVENT           USER / CHAT / EVENT_DATA
=========================  ==============  ==========================================
``member_joined_channel``  member_join     USER the member; ``operator`` who invited
                                           them ("" when they joined themselves)
``member_left_channel``    member_leave    USER the member (Slack does not say who
                                           removed them: ``operator`` "", ``kicked``
                                           false)
``reaction_added`` /       reaction        USER who reacted; ``message_id`` the
``reaction_removed``                       message's ``ts``, ``emoji`` Slack's emoji
                                           name (``thumbsup``), ``added``
``message`` subtype        message_recall  USER the author; ``message_id`` the
``message_deleted``                        deleted ``ts``; ``operator`` "" (Slack
                                           does not say who deleted it)
``block_actions``          button          USER who pressed; ``data`` the button's
(interactivity)                            value, ``message_id`` the ``ts`` of the
                                           message carrying it
=========================  ==============  ==========================================

CHAT is the channel the event happened in; a button's answer goes into the
thread its message is in. ``EVENT_RAW`` is Slack's event type. The bot's own
joins, leaves and reactions are not events for the rules; neither are
``tokens_revoked`` (naming the bot) and ``app_uninstalled``: :func:`revoked`
tells the adapter its token is gone.
"""

from __future__ import annotations

from typing import Any

from tmy.adapters.slack.incoming import PLATFORM, Incoming, Me
from tmy.message import Event, Message

CHANNEL_EVENTS = frozenset(
    {"member_joined_channel", "member_left_channel", "reaction_added", "reaction_removed"}
)


def event_of(event: dict[str, Any], event_id: str, me: Me) -> Incoming | None:
    """The tmy event for one Events API event (None: not one tmy serves)."""
    kind = event.get("type") or ""
    user = event.get("user") or ""
    if not user or user == me.user_id:
        return None
    if kind == "member_joined_channel":
        return _incoming(event, event_id, me, "member_join", user, event.get("channel"),
                         operator=_other(event.get("inviter"), user))  # fmt: skip
    if kind == "member_left_channel":
        return _incoming(event, event_id, me, "member_leave", user, event.get("channel"),
                         operator="", kicked=False)  # fmt: skip
    if kind in ("reaction_added", "reaction_removed"):
        item = event.get("item") or {}
        return _incoming(event, event_id, me, "reaction", user, item.get("channel"),
                         message_id=str(item.get("ts") or ""), emoji=event.get("reaction") or "",
                         added=kind == "reaction_added")  # fmt: skip
    return None


def recall_of(event: dict[str, Any], me: Me) -> Incoming | None:
    """A ``message_deleted`` message event as ``message_recall`` (None: the bot's own)."""
    before = event.get("previous_message") or {}
    user = before.get("user") or ""
    if not user or user == me.user_id or before.get("bot_id"):
        return None
    deleted = str(event.get("deleted_ts") or before.get("ts") or "")
    channel = event.get("channel") or ""
    return _incoming(event, f"{channel}:deleted:{deleted}", me, "message_recall", user, channel,
                     raw_kind="message_deleted", operator="", message_id=deleted)  # fmt: skip


def buttons_of(payload: dict[str, Any], me: Me) -> list[Incoming]:
    """One ``button`` event per pressed button of a ``block_actions`` payload."""
    if payload.get("type") != "block_actions":
        return []
    user = (payload.get("user") or {}).get("id") or ""
    container = payload.get("container") or {}
    channel = (payload.get("channel") or {}).get("id") or container.get("channel_id") or ""
    carrier = payload.get("message") or {}
    ts = str(container.get("message_ts") or carrier.get("ts") or "")
    thread = carrier.get("thread_ts") or container.get("thread_ts")
    found = []
    for action in payload.get("actions") or ():
        if action.get("type") != "button" or not user or not channel:
            continue
        key = f"button:{ts}:{action.get('action_ts') or payload.get('trigger_id') or ''}:{user}"
        incoming = _incoming(payload, key, me, "button", user, channel,
                             data=str(action.get("value") or ""), message_id=ts,
                             raw_kind="block_actions")  # fmt: skip
        if incoming is not None:
            incoming.thread = thread if thread and thread != ts else None
            found.append(incoming)
    return found


def _other(operator: Any, member: str) -> str:
    return str(operator) if operator and operator != member else ""


def _incoming(
    raw: dict[str, Any],
    key: str,
    me: Me,
    kind: str,
    user: str,
    channel: Any,
    *,
    raw_kind: str = "",
    **data: Any,
) -> Incoming | None:
    channel = str(channel or "")
    if not channel:
        return None
    data = {"user": user, "chat": channel, **data}
    message = Message.new(
        "",
        user=user,
        chat=channel,
        platform=PLATFORM,
        private=channel.startswith("D"),
        raw=raw,
        self_id=me.user_id,
        event=Event(kind, raw_kind or str(raw.get("type") or ""), data),
    )
    return Incoming(message, key or f"event:{channel}:{user}:{kind}", channel)


def revoked(event: dict[str, Any], me: Me) -> bool:
    """Slack telling that the app is gone (``app_uninstalled``) or the bot's token revoked."""
    if event.get("type") == "app_uninstalled":
        return True
    if event.get("type") != "tokens_revoked":
        return False
    tokens = event.get("tokens")
    bots = tokens.get("bot") if isinstance(tokens, dict) else None
    return isinstance(bots, list) and me.user_id in bots
