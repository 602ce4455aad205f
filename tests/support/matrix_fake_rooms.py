"""The fake homeserver's accounts and rooms, and the answers built from them (``/sync``,
errors).

Split from :mod:`tests.support.matrix_fake` (the server, its endpoints and what
tests do): here are the test accounts (tests import them from here), a room as
the fake keeps it (:class:`FakeRoom`) and :func:`sync_body`, the client-server
spec's ``/sync`` response for one ``since`` position of the fake's event stream:

* without ``since`` (an initial sync): each joined room's full state and its last
  50 events, and ``m.direct`` in ``account_data``;
* with ``since``: each joined room's events after it (a room the bot joined after
  ``since`` comes with its state and, as Synapse sends it, its last 50 events:
  those from before the join too), the rooms the bot was invited to after it under
  ``rooms.invite`` with their stripped state, ``m.direct`` when it was set after
  it; ``summary.m.joined_member_count`` for every room listed; ``next_batch`` is
  the stream's end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

SERVER = "example.org"
BOT = "@tmy:example.org"
BOT_NAME = "Tmy"
PASSWORD = "correct horse battery staple"
TOKEN = "syt_dG15_valid_access_token_for_tests"
DEVICE = "TESTDEVICE"
ANN = "@ann:example.org"
BOB = "@bob:example.org"
MAX_EVENT_BYTES = 65_536
INVITE_MARK = "tmy.fake.invite"  # a stream entry standing for the bot's invite
ACCOUNT_MARK = "tmy.fake.account_data"  # one standing for a change of m.direct
TIMELINE_LIMIT = 50


def error(status: int, errcode: str, message: str, **extra: Any) -> web.Response:
    """An error answer as the spec shapes it: ``{"errcode", "error", …}``."""
    return web.json_response({"errcode": errcode, "error": message, **extra}, status=status)


def canonical(value: Any) -> bytes:
    """Matrix's canonical JSON (UTF-8, no spaces, sorted keys), whose size events are held to."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class FakeRoom:
    room_id: str
    members: dict[str, dict[str, Any]] = field(default_factory=dict)  # user -> member content
    power: dict[str, Any] = field(default_factory=dict)
    encrypted: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    invited_at: int | None = None  # stream position of the bot's invite
    inviter: str = ""
    joined_at: int | None = None  # stream position of the bot's join
    create: dict[str, Any] | None = None  # the m.room.create event of a version 12 room

    @classmethod
    def made(cls, room_id: str, members: list[str], names: Mapping[str, str]) -> FakeRoom:
        """A room with ``members`` joined under their ``names``, default power levels."""
        room = cls(room_id, power={"users": {}, "users_default": 0})
        for user in members:
            room.members[user] = {"membership": "join", "displayname": names.get(user, "")}
        return room

    def joined(self) -> list[str]:
        return [u for u, c in self.members.items() if c.get("membership") == "join"]


def sync_body(
    rooms: Mapping[str, FakeRoom],
    stream: Sequence[tuple[str, dict[str, Any]]],
    direct: Mapping[str, list[str]],
    pos: int | None,
    direct_at: int = 0,
) -> dict[str, Any]:
    """The ``/sync`` answer for ``since`` = stream position ``pos`` (None: initial);
    ``direct_at``: the stream position ``m.direct`` was last set at."""
    joined: dict[str, Any] = {}
    invited: dict[str, Any] = {}
    for room in rooms.values():
        bot = room.members.get(BOT, {}).get("membership")
        if bot == "invite" and (pos is None or (room.invited_at or 0) > pos):
            invited[room.room_id] = {"invite_state": {"events": stripped(room)}}
        if bot != "join":
            continue
        fresh = pos is None or (room.joined_at or 0) > pos
        timeline = [
            e
            for i, (r, e) in enumerate(stream, 1)
            if r == room.room_id and e["type"] != INVITE_MARK and (pos is None or i > pos)
        ]
        if fresh:  # as Synapse: a newly joined room's last events, from before the join too
            timeline = [*room.events][-TIMELINE_LIMIT:]
        if not timeline and not fresh:
            continue
        joined[room.room_id] = {
            "timeline": {"events": timeline, "limited": fresh, "prev_batch": f"s{pos or 0}"},
            "state": {"events": state_events(room) if fresh else []},
            "summary": {"m.joined_member_count": len(room.joined())},
            "ephemeral": {"events": []},
            "account_data": {"events": []},
        }
    body: dict[str, Any] = {
        "next_batch": f"s{len(stream)}",
        "rooms": {"join": joined, "invite": invited, "leave": {}},
    }
    if (pos is None or direct_at > pos) and direct:
        body["account_data"] = {"events": [{"type": "m.direct", "content": dict(direct)}]}
    return body


def state_events(room: FakeRoom) -> list[dict[str, Any]]:
    """``room``'s current state: create (a version 12 room's), power levels,
    encryption, every member."""
    events = [
        *([room.create] if room.create else []),
        {
            "type": "m.room.power_levels",
            "state_key": "",
            "sender": BOT,
            "content": room.power,
            "event_id": f"$pl-{room.room_id}",
        },
    ]
    if room.encrypted:
        events.append(
            {
                "type": "m.room.encryption",
                "state_key": "",
                "sender": BOT,
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                "event_id": f"$enc-{room.room_id}",
            }
        )
    for user, content in room.members.items():
        events.append(
            {
                "type": "m.room.member",
                "state_key": user,
                "sender": user,
                "content": content,
                "event_id": f"$m-{user}-{room.room_id}",
            }
        )
    return events


def stripped(room: FakeRoom) -> list[dict[str, Any]]:
    """An invited room's stripped state: the bot's invite and who sent it."""
    return [
        {
            "type": "m.room.member",
            "state_key": BOT,
            "sender": room.inviter,
            "content": room.members.get(BOT) or {"membership": "invite"},
        }
    ]
