"""What the adapter knows of each room: DM or group, power levels, encryption.

Kept from the ``/sync`` answers (state events and a room's ``summary``) and, when a
restart's sync no longer carries a room's state, asked of the homeserver once and
cached for :attr:`Rooms.ttl` seconds (a state event seen in a later sync updates it
at once):

* **private**: a room listed in the account's ``m.direct`` account data (what
  Element marks as a DM) or with exactly two joined members (the bot and one user);
* **roles** (``admins_from``): the ``m.room.power_levels`` state: power 100 is
  ``owner``, 50 and up ``admin`` (Matrix's defaults for Admin and Moderator). In a
  room of version 12 (its id has no server name: ``!<hash>``) the room's creators —
  the ``m.room.create`` event's sender and its ``additional_creators`` — stand
  above every power level and are not listed in ``m.room.power_levels``: they are
  ``owner`` (the create event comes with the room's state, else it is fetched by
  its id, ``$<hash>``, which version 12 makes the room id's own);
* **encrypted**: an ``m.room.encryption`` state event (see the package docstring:
  tmy cannot read such rooms).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tmy.logs import get_logger

log = get_logger("tmy.adapter.matrix")

OWNER_LEVEL = 100
ADMIN_LEVEL = 50
CREATOR_VERSIONS = ("12", "org.matrix.hydra.11")  # room versions whose creators outrank all
MAX_ROOMS = 4096  # rooms whose facts are kept (the oldest forgotten past it)

Fetch = Callable[[str], Awaitable[Any]]


@dataclass(slots=True)
class Room:
    """The facts kept about one room (None: not known yet)."""

    members: int | None = None  # joined members
    power: dict[str, Any] | None = None  # m.room.power_levels content
    encrypted: bool = False
    creators: frozenset[str] | None = None  # version 12 creators (empty: none such)
    names: dict[str, str] = field(default_factory=dict)  # user -> display name
    checked_at: float = 0.0  # monotonic time the homeserver was last asked


class Rooms:
    """Facts per room id; ``fetch_members`` / ``fetch_power`` ask the homeserver."""

    ttl = 300.0  # seconds a fetched fact is trusted when no sync has refreshed it

    def __init__(self, fetch_members: Fetch, fetch_power: Fetch, fetch_create: Fetch) -> None:
        self._fetch_members = fetch_members  # room -> {user: display name} of joined members
        self._fetch_power = fetch_power  # room -> power_levels content
        self._fetch_create = fetch_create  # room -> its m.room.create event
        self._rooms: dict[str, Room] = {}
        self.direct: set[str] = set()  # rooms in m.direct
        self.direct_with: dict[str, list[str]] = {}  # user -> their DM rooms (m.direct)

    def room(self, room_id: str) -> Room:
        room = self._rooms.get(room_id)
        if room is None:
            room = self._rooms[room_id] = Room()
            if len(self._rooms) > MAX_ROOMS:
                del self._rooms[next(iter(self._rooms))]
        return room

    def set_direct(self, content: dict[str, Any]) -> None:
        """``m.direct`` account data: ``{user: [room ids]}``."""
        self.direct_with = {
            user: [r for r in rooms if isinstance(r, str)]
            for user, rooms in content.items()
            if isinstance(rooms, list)
        }
        self.direct = {r for rooms in self.direct_with.values() for r in rooms}

    def add_direct(self, user: str, room_id: str) -> None:
        """``room_id`` is a DM with ``user`` (an ``is_direct`` invite the bot accepted)."""
        rooms = self.direct_with.setdefault(user, [])
        if room_id not in rooms:
            rooms.append(room_id)
        self.direct.add(room_id)

    def learn(
        self, room_id: str, summary: dict[str, Any], events: Iterable[dict[str, Any]]
    ) -> None:
        """A joined room's part of a sync: its summary and its state events."""
        room = self.room(room_id)
        count = summary.get("m.joined_member_count")
        if isinstance(count, int):
            room.members = count
        for event in events:
            kind, content = event.get("type"), event.get("content") or {}
            if "state_key" not in event:
                continue
            if kind == "m.room.power_levels":
                room.power, room.checked_at = content, time.monotonic()
            elif kind == "m.room.encryption":
                room.encrypted = True
            elif kind == "m.room.create":
                room.creators = creators_of(event)
            elif kind == "m.room.member":
                name = content.get("displayname")
                if content.get("membership") == "join" and isinstance(name, str):
                    room.names[event["state_key"]] = name

    def private(self, room_id: str) -> bool | None:
        """True for a DM, False for a group, None when the member count is unknown."""
        if room_id in self.direct:
            return True
        members = self.room(room_id).members
        return None if members is None else members == 2

    async def is_private(self, room_id: str) -> bool:
        """:meth:`private`, asking the homeserver for the members when unknown."""
        known = self.private(room_id)
        if known is not None:
            return known
        room = self.room(room_id)
        try:
            names = await self._fetch_members(room_id)
        except Exception as exc:
            log.warning("matrix.members_failed", room=room_id, error=f"{type(exc).__name__}")
            return False
        room.members = len(names)
        room.names.update({u: n for u, n in names.items() if n})
        return room.members == 2

    async def role(self, room_id: str, user: str) -> str:
        """``owner``, ``admin`` or "" for ``user`` in ``room_id`` by its power levels."""
        room = self.room(room_id)
        if room.power is None or time.monotonic() - room.checked_at > self.ttl:
            try:
                room.power = await self._fetch_power(room_id) or {}
            except Exception as exc:
                log.warning("matrix.power_levels_failed", room=room_id, error=type(exc).__name__)
                room.power = room.power or {}
            room.checked_at = time.monotonic()
        return role_of(room.power, user, await self._creators(room_id))

    async def _creators(self, room_id: str) -> frozenset[str]:
        """A version 12 room's creators (none in a room whose id names its server)."""
        room = self.room(room_id)
        if room.creators is None and ":" in room_id:
            room.creators = frozenset()
        if room.creators is None:
            try:
                room.creators = creators_of(await self._fetch_create(room_id))
            except Exception as exc:  # asked again at the next role check
                log.warning("matrix.create_event_failed", room=room_id, error=type(exc).__name__)
                return frozenset()
        return room.creators

    def name(self, room_id: str, user: str) -> str:
        return self.room(room_id).names.get(user, "")


def creators_of(create: dict[str, Any]) -> frozenset[str]:
    """The creators an ``m.room.create`` event makes (none before room version 12)."""
    content = create.get("content") if isinstance(create.get("content"), dict) else {}
    if str(content.get("room_version", "1")) not in CREATOR_VERSIONS:
        return frozenset()
    extra = content.get("additional_creators")
    users = [create.get("sender"), *(extra if isinstance(extra, list) else [])]
    return frozenset(u for u in users if isinstance(u, str) and u)


def role_of(power: dict[str, Any], user: str, creators: frozenset[str] = frozenset()) -> str:
    """``owner`` (a creator, 100 and up), ``admin`` (50 to 99) or "" by a power_levels
    content and a version 12 room's ``creators``."""
    if user in creators:
        return "owner"
    users = power.get("users") if isinstance(power.get("users"), dict) else {}
    level = users.get(user, power.get("users_default", 0))
    if not isinstance(level, int) or isinstance(level, bool):
        return ""
    if level >= OWNER_LEVEL:
        return "owner"
    return "admin" if level >= ADMIN_LEVEL else ""
