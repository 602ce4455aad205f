"""A fake Matrix homeserver (client-server API) on loopback, for tests.

Written from the Matrix client-server spec (spec.matrix.org, v1.11+): every
endpoint but ``/login`` needs ``Authorization: Bearer <token>`` and answers a
missing token 401 ``M_MISSING_TOKEN``, an unknown one 401 ``M_UNKNOWN_TOKEN``;
errors are ``{"errcode", "error"}`` with the spec's statuses; a 429 is
``M_LIMIT_EXCEEDED`` with ``retry_after_ms``. Implemented:

* ``POST /login`` (``m.login.password``, ``m.id.user``; a wrong password is 403
  ``M_FORBIDDEN``; a known ``device_id`` is reused), ``GET /account/whoami``;
* ``GET /sync``: a real long poll over one event stream (``next_batch`` is a
  stream position; ``since`` returns what came after it, waiting up to
  ``timeout`` ms); the answer is built in :mod:`tests.support.matrix_fake_rooms`;
* ``POST /rooms/{room}/join``, ``PUT /rooms/{room}/send/{type}/{txn}`` (the same
  transaction id of the same device gives the same event; an event over 65,536
  bytes of canonical JSON is 413 ``M_TOO_LARGE``; only a joined member may send),
  ``PUT /rooms/{room}/typing/{user}``, ``GET /rooms/{room}/joined_members``,
  ``GET /rooms/{room}/state/{type}/{key}``, ``GET /rooms/{room}/event/{id}``,
  ``GET /profile/{user}/displayname``, ``GET|PUT /user/{user}/account_data/{type}``;
* ``POST /_matrix/media/v3/upload`` and the authenticated download
  ``GET /_matrix/client/v1/media/download/{server}/{id}``.

Tests build rooms with :meth:`FakeHomeserver.room`, post as users with
:meth:`FakeHomeserver.message` (and :meth:`~FakeHomeserver.join`,
:meth:`~FakeHomeserver.leave`, :meth:`~FakeHomeserver.invite`), read what the bot
sent with :meth:`FakeHomeserver.next_sent`; ``sync_faults`` (``"500"``, ``"drop"``,
``"429"``, ``"401"``), ``send_limits`` and ``join_limits`` (429s for the next sends or
joins) inject trouble.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from aiohttp import web

from tests.support.matrix_fake_rooms import (
    ACCOUNT_MARK,
    ANN,
    BOB,
    BOT,
    BOT_NAME,
    DEVICE,
    INVITE_MARK,
    MAX_EVENT_BYTES,
    PASSWORD,
    SERVER,
    TOKEN,
    FakeRoom,
    canonical,
    error,
    sync_body,
)

# the caller's (user, device), set by the token check (a RequestKey: a str key warns, and the
# first request of a process whose warnings are errors would be answered 500)
WHO = web.RequestKey("who", tuple)


class FakeHomeserver:
    """One fake homeserver; ``base`` is what ``api_base`` should be set to."""

    def __init__(self) -> None:
        self.tokens: dict[str, tuple[str, str]] = {TOKEN: (BOT, DEVICE)}  # token -> user, device
        self.devices: set[str] = {DEVICE}
        self.passwords = {BOT: PASSWORD}
        self.names = {BOT: BOT_NAME, ANN: "Ann", BOB: "Bob"}
        self.rooms: dict[str, FakeRoom] = {}
        self.direct: dict[str, list[str]] = {}
        self.direct_at = 0  # the stream position m.direct was last set at
        self.stream: list[tuple[str, dict[str, Any]]] = []  # (room, event); position = index + 1
        self.sent: list[dict[str, Any]] = []  # events the bot sent: {room, type, content, id}
        self.calls: list[tuple[str, str]] = []  # (method, path)
        self.typing: list[bool] = []  # the bot's typing notices: typing or not
        self.logins: list[dict[str, Any]] = []
        self.media: dict[str, tuple[bytes, str]] = {}
        self.sync_faults: list[str] = []  # "500" | "drop" | "429" | "401", one per sync
        self.send_limits = 0  # the next sends answered 429
        self.join_limits = 0  # the next joins answered 429
        self.join_gate: asyncio.Event | None = None  # when set: joins wait for it
        self.syncing = self.most_syncing = 0  # /sync requests in flight (now, at most)
        self.retry_after_ms = 50
        self.txns: dict[tuple[str, str], str] = {}
        self._ids = itertools.count(1)
        self._taken = 0
        self._changed = asyncio.Condition()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> FakeHomeserver:
        app = web.Application(middlewares=[self._record])
        c, m = "/_matrix/client/v3", "/_matrix/media/v3"
        app.add_routes(
            [
                web.post(f"{c}/login", self._login),
                web.get(f"{c}/account/whoami", self._whoami),
                web.get(f"{c}/sync", self._sync),
                web.post(f"{c}/rooms/{{room}}/join", self._join),
                web.post(f"{c}/join/{{room}}", self._join),
                web.put(f"{c}/rooms/{{room}}/send/{{type}}/{{txn}}", self._send),
                web.put(f"{c}/rooms/{{room}}/typing/{{user}}", self._typing),
                web.get(f"{c}/rooms/{{room}}/joined_members", self._joined_members),
                web.get(f"{c}/rooms/{{room}}/state/{{type}}", self._state),
                web.get(f"{c}/rooms/{{room}}/state/{{type}}/{{key:.*}}", self._state),
                web.get(f"{c}/rooms/{{room}}/event/{{event}}", self._event),
                web.get(f"{c}/profile/{{user}}/displayname", self._displayname),
                web.route("*", f"{c}/user/{{user}}/account_data/{{type}}", self._account_data),
                web.post(f"{m}/upload", self._upload),
                web.get("/_matrix/client/v1/media/download/{server}/{media}", self._download),
            ]
        )
        self._runner = web.AppRunner(app, shutdown_timeout=0.05)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._closing = False
        return self

    async def stop(self) -> None:
        self._closing = True
        async with self._changed:
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeHomeserver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- what tests do -----------------------------------------------------------------------

    def room(self, name: str, *members: str, bot: bool = True, **facts: Any) -> str:
        """Make ``!name:example.org`` with ``members`` joined (and the bot, unless not);
        ``facts``: ``encrypted``, ``power`` (user -> level), ``creator``: a version 12
        room (its id ``!name``, no server name; its creator above every power level)."""
        creator = facts.get("creator")
        room_id = f"!{name}" if creator else f"!{name}:{SERVER}"
        room = FakeRoom.made(room_id, [*members, *([BOT] if bot else [])], self.names)
        if creator:  # its create event's id is the room id's hash: "$" + name
            create = {"room_version": "12", "additional_creators": facts.get("also", [])}
            event = {"type": "m.room.create", "state_key": "", "content": create}
            room.create = {**event, "sender": creator, "event_id": f"${name}", "room_id": room_id}
        room.encrypted, room.joined_at = facts.get("encrypted", False), 0 if bot else None
        room.power["users"] = dict(facts.get("power") or {})
        self.rooms[room.room_id] = room
        return room.room_id

    async def message(self, room: str, sender: str, body: str, **content: Any) -> dict[str, Any]:
        """``sender`` posts an ``m.text`` (``content`` adds or replaces fields)."""
        full = {"msgtype": "m.text", "body": body, **content}
        return await self.post(room, sender, "m.room.message", full)

    async def post(
        self, room: str, sender: str, type: str, content: dict[str, Any], **extra: Any
    ) -> dict[str, Any]:
        """Append an event to ``room``'s timeline and the sync stream."""
        event = {
            "type": type,
            "sender": sender,
            "content": content,
            **extra,
            "event_id": f"$ev{next(self._ids)}",
            "room_id": room,
            "origin_server_ts": int(time.time() * 1000),
        }
        self.rooms[room].events.append(event)
        async with self._changed:
            self.stream.append((room, event))
            self._changed.notify_all()
        return event

    async def member(self, room: str, user: str, membership: str, sender: str = "") -> None:
        r = self.rooms[room]
        before = r.members.get(user, {}).get("membership", "leave")
        content = {"membership": membership, "displayname": self.names.get(user, "")}
        r.members[user] = content
        prev = {"prev_content": {"membership": before}}
        await self.post(
            room, sender or user, "m.room.member", content, state_key=user, unsigned=prev
        )

    async def join(self, room: str, user: str) -> None:
        await self.member(room, user, "join")

    async def leave(self, room: str, user: str, by: str = "") -> None:
        await self.member(room, user, "leave", sender=by)

    async def invite(self, room: str, inviter: str, direct: bool = False) -> None:
        """``inviter`` invites the bot into ``room``; ``direct``: as Element's DMs do."""
        r = self.rooms[room]
        r.members[BOT] = {"membership": "invite", **({"is_direct": True} if direct else {})}
        r.inviter = inviter
        async with self._changed:
            r.invited_at = len(self.stream) + 1
            self.stream.append((room, {"type": INVITE_MARK}))
            self._changed.notify_all()

    async def next_sent(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next event the bot sent, not yet taken (waits for it)."""
        taken = self._taken
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.sent) > taken)
        self._taken = taken + 1
        return self.sent[taken]

    async def nothing_sent(self, wait: float = 0.3) -> None:
        await asyncio.sleep(wait)  # then nothing more than was taken has been sent
        assert len(self.sent) == self._taken, f"unexpected send: {self.sent[self._taken]}"

    def count(self, method: str, path_part: str) -> int:
        return sum(1 for m, p in self.calls if m == method and path_part in p)

    # -- the API -------------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every call is recorded; every endpoint but /login needs a known token."""
        self.calls.append((request.method, request.path))
        if not request.path.endswith("/login"):
            who = self._auth(request)
            if isinstance(who, web.Response):
                return who
            request[WHO] = who
        return await handler(request)

    def _auth(self, request: web.Request) -> tuple[str, str] | web.Response:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else request.query.get("access_token")
        if not token:
            return error(401, "M_MISSING_TOKEN", "Missing access token")
        if token not in self.tokens:
            return error(401, "M_UNKNOWN_TOKEN", "Unknown access token", soft_logout=False)
        return self.tokens[token]

    async def _login(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.logins.append({k: v for k, v in body.items() if k != "password"})
        ident = body.get("identifier") or {}
        user = ident.get("user") or body.get("user") or ""
        if user and not user.startswith("@"):
            user = f"@{user}:{SERVER}"
        if body.get("type") != "m.login.password" or ident.get("type", "m.id.user") != "m.id.user":
            return error(400, "M_UNKNOWN", "Unknown login type")
        if self.passwords.get(user) != body.get("password"):
            return error(403, "M_FORBIDDEN", "Invalid username or password")
        device = body.get("device_id") or f"DEV{next(self._ids)}"
        self.devices.add(device)
        token = f"syt_fake_{next(self._ids)}_token_value"
        self.tokens = {t: v for t, v in self.tokens.items() if v != (user, device)}
        self.tokens[token] = (user, device)
        return web.json_response({"user_id": user, "access_token": token, "device_id": device})

    async def _whoami(self, request: web.Request) -> web.Response:
        who = request[WHO]
        return web.json_response({"user_id": who[0], "device_id": who[1]})

    async def _sync(self, request: web.Request) -> web.StreamResponse:
        who = request[WHO]
        if self.sync_faults:
            return self._sync_fault(request, self.sync_faults.pop(0), who)
        since = request.query.get("since")
        if since and not (since[:1] == "s" and since[1:].isdigit()):  # as Synapse answers it
            return error(400, "M_UNKNOWN", f"Invalid stream token {since!r}")
        pos = int(since[1:]) if since else None
        timeout = int(request.query.get("timeout", "0")) / 1000
        self.syncing += 1
        self.most_syncing = max(self.most_syncing, self.syncing)
        try:
            if pos is not None and len(self.stream) <= pos and timeout > 0:
                async with self._changed, asyncio.timeout(timeout):
                    await self._changed.wait_for(lambda: len(self.stream) > pos or self._closing)
        except TimeoutError:
            pass
        finally:
            self.syncing -= 1
        return web.json_response(
            sync_body(self.rooms, self.stream, self.direct, pos, self.direct_at)
        )

    def _sync_fault(self, request: web.Request, fault: str, who: tuple[str, str]) -> web.Response:
        if fault == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        if fault == "401":  # the device was logged out: its tokens are revoked
            self.tokens = {t: v for t, v in self.tokens.items() if v != who}
            return error(401, "M_UNKNOWN_TOKEN", "Unknown access token")
        if fault == "429":
            return error(429, "M_LIMIT_EXCEEDED", "Too many", retry_after_ms=self.retry_after_ms)
        return error(500, "M_UNKNOWN", "Internal server error")

    async def _join(self, request: web.Request) -> web.Response:
        who = request[WHO]
        room_id = request.match_info["room"]
        room = self.rooms.get(room_id)
        if room is None or room.members.get(who[0], {}).get("membership") != "invite":
            return error(403, "M_FORBIDDEN", "You are not invited to this room.")
        if self.join_limits > 0:  # Synapse's rc_joins: a burst of 10, then one per 10 s
            self.join_limits -= 1
            return error(429, "M_LIMIT_EXCEEDED", "Too many", retry_after_ms=self.retry_after_ms)
        if self.join_gate is not None:  # a join over federation that takes its time
            await self.join_gate.wait()
        await self.member(room_id, who[0], "join")
        room.joined_at = len(self.stream)
        return web.json_response({"room_id": room_id})

    async def _send(self, request: web.Request) -> web.Response:
        who = request[WHO]
        room_id, kind, txn = (request.match_info[k] for k in ("room", "type", "txn"))
        room = self.rooms.get(room_id)
        if room is None or room.members.get(who[0], {}).get("membership") != "join":
            return error(403, "M_FORBIDDEN", "User not in room")
        if (who[1], txn) in self.txns:
            return web.json_response({"event_id": self.txns[(who[1], txn)]})
        if self.send_limits > 0:
            self.send_limits -= 1
            return error(429, "M_LIMIT_EXCEEDED", "Too many", retry_after_ms=self.retry_after_ms)
        content = await request.json()
        # the homeserver adds ~1-2 KB (ids, hashes, signatures) before the 65,536-byte check
        envelope = {"content": content, "room_id": room_id, "type": kind, "sender": who[0]}
        if len(canonical(envelope)) > MAX_EVENT_BYTES - 2048:
            return error(413, "M_TOO_LARGE", "event too large")
        event = await self.post(room_id, who[0], kind, content)
        self.txns[(who[1], txn)] = event["event_id"]
        async with self._changed:
            self.sent.append(
                {"room": room_id, "type": kind, "content": content, "id": event["event_id"]}
            )
            self._changed.notify_all()
        return web.json_response({"event_id": event["event_id"]})

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(bool((await request.json()).get("typing")))
        return web.json_response({})

    async def _joined_members(self, request: web.Request) -> web.Response:
        room = self.rooms[request.match_info["room"]]
        joined = {u: {"display_name": room.members[u].get("displayname")} for u in room.joined()}
        return web.json_response({"joined": joined})

    async def _state(self, request: web.Request) -> web.Response:
        room = self.rooms[request.match_info["room"]]
        if request.match_info["type"] == "m.room.power_levels":
            return web.json_response(room.power)
        return error(404, "M_NOT_FOUND", "Event not found.")

    async def _event(self, request: web.Request) -> web.Response:
        room = self.rooms[request.match_info["room"]]
        for event in [*([room.create] if room.create else []), *room.events]:
            if event["event_id"] == request.match_info["event"]:
                return web.json_response(event)
        return error(404, "M_NOT_FOUND", "Event not found.")

    async def _displayname(self, request: web.Request) -> web.Response:
        name = self.names.get(request.match_info["user"])
        if name is None:
            return error(404, "M_NOT_FOUND", "Profile not found")
        return web.json_response({"displayname": name})

    async def _account_data(self, request: web.Request) -> web.Response:
        if request.method == "PUT" and request.match_info["type"] == "m.direct":
            self.direct = await request.json()
            async with self._changed:  # the next sync carries it
                self.stream.append(("", {"type": ACCOUNT_MARK}))
                self.direct_at = len(self.stream)
                self._changed.notify_all()
            return web.json_response({})
        if request.match_info["type"] == "m.direct" and self.direct:
            return web.json_response(self.direct)
        return error(404, "M_NOT_FOUND", "Account data not found")

    async def _upload(self, request: web.Request) -> web.Response:
        media_id = f"m{next(self._ids)}"
        self.media[media_id] = (await request.read(), request.content_type)
        return web.json_response({"content_uri": f"mxc://{SERVER}/{media_id}"})

    async def _download(self, request: web.Request) -> web.Response:
        found = self.media.get(request.match_info["media"])
        if found is None:
            return error(404, "M_NOT_FOUND", "Not found")
        return web.Response(body=found[0], content_type=found[1])
