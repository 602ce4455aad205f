"""The Slack adapter: channels, DMs and threads talk to tmy's rules, over Socket Mode or HTTP.

**Library.** The Python Slack SDK (``slack_sdk``) provides what it does well:
:class:`~slack_sdk.web.async_client.AsyncWebClient` for every Web API call
(pointed at ``api_base``, on one aiohttp session; its ``files_upload_v2``
three-step upload), :class:`~slack_sdk.signature.SignatureVerifier` for signed
requests, and the Socket Mode envelope types. tmy does **not** route through
Bolt's ``AsyncApp`` (the rules do the routing, and Bolt's listeners would only
forward to them) nor run the SDK's ``SocketModeClient``: that client retries a
failed connect every few seconds forever (a revoked app token included, with no
backoff or jitter), reconnects on its own where tmy cannot see it, and queues
frames without bound, while tmy must show ``failed``/``reconnecting`` in
``/healthz``, back off with jitter and bound its queues. Its Socket Mode loop is
therefore tmy's own, on the SDK's pieces (:mod:`~tmy.adapters.slack.socket`).

**Starting.** ``auth.test`` with the bot token gives the bot's user id and
workspace; Slack refusing the token (``invalid_auth``, ``not_authed``,
``token_revoked`` …) sets ``failed`` naming the variable to fix, and nothing is
retried; the daemon and the other adapters serve on. A network error or a 5xx
sets ``reconnecting`` and is retried with capped exponential backoff and jitter.
A bot token revoked while running (Slack's ``tokens_revoked``/``app_uninstalled``
event, or a send refused with ``invalid_auth`` and the like) sets ``failed`` too,
and the Socket Mode connection is closed, not reopened.

**Receiving.** ``mode: socket`` (the default): Socket Mode with the app-level
token (``xapp-…``; none set: ``failed`` naming ``SLACK_APP_TOKEN``);
``connected`` after Slack's ``hello``; a lost connection or a ``disconnect``
message sets ``reconnecting`` and opens a new one after a backoff pause (the
pauses grow until a connection has served :attr:`SlackAdapter.stable_after`
seconds, so a Slack that greets and hangs up at once is not called every second).
``mode: webhook``: Slack posts events (and button presses) to
``/slack/events`` on the daemon's listener (:mod:`~tmy.adapters.slack.webhook`).

Each message or event is checked against the deliveries seen
(:class:`tmy.adapters.dedup.Deliveries`, key ``<channel>:<ts>`` for messages,
the ``event_id`` for events) and queued for its channel; channels are served
fairly (:mod:`tmy.adapters.fairness`): at most :data:`MAX_RUNS` runs at once,
:data:`MAX_RUNS_PER_CHAT` from one channel, at most ``max_pending_per_chat``
waiting per channel (the oldest dropped past it) and :data:`MAX_PENDING` in all.
What an event becomes is :mod:`~tmy.adapters.slack.incoming` and
:mod:`~tmy.adapters.slack.events`; answering is :mod:`~tmy.adapters.slack.replies`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from tmy import redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler, cancel_tasks
from tmy.adapters.dedup import Deliveries
from tmy.adapters.fairness import ChatLanes
from tmy.adapters.slack.events import buttons_of, event_of, recall_of, revoked
from tmy.adapters.slack.incoming import Incoming, Me, to_message
from tmy.adapters.slack.replies import Answering
from tmy.adapters.slack.sending import FATAL, QueuedReply, error_of
from tmy.adapters.slack.socket import open_url, serve_connection
from tmy.adapters.slack.users import Users
from tmy.adapters.slack.webhook import PATH, EventsRoute
from tmy.config.slack import SlackConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.store.base import Store

log = get_logger("tmy.adapter.slack")

MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one channel
MAX_PENDING = 1000  # messages waiting in all channels (the webhook then answers 503)
MAX_SENDS = 32  # Web API sends in flight at once (all channels)
API_TIMEOUT = 30  # seconds one Web API call may take
MAX_THREADS = 4096  # messages the bot posted, remembered (a reply in their thread is to it)
MESSAGE_EVENTS = frozenset({"message", "app_mention"})


class SlackAdapter(Answering):
    """Slack over Socket Mode or the Events API; see the module docstring."""

    name = "slack"
    backoff_base = 1.0  # reconnect pauses: first ~backoff_base, doubling up to backoff_cap
    backoff_cap = 60.0
    heartbeat = 10.0  # seconds between WebSocket pings (a silent connection is dropped)
    # a connection that lasted this long resets the reconnect pauses; a shorter one (Slack
    # greeting with hello, then closing at once) lets them grow: hello proves nothing yet
    stable_after = 30.0

    def __init__(
        self,
        config: SlackConfig | None = None,
        *,
        bot_token: str = "",
        app_token: str = "",
        signing_secret: str = "",
        store: Store | None = None,
        shutdown_grace: float = 30.0,
        rules_dir: Path | None = None,
        pacing: float = 1.0,
    ) -> None:
        self.config = config or SlackConfig()
        self.bot_token, self.app_token, self.signing_secret = bot_token, app_token, signing_secret
        for secret in (bot_token, app_token, signing_secret):
            redact.add(secret)
        self.rules_dir = rules_dir  # where a reply's image/file paths are read from
        self.shutdown_grace = shutdown_grace
        self._handle: Handler | None = None
        self._client: AsyncWebClient | None = None
        # Web API calls (each at most API_TIMEOUT s: the SDK applies its own timeout only to
        # sessions it makes) and the Socket Mode WebSocket (long-lived: no total timeout)
        self._session: aiohttp.ClientSession | None = None
        self._ws_session: aiohttp.ClientSession | None = None
        self._me: Me | None = None
        self._health = AdapterHealth()
        self._runner: asyncio.Task[None] | None = None
        self._stopping = False
        self._lanes: ChatLanes[Incoming, QueuedReply] = ChatLanes(
            self.name, self._answer, self._send_step, per_chat=self.config.max_pending_per_chat,
            total=MAX_PENDING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
            interval=pacing,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound
        self._users = Users(self._user_info)
        self._deliveries = Deliveries(store, self.name)
        self._threads: OrderedDict[str, None] = OrderedDict()  # ts of messages the bot posted
        self._route = EventsRoute(
            signing_secret, take_event=self._take_event, take_interactive=self._take_interactive,
            not_ready=self._not_ready, busy=lambda: self._inbound.full,
        )  # fmt: skip

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """``POST /slack/events`` in webhook mode; none in Socket Mode."""
        return [web.post(PATH, self._route)] if self.config.mode == "webhook" else []

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; a missing or bad credential shows as
        ``failed``, never raises. Started already (not stopped since): only ``handle`` is
        taken, so no second connection and session run unseen by :meth:`stop`."""
        self._handle = handle
        if self._runner is not None and not self._runner.done():
            return
        self._stopping = False
        self._lanes.open()
        self._health.set("starting")
        missing = self._missing()
        if missing:
            self._fail(missing)
            return
        await self._close_sessions()  # of a start that failed, not stopped since
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=API_TIMEOUT))
        self._ws_session = aiohttp.ClientSession()
        self._client = AsyncWebClient(
            token=self.bot_token, base_url=self.config.api_base, session=self._session
        )
        self._runner = asyncio.create_task(self._run(), name="slack")
        log.info("slack.started", mode=self.config.mode, api_base=self.config.api_base)

    def _missing(self) -> str:
        """What credential is missing for the mode ("" when none)."""
        c = self.config
        if not self.bot_token:
            return (f"no bot token: set bot_token or the environment variable {c.bot_token_env} "
                    "to the app's Bot User OAuth Token (xoxb-…)")  # fmt: skip
        if c.mode == "socket" and not self.app_token:
            return (f"Socket Mode needs an app-level token: set app_token or the environment "
                    f"variable {c.app_token_env} (xapp-…, scope connections:write)")  # fmt: skip
        if c.mode == "webhook" and not self.signing_secret:
            return (f"the Events API needs the signing secret: set signing_secret or the "
                    f"environment variable {c.signing_secret_env}")  # fmt: skip
        return ""

    async def stop(self) -> None:
        """Take no new events, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = True
        await cancel_tasks(self._runner)
        self._runner = None
        await self._lanes.drain(self.shutdown_grace)
        self._client = None
        await self._close_sessions()
        self._health.stopped()

    async def _close_sessions(self) -> None:
        for session in (self._session, self._ws_session):
            if session is not None:
                await session.close()
        self._session = self._ws_session = None

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        me = self._me
        report["mode"] = self.config.mode
        report["bot_user_id"] = me.user_id if me is not None else None
        report["team"] = me.team if me is not None else None
        report["waiting"] = self._lanes.waiting()
        return report

    def _fail(self, why: str) -> None:
        log.error("slack.failed", error=self._health.failed(why))

    def _not_ready(self) -> str | None:
        if (
            self._stopping
            or self._handle is None
            or self._me is None
            or self._health.state == "failed"
        ):
            return f"the Slack adapter is not ready ({self._health.error or self._health.state})"
        return None

    # -- connecting --------------------------------------------------------------------------

    async def _run(self) -> None:
        """Identify the bot, then keep a Socket Mode connection (or serve the webhook)."""
        backoff = Backoff(self.backoff_base, self.backoff_cap, self.stable_after)
        while not self._stopping:
            try:
                if self._me is None:
                    await self._identify()
                    if self.config.mode == "webhook":
                        self._connected()
                        return  # events now arrive on the route
                assert self._client is not None and self._ws_session is not None
                url = await open_url(self._client, self.app_token)
                backoff.connected()
                why = await serve_connection(
                    self._ws_session, url, heartbeat=self.heartbeat,
                    on_hello=self._connected, on_envelope=self._envelope,
                )  # fmt: skip
                backoff.ended()  # the pauses start short again only after it served a while
                await self._pause(backoff, why)
            except AdapterError:
                return  # the token was revoked while connected: failed already
            except SlackApiError as exc:
                code = error_of(exc)
                if code in FATAL:
                    self._fail(self._refused(code))
                    return
                await self._pause(backoff, f"Slack answered {code}")
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                await self._pause(backoff, _network_error(exc))
            except Exception as exc:  # never let the reconnect loop die
                log.exception("slack.run_crashed", error=repr(exc))
                await self._pause(backoff, repr(exc))

    def _refused(self, code: str) -> str:
        c = self.config
        if self._me is None:
            return (f"Slack refused the bot token in {c.bot_token_env} (auth.test: {code}); "
                    "reinstall the app and copy its Bot User OAuth Token (xoxb-…)")  # fmt: skip
        return (f"Slack refused the app-level token in {c.app_token_env} "
                f"(apps.connections.open: {code}); create one with scope connections:write "
                "(xapp-…) and turn Socket Mode on")  # fmt: skip

    def _token_refused(self, method: str, code: str) -> None:
        """Slack refused the bot token on a call (``invalid_auth`` …) after ``auth.test``
        took it: it was revoked while running. ``failed`` naming the variable, and the
        Socket Mode connection is closed (a revoked bot token answers no event)."""
        if self._health.state == "failed" or self._stopping:
            return
        self._fail(
            f"Slack refused the bot token in {self.config.bot_token_env} ({method}: {code}); "
            "reinstall the app and copy its Bot User OAuth Token (xoxb-…)"
        )
        if self._runner is not None:
            self._runner.cancel()

    async def _identify(self) -> None:
        assert self._client is not None
        answer = await self._client.auth_test()
        self._me = Me(
            user_id=str(answer.get("user_id") or ""),
            bot_id=str(answer.get("bot_id") or ""),
            team_id=str(answer.get("team_id") or ""),
            team=str(answer.get("team") or ""),
        )

    def _connected(self) -> None:
        if self._health.connected(self.name):
            log.info("slack.connected", mode=self.config.mode,
                     bot_user_id=self._me.user_id if self._me else None)  # fmt: skip

    async def _pause(self, backoff: Backoff, why: str) -> None:
        if self._stopping:
            return
        why = redact.redact(why)
        self._health.set("reconnecting", why)
        delay = backoff.next()
        log.warning("slack.reconnecting", error=why, retry_in=round(delay, 2))
        await asyncio.sleep(delay)

    # -- receiving ---------------------------------------------------------------------------

    async def _envelope(self, request: SocketModeRequest) -> None:
        """One acknowledged Socket Mode envelope."""
        if request.type == "events_api":
            await self._take_event(request.payload)
        elif request.type == "interactive":
            await self._take_interactive(request.payload)

    async def _take_event(self, payload: dict[str, Any]) -> None:
        """An ``event_callback`` (Socket Mode or webhook): queue what it asks the rules."""
        me, event = self._me, payload.get("event")
        if me is None or not isinstance(event, dict):
            return
        self._health.event()
        kind = event.get("type")
        if revoked(event, me):
            self._fail(
                f"Slack says {kind}: the app was removed or its bot token revoked; "
                f"reinstall it and put the new token in {self.config.bot_token_env}"
            )
            if self.config.mode == "socket":
                raise AdapterError("slack: stop serving, the token is gone")  # ends the link
            return
        try:
            if kind in MESSAGE_EVENTS:
                if event.get("subtype") == "message_deleted":
                    incoming = recall_of(event, me)
                else:
                    incoming = to_message(event, me, self._threads)
            else:
                incoming = event_of(event, str(payload.get("event_id") or ""), me)
        except Exception as exc:
            log.exception("slack.event_failed", event_id=payload.get("event_id"), error=repr(exc))
            return
        if incoming is not None:
            await self._queue_incoming(incoming)

    async def _take_interactive(self, payload: dict[str, Any]) -> None:
        """An interactivity payload: a ``block_actions`` press becomes ``button`` events."""
        if self._me is None:
            return
        self._health.event()
        try:
            found = buttons_of(payload, self._me)
        except Exception as exc:  # a payload of another shape: dropped, the connection serves on
            log.exception("slack.interactive_failed", kind=payload.get("type"), error=repr(exc))
            return
        for incoming in found:
            await self._queue_incoming(incoming)

    async def _queue_incoming(self, incoming: Incoming) -> None:
        assert self._me is not None
        if await self._deliveries.first(self._me.team_id + ":" + self._me.user_id, incoming.key):
            self._inbound.put(incoming.channel, incoming)

    def _posted(self, channel: str, ts: str) -> None:
        self._threads[ts] = None
        if len(self._threads) > MAX_THREADS:
            self._threads.popitem(last=False)

    async def _user_info(self, user: str) -> dict[str, Any]:
        if self._client is None:
            return {}
        answer = await self._client.users_info(user=user)
        found = answer.get("user")
        return found if isinstance(found, dict) else {}


def _network_error(exc: BaseException) -> str:
    """A network error in words, without the URL: a Socket Mode URL holds its ticket."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{type(exc).__name__}: HTTP {exc.status} {exc.message}"
    return f"{type(exc).__name__}: {exc}"
