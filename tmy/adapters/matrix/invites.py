"""Invites: every room the bot is invited to is joined, and a join refused *for now* is
tried again.

An invite shows up in one ``/sync`` answer only (``rooms.invite``); the sync token
moves past it. A join the homeserver cannot do at that moment — a 429
``M_LIMIT_EXCEEDED`` (Synapse's ``rc_joins`` allows a burst of 10 joins, then one
every 10 s: a bot invited to a dozen rooms at once meets it), a 5xx, a timeout
while joining a room over federation — would lose the invite for good, so such a
join is kept and tried again after the homeserver's ``retry_after_ms`` or a
backoff (:data:`MAX_TRIES` times). A join refused for good (403: the invite was
taken back, the bot is banned; 404) is logged and forgotten. Each join runs on a
task of its own (:data:`MAX_JOINING` at once): joining a big room over federation
can take a minute, and the sync — every other room's messages — does not wait.

**DMs.** An invite marked ``is_direct`` (Element's "Start chat", and other
clients' DMs) is a DM with its inviter: once joined, the room is added to the
bot's own ``m.direct`` account data under the inviter, as a client does for the
DMs its user accepts — so the room stays a DM when a third member joins, and
``send(Target(user=…))`` (cron, admin posts) finds it, after a restart too. Only
the inviter's own client records the DM otherwise, in *its* account.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mautrix.client import ClientAPI
from mautrix.errors import MNotFound
from mautrix.types import EventType, RoomID

from tmy.adapters.base import Backoff
from tmy.adapters.matrix.http import describe, is_transient, retry_after
from tmy.logs import get_logger

log = get_logger("tmy.adapter.matrix")

MAX_TRIES = 6  # joins of one invited room before it is given up
MAX_INVITES = 1000  # invites waiting for a join (the oldest forgotten past it)
MAX_JOINING = 8  # joins under way at once


@dataclass(slots=True)
class Invite:
    inviter: str
    backoff: Backoff
    direct: bool = False  # a DM: is_direct in the bot's invite
    tries: int = 0
    due: float = 0.0  # monotonic time of the next try


def inviter_of(invite: dict[str, Any], me: str) -> tuple[str, bool]:
    """Who invited ``me`` ("" when not said) and whether as a DM (``is_direct``), from
    the invited room's stripped state."""
    events = (invite.get("invite_state") or {}).get("events") or []
    for event in events:
        if not isinstance(event, dict):
            continue
        if event.get("type") == "m.room.member" and event.get("state_key") == me:
            sender, content = event.get("sender"), event.get("content") or {}
            direct = isinstance(content, dict) and content.get("is_direct") is True
            return (sender, direct) if isinstance(sender, str) else ("", False)
    return "", False


class Invites:
    """The invited rooms not joined yet; :meth:`join_due` joins those whose turn it is."""

    backoff_base = 2.0  # seconds before the second try of a join that failed without a 429
    backoff_cap = 120.0

    def __init__(self, on_direct: Callable[[str, str], None]) -> None:
        self._pending: dict[str, Invite] = {}
        self._joining: dict[str, asyncio.Task[None]] = {}  # room -> its join under way
        self._on_direct = on_direct  # (user, room): a DM with user was joined
        self._direct_lock = asyncio.Lock()  # m.direct is read, changed and written whole

    def add(self, room_id: str, inviter: str, direct: bool = False) -> None:
        if room_id not in self._pending:
            backoff = Backoff(self.backoff_base, self.backoff_cap)
            self._pending[room_id] = Invite(inviter, backoff, direct and bool(inviter))
            if len(self._pending) > MAX_INVITES:
                del self._pending[next(iter(self._pending))]

    def next_in(self) -> float | None:
        """Seconds until the next join is due (0 when one is), None when none waits
        (a join under way waits for nothing: its outcome sets its next turn)."""
        waiting = [i.due for r, i in self._pending.items() if r not in self._joining]
        return max(0.0, min(waiting) - time.monotonic()) if waiting else None

    def join_due(self, client: ClientAPI) -> None:
        """Start joining each invited room whose turn it is, each on a task of its own: a
        join over federation can take a minute, and the sync must not wait for it
        (errors are logged, never raised)."""
        now = time.monotonic()
        for room_id, invite in list(self._pending.items()):
            if invite.due <= now and room_id not in self._joining:
                if len(self._joining) >= MAX_JOINING:
                    return
                task = asyncio.create_task(self._join(client, room_id, invite), name="matrix-join")
                self._joining[room_id] = task
                task.add_done_callback(lambda _, room=room_id: self._joining.pop(room, None))

    async def close(self) -> None:
        """Cancel the joins under way (the adapter stops)."""
        tasks = list(self._joining.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _join(self, client: ClientAPI, room_id: str, invite: Invite) -> None:
        invite.tries += 1
        try:
            await client.join_room_by_id(RoomID(room_id))
        except Exception as exc:
            if is_transient(exc) and invite.tries < MAX_TRIES:
                wait = retry_after(exc)
                pause = invite.backoff.next() if wait is None else min(wait, self.backoff_cap)
                invite.due = time.monotonic() + pause
                log.warning(
                    "matrix.join_retry",
                    room=room_id,
                    inviter=invite.inviter,
                    error=describe(exc),
                    retry_in=round(pause, 2),
                )
                return
            self._pending.pop(room_id, None)
            log.warning(
                "matrix.join_failed", room=room_id, inviter=invite.inviter, error=describe(exc)
            )
            return
        self._pending.pop(room_id, None)
        log.info("matrix.joined", room=room_id, inviter=invite.inviter, direct=invite.direct)
        if invite.direct:
            self._on_direct(invite.inviter, room_id)
            async with self._direct_lock:  # two DMs joined at once: neither write is lost
                await _record_direct(client, invite.inviter, room_id)


async def _record_direct(client: ClientAPI, user: str, room_id: str) -> None:
    """Add ``room_id`` to the account's ``m.direct`` under ``user`` (read fresh first, so
    what another client of the account wrote there is kept); failures are logged."""
    try:
        try:
            content = dict(await client.get_account_data(EventType.DIRECT))
        except MNotFound:
            content = {}
        rooms = content.get(user) if isinstance(content.get(user), list) else []
        if room_id in rooms:
            return
        content[user] = [*rooms, room_id]
        await client.set_account_data(EventType.DIRECT, content)
    except Exception as exc:
        log.warning("matrix.direct_unsaved", room=room_id, user=user, error=describe(exc))
