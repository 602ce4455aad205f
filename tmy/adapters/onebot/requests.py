"""A request event's answer: the run's ``APPROVE`` becomes the OneBot action.

``friend_request`` → ``set_friend_add_request {flag, approve}``; ``group_invite``
and ``join_request`` → ``set_group_add_request {flag, sub_type, approve,
reason}`` (the reason, ``APPROVE_REASON``, only with a refusal: QQ shows it to
the requester). No decision (``APPROVE`` unset) leaves the request pending in
QQ, where an admin can still answer it by hand.
"""

from __future__ import annotations

from typing import Any

from tmy.adapters.onebot.accounts import Accounts
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message, Reply

log = get_logger("tmy.adapter.onebot")


def request_action(message: Message, reply: Reply) -> tuple[str, dict[str, Any]] | None:
    """The action answering ``message``'s request as ``reply`` decided, or None (no decision)."""
    event = message.event
    if event is None or not event.is_request or reply.approve is None:
        return None
    flag = event.data.get("flag", "")
    if not flag or not isinstance(flag, str):
        return None  # nothing to answer it with: it stays pending (logged)
    if event.kind == "friend_request":
        return "set_friend_add_request", {"flag": flag, "approve": reply.approve}
    params: dict[str, Any] = {
        "flag": flag,
        "sub_type": "invite" if event.kind == "group_invite" else "add",
        "approve": reply.approve,
    }
    if not reply.approve and reply.approve_reason:
        params["reason"] = reply.approve_reason
    return "set_group_add_request", params


async def answer_request(accounts: Accounts, message: Message, reply: Reply) -> None:
    """Accept or decline the request ``message`` carries; failures are logged, not raised."""
    assert message.event is not None
    action = request_action(message, reply)
    if action is None:
        log.info(
            "onebot.request_pending", kind=message.event.kind, user=message.user,
            rule=reply.rule, reason=reply.reason or reply.error,
        )  # fmt: skip
        return
    name, params = action
    conn = accounts.bots.get(message.self_id)
    try:
        if conn is None:
            raise AdapterError(f"onebot: bot account {message.self_id} is not connected")
        await conn.call(name, params)
    except AdapterError as exc:
        log.warning(
            "onebot.request_failed", action=name, kind=message.event.kind, user=message.user,
            error=str(exc),
        )  # fmt: skip
        return
    log.info(
        "onebot.request_answered", action=name, kind=message.event.kind, user=message.user,
        approve=reply.approve, rule=reply.rule,
    )  # fmt: skip
