"""The Matrix adapter: rooms and DMs of one bot account talk to tmy's rules.

**Receiving.** After the login (:mod:`~tmy.adapters.matrix.session`: an access
token checked with ``whoami``, or a password login whose device is kept) the
adapter long-polls ``/sync`` (:data:`POLL_TIMEOUT` seconds, with a filter that
leaves out presence and lazy-loads members) on one task. Each answer is read in
order: the account's ``m.direct`` list and each room's state update
:class:`~tmy.adapters.matrix.rooms.Rooms`; invites are accepted (a bot that
must be invited *and* then told to join is no use: anyone who can invite it gets
it, so keep it out of rooms by not inviting it; a join the homeserver refuses for
now is tried again, :mod:`~tmy.adapters.matrix.invites`); each room's timeline becomes
messages and events (:mod:`~tmy.adapters.matrix.incoming`), deduplicated by event
id in the store (:class:`~tmy.adapters.dedup.Deliveries`) and queued for their
room (:class:`~tmy.adapters.fairness.ChatQueues`: each runs as its own task, a
long LLM run never stops the reader, and one busy room cannot starve the
others). Then ``next_batch`` is kept in the store, so a restart goes on from
there; the very first start (no token yet) answers none of the history the first
sync brings (nor does a start whose kept token the homeserver refuses with a 400),
and a room the bot has just joined none of the events from before its join that
come with it.

**Failures.** A refused token (``M_UNKNOWN_TOKEN``, 401) or password
(``M_FORBIDDEN``) sets ``failed`` with what to fix, and nothing is retried; the
daemon and the other adapters go on. A lost connection, a timeout or a 5xx sets
``reconnecting`` and is retried with capped exponential backoff and jitter; a 429
``M_LIMIT_EXCEEDED`` waits the homeserver's ``retry_after_ms`` (at most
:attr:`MatrixAdapter.retry_after_cap`). A password session logged out while tmy
runs logs in again (same device) once; when the new session is refused too before
one sync has gone through, that is ``failed``, not a loop of logins.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from mautrix.api import Method
from mautrix.api import Path as ApiPath
from mautrix.client import ClientAPI
from mautrix.errors import MatrixInvalidToken, MatrixRequestError, MForbidden, MNotFound
from mautrix.types import EventType, RoomID, SyncToken, UserID

from tmy import redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler, cancel_tasks
from tmy.adapters.dedup import Deliveries
from tmy.adapters.fairness import ChatLanes
from tmy.adapters.matrix.compose import MediaLoader
from tmy.adapters.matrix.http import MatrixHttp, describe, is_bad_token, retry_after
from tmy.adapters.matrix.incoming import Incoming, Me, Recent, after_own_join, read_room_events
from tmy.adapters.matrix.invites import Invites, inviter_of
from tmy.adapters.matrix.media import fetch_event
from tmy.adapters.matrix.paths import download_base
from tmy.adapters.matrix.replies import Answering
from tmy.adapters.matrix.rooms import Rooms
from tmy.adapters.matrix.sending import QueuedReply
from tmy.adapters.matrix.session import (
    Credentials,
    StoredSyncToken,
    log_in,
    missing_credential,
    refusal,
)
from tmy.config.matrix import MatrixConfig
from tmy.logs import get_logger
from tmy.store.base import Store

log = get_logger("tmy.adapter.matrix")

POLL_TIMEOUT = 30.0  # seconds one /sync long poll waits on the homeserver's side
REQUEST_SLACK = 15.0  # seconds added to it before the request itself times out
MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one room
MAX_PENDING = 1000  # messages waiting in all rooms; the sync pauses past it
MAX_SENDS = 32  # send requests in flight at once (all rooms)
SYNC_FILTER = json.dumps(
    {
        "presence": {"not_types": ["*"]},
        "room": {"timeline": {"limit": 50}, "state": {"lazy_load_members": True}},
    },
    separators=(",", ":"),
)
__all__ = ["MatrixAdapter"]


class MatrixAdapter(Answering):
    """Matrix over the client-server API (mautrix); see the module docstring."""

    name = "matrix"
    backoff_base = 1.0  # reconnect pauses: first ~backoff_base, doubling up to backoff_cap
    backoff_cap = 60.0
    # the longest wait a 429 on /sync or /login is obeyed for; a longer retry_after_ms (a
    # misconfigured or hostile homeserver) is cut to it, so the adapter asks again
    retry_after_cap = 300.0
    poll_timeout = POLL_TIMEOUT
    # seconds between two events sent to one room (a long reply's pieces arrive in order,
    # not as one burst); the homeserver's own limit is per account (Synapse's default
    # rc_message: a burst of 10, then 0.2/s) and answered by its 429 retry_after_ms
    send_interval = 0.2

    def __init__(
        self,
        config: MatrixConfig | None = None,
        *,
        credentials: Credentials | None = None,
        store: Store | None = None,
        shutdown_grace: float = 30.0,
        rules_dir: Path | None = None,
        loader: MediaLoader | None = None,
    ) -> None:
        self.config = config or MatrixConfig()
        self.credentials = credentials = credentials or Credentials("", "", "")
        self.store = store
        self.shutdown_grace = shutdown_grace
        redact.add(credentials.access_token)
        redact.add(credentials.password)
        self._loader = loader or MediaLoader(rules_dir)
        self._handle: Handler | None = None
        self._client: ClientAPI | None = None
        self._session: aiohttp.ClientSession | None = None
        self._me: Me | None = None
        self._health = AdapterHealth()
        self._good_syncs = 0  # /sync answers received (a relogin is allowed once per count)
        self._runner: asyncio.Task[None] | None = None
        self._stopping = False
        self._recent = Recent()
        self._rooms = Rooms(self._joined_members, self._power_levels, self._create_event)
        self._deliveries = Deliveries(store, "matrix")
        self._told_encrypted: set[str] = set()
        self._invites = Invites(self._rooms.add_direct)
        self._sync_token: StoredSyncToken | None = None
        self._login_lock = asyncio.Lock()
        self._lanes: ChatLanes[Incoming, QueuedReply] = ChatLanes(
            self.name, self._answer, self._send_step, per_chat=self.config.max_pending_per_chat,
            total=MAX_PENDING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
            interval=self.send_interval,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[Any]:
        """None: the adapter reaches the homeserver itself (``/sync``)."""
        return []

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; a bad credential shows as ``failed``.
        Already started (and not stopped): nothing more, one sync loop per account."""
        if self._runner is not None and not self._runner.done():
            return
        self._handle = handle
        self._stopping = False
        self._me = None  # a new client logs in again (a restart after stop())
        self._lanes.open()
        self._health.set("starting")
        missing = missing_credential(self.credentials, self.config)
        if missing:
            self._fail(missing)
            return
        if self._session is not None:  # a start after a failed one, without stop()
            await self._session.close()
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(
                total=self.poll_timeout + REQUEST_SLACK + 60, sock_connect=15
            )
        )
        api = MatrixHttp(self.config.api_base, client_session=self._session)
        self._client = ClientAPI(
            UserID(self.credentials.user_id) if self.credentials.user_id else "", api=api
        )
        self._runner = asyncio.create_task(self._run(), name="matrix")
        log.info("matrix.started", api_base=self.config.api_base)

    async def stop(self) -> None:
        """Take no new events, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = True
        await cancel_tasks(self._runner)
        self._runner = None
        await self._invites.close()
        await self._lanes.drain(self.shutdown_grace)
        await self._loader.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._client = None
        self._health.stopped()

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["user_id"] = self._me.user_id if self._me is not None else None
        report["device_id"] = self._client.device_id if self._client is not None else None
        report["waiting"] = self._lanes.waiting()
        return report

    def _fail(self, why: str) -> None:
        log.error("matrix.failed", error=self._health.failed(why))

    # -- receiving ---------------------------------------------------------------------------

    async def _run(self) -> None:
        """Log in, then sync, reconnecting until stopped (a refused credential ends it)."""
        assert self._client is not None
        client, backoff = self._client, Backoff(self.backoff_base, self.backoff_cap)
        relogged_at = -1  # self._good_syncs when a password login was last redone
        while not self._stopping:
            try:
                if self._me is None:
                    async with self._login_lock:
                        await log_in(client, self.credentials, self.store)
                    await self._prepare(client)
                await self._sync(client, backoff)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                revoked = is_bad_token(exc) and self._me is not None
                if revoked and self.credentials.password and relogged_at != self._good_syncs:
                    # the kept session was logged out: log in again (same device), once
                    # until a sync goes through (the state may still say "connected")
                    log.warning("matrix.session_revoked", error=describe(exc))
                    self._me, relogged_at = None, self._good_syncs
                    continue
                if is_bad_token(exc) or (self._me is None and isinstance(exc, MForbidden)):
                    self._fail(
                        refusal(
                            self.credentials, self.config, exc, again=revoked and relogged_at >= 0
                        )
                    )
                    return
                await self._pause(backoff, exc)

    async def _pause(self, backoff: Backoff, exc: BaseException) -> None:
        """``reconnecting``: wait the homeserver's retry_after, else the backoff's next pause."""
        wait = retry_after(exc)
        wait = backoff.next() if wait is None else min(wait, self.retry_after_cap)
        self._health.set("reconnecting", describe(exc))
        log.warning("matrix.reconnecting", error=describe(exc), retry_in=round(wait, 2))
        await asyncio.sleep(wait)

    async def _reauth(self) -> bool:
        """After a refused token on a send: log in again with the password (same device),
        once for all the sends that meet it. False without a password (or when it fails)."""
        client = self._client
        if not self.credentials.password or client is None:
            return False
        async with self._login_lock:
            try:
                await client.whoami()
                return True  # another send (or the sync) has logged in again meanwhile
            except MatrixInvalidToken:
                pass
            except Exception:
                return False
            try:
                await log_in(client, self.credentials, self.store)
            except Exception as exc:
                log.warning("matrix.relogin_failed", error=describe(exc))
                return False
        log.warning("matrix.session_revoked", hint="logged in again with the password")
        return True

    async def _prepare(self, client: ClientAPI) -> None:
        """After the login: the bot's display name, the DM list, the stored sync token."""
        name = ""
        try:  # none set, or profiles hidden by the homeserver: mentions by id still work
            name = await client.get_displayname(client.mxid) or ""
        except MatrixRequestError as exc:
            log.info("matrix.no_display_name", error=describe(exc))
        try:  # no DM list yet: rooms of two are DMs still
            self._rooms.set_direct(dict(await client.get_account_data(EventType.DIRECT)))
        except MatrixRequestError as exc:
            if not isinstance(exc, MNotFound):
                log.info("matrix.no_direct_list", error=describe(exc))
        wanted = self.credentials.user_id
        if wanted and wanted != client.mxid:
            log.warning(
                "matrix.other_user",
                user_id=wanted,
                token_user=client.mxid,
                hint="the access token is another account's; it is used",
            )
        base = download_base(self.config.api_base)
        self._sync_token = StoredSyncToken(self.store, client.mxid)
        self._me = Me(client.mxid, name, base)
        log.info("matrix.logged_in_as", user_id=client.mxid, device_id=client.device_id)

    async def _sync(self, client: ClientAPI, backoff: Backoff) -> None:
        """Long-poll ``/sync`` until an error (raised to ``_run``) or a stop."""
        assert self._sync_token is not None
        token = str(await self._sync_token.get_next_batch()) or None
        history = token is None  # the first start: the first batch is the past
        while not self._stopping:
            await self._inbound.room()  # too many messages waiting: let the homeserver keep them
            timeout = self.poll_timeout if self._health.state == "connected" else 0.0
            retry_join = self._invites.next_in()  # an invited room's join to try again
            if retry_join is not None:
                timeout = min(timeout, retry_join)
            try:
                async with asyncio.timeout(timeout + REQUEST_SLACK):
                    data = await client.sync(
                        since=SyncToken(token) if token else None,
                        timeout=int(timeout * 1000),
                        filter_id=SYNC_FILTER,
                    )
            except MatrixRequestError as exc:
                if not (token and getattr(exc, "http_status", 0) == 400):
                    raise
                # a position this homeserver does not know (it was moved, or its database
                # reset): start from now, as a first start does, instead of failing forever
                log.warning("matrix.sync_token_refused", error=describe(exc), next_batch=token)
                token, history = None, True
                continue
            self._connected()
            self._good_syncs += 1
            backoff.reset()
            await self._absorb(client, data, history)
            token = str(data.get("next_batch") or token or "")
            if history:
                log.info("matrix.history_skipped", next_batch=token)
            history = False
            await self._sync_token.put_next_batch(SyncToken(token))

    def _connected(self) -> None:
        if self._health.connected(self.name):
            log.info("matrix.connected", user_id=self._me.user_id if self._me else None)

    async def _absorb(self, client: ClientAPI, data: dict[str, Any], history: bool) -> None:
        """One sync answer: account data, invites, then each joined room's state and timeline."""
        assert self._me is not None
        for event in (data.get("account_data") or {}).get("events") or []:
            if event.get("type") == "m.direct" and isinstance(event.get("content"), dict):
                self._rooms.set_direct(event["content"])
        rooms = data.get("rooms") or {}
        for room_id, invite in (rooms.get("invite") or {}).items():
            self._invites.add(room_id, *inviter_of(invite, client.mxid))
        self._invites.join_due(client)
        for room_id, joined in (rooms.get("join") or {}).items():
            timeline = (joined.get("timeline") or {}).get("events") or []
            state = (joined.get("state") or {}).get("events") or []
            self._rooms.learn(room_id, joined.get("summary") or {}, [*state, *timeline])
            if history:
                continue
            names = self._rooms.room(room_id).names
            timeline = timeline[after_own_join(timeline, self._me.user_id) :]
            for incoming in read_room_events(room_id, timeline, self._me, self._recent, names):
                if await self._deliveries.first(self._me.user_id, incoming.message.message_id):
                    self._health.event()
                    self._inbound.put(room_id, incoming)

    async def _joined_members(self, room_id: str) -> dict[str, str]:
        assert self._client is not None
        members = await self._client.get_joined_members(RoomID(room_id))
        return {str(u): m.displayname or "" for u, m in members.items()}

    async def _power_levels(self, room_id: str) -> dict[str, Any]:
        assert self._client is not None
        path = ApiPath.v3.rooms[room_id].state["m.room.power_levels"]
        return dict(await self._client.api.request(Method.GET, path))

    async def _create_event(self, room_id: str) -> dict[str, Any]:
        """A version 12 room's create event: its id is the room id's hash ("!x" -> "$x")."""
        assert self._client is not None
        return await fetch_event(self._client, room_id, "$" + room_id[1:])
