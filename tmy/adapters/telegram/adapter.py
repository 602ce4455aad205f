"""The Telegram adapter (aiogram 3): private chats, groups and supergroups talk to tmy's rules.

**Library.** aiogram 3 provides the Bot API client (``Bot`` over an
``AiohttpSession`` pointed at ``api_base``), the typed ``Update``/``Message``
objects and the error classes (``TelegramRetryAfter`` and friends). tmy runs
its own small ``getUpdates`` loop instead of aiogram's ``Dispatcher``: the
rules do the routing, and the Dispatcher's polling retries a revoked token
forever and reports nothing, while tmy must show ``failed``/``reconnecting``
in ``/healthz``.

**Receiving.** ``mode: polling`` (the default): ``getMe`` (a 401 means a bad
token: state ``failed``, nothing is retried), ``deleteWebhook`` (Telegram
refuses ``getUpdates`` while a webhook is set), then long polling. A network
error, a 5xx or a 409 Conflict (another process polling with the same token)
sets ``reconnecting`` and is retried with capped exponential backoff and
jitter. ``mode: webhook``: ``setWebhook`` with ``webhook_url`` and a secret
(``webhook_secret``, or a random one made at start), and Telegram posts
updates to ``webhook_path`` on the daemon's HTTP listener; a request without
``X-Telegram-Bot-Api-Secret-Token`` is refused with 401, a wrong one with 403.
The webhook is left in place at stop, so a restart loses nothing.

Telegram is asked for messages (with joins and leaves), reactions, button
presses and join requests (:data:`~tmy.adapters.telegram.updates.ALLOWED_UPDATES`);
each message or event is queued for its chat and runs as its own task (a
long LLM run never stops the reader). Chats are served fairly
(:mod:`tmy.adapters.fairness`): at most :data:`MAX_RUNS` runs are in the
engine at once, at most :data:`MAX_RUNS_PER_CHAT` from one chat, round-robin
over the chats with messages waiting; at most ``max_pending_per_chat``
messages wait per chat (past that the chat's oldest is dropped:
``telegram.chat_dropped``, the ``tmy_chat_dropped`` metric) and
:data:`MAX_PENDING` in all (polling then waits before fetching more; a webhook
answers 503 and Telegram delivers again later).

What an update becomes is :mod:`tmy.adapters.telegram.updates` (messages:
``incoming`` and ``media``; events: ``events``); running it and answering
(admins, streaming, "typing…", join requests) is
:mod:`tmy.adapters.telegram.replies`; how replies are built (pictures, files,
mentions, buttons) is ``compose``, how they go out (flood waits, migrations,
retries) ``sending``.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections import OrderedDict
from pathlib import Path
from typing import Any

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.types import Update, User
from aiogram.utils.token import TokenValidationError
from aiohttp import web
from pydantic import ValidationError

from tmy import redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler, cancel_tasks
from tmy.adapters.fairness import ChatLanes
from tmy.adapters.telegram.admins import ChatAdmins
from tmy.adapters.telegram.errors import describe, error_code, method_name
from tmy.adapters.telegram.replies import Answering
from tmy.adapters.telegram.sending import QueuedReply
from tmy.adapters.telegram.updates import ALLOWED_UPDATES, Incoming, read_update
from tmy.config.adapters import TelegramConfig
from tmy.logs import get_logger, preview

log = get_logger("tmy.adapter.telegram")

POLL_TIMEOUT = 25  # seconds one getUpdates long poll waits on Telegram's side
REQUEST_SLACK = 15  # seconds added to POLL_TIMEOUT before the HTTP request itself times out
MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one chat (the rest stay free for the other chats)
MAX_PENDING = 1000  # messages waiting in all chats; polling pauses, the webhook says 503
MAX_SENDS = 32  # sendMessage requests in flight at once (all chats)
MAX_SEEN_UPDATES = 2048  # update ids remembered, so a webhook delivered twice runs once
__all__ = ["ALLOWED_UPDATES", "TelegramAdapter"]


class TelegramAdapter(Answering):
    """Telegram over the Bot API, long polling or webhook; see the module docstring."""

    name = "telegram"
    # reconnect pauses: first ~backoff_base, doubling up to backoff_cap (tests shrink them)
    backoff_base = 1.0
    backoff_cap = 60.0
    poll_timeout = POLL_TIMEOUT

    def __init__(
        self,
        config: TelegramConfig | None = None,
        *,
        token: str = "",
        shutdown_grace: float = 30.0,
        rules_dir: Path | None = None,
    ) -> None:
        self.config = config or TelegramConfig()
        self.token = token
        self.rules_dir = rules_dir  # where a reply's image/file paths are read from
        self.shutdown_grace = shutdown_grace  # how long stop() lets replies in flight go out
        self.secret = self.config.webhook_secret
        redact.add(token)
        redact.add(self.secret)
        self._handle: Handler | None = None
        self._bot: Bot | None = None
        self._server: TelegramAPIServer | None = None
        self._me: User | None = None
        self._health = AdapterHealth()
        self._connected_before = False  # metrics: a later "connected" is a reconnect
        self._runner: asyncio.Task[None] | None = None
        self._lanes: ChatLanes[Incoming, QueuedReply] = ChatLanes(
            self.name, self._answer, self._send_step, per_chat=self.config.max_pending_per_chat,
            total=MAX_PENDING, runs=MAX_RUNS, runs_per_chat=MAX_RUNS_PER_CHAT, sends=MAX_SENDS,
        )  # fmt: skip
        self._inbound, self._outbound = self._lanes.inbound, self._lanes.outbound
        self._admins = ChatAdmins(self._chat_admins, self.config.admins_from,
                                  self.config.admins_ttl)  # fmt: skip
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._offset: int | None = None  # next getUpdates offset (confirms everything before)
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """The webhook endpoint on the daemon's HTTP listener; none in polling mode."""
        if self.config.mode != "webhook":
            return []
        return [web.post(self.config.webhook_path, self._webhook)]

    async def start(self, handle: Handler) -> None:
        """Begin connecting in the background; a bad token shows as ``failed``, never raises."""
        self._handle = handle
        self._stopping = False
        self._lanes.open()  # again after a stop()
        self._health.set("starting")
        if not self.token:
            self._fail(
                f"no bot token: set the environment variable {self.config.token_env} "
                "to the token @BotFather gave you"
            )
            return
        try:
            self._server = TelegramAPIServer.from_base(self.config.api_base)
            session = AiohttpSession(api=self._server)
            self._bot = Bot(self.token, session=session)
        except TokenValidationError:
            self._fail(
                f"the token in {self.config.token_env} is malformed: expected "
                "<digits>:<secret>, as @BotFather gives it"
            )
            return
        if self.config.mode == "webhook" and not self.secret:
            self.secret = secrets.token_urlsafe(32)
            redact.add(self.secret)
        self._runner = asyncio.create_task(self._run(), name="telegram")
        log.info("telegram.started", mode=self.config.mode, api_base=self.config.api_base)

    async def stop(self) -> None:
        """Take no new updates, let replies in flight go out (``shutdown_grace``), then close."""
        self._stopping = True
        await cancel_tasks(self._runner)
        self._runner = None
        await self._lanes.drain(self.shutdown_grace)
        if self._bot is not None:
            await self._confirm_offset()
            await self._bot.session.close()
            self._bot = None
        self._health.stopped()

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["mode"] = self.config.mode
        report["username"] = self._me.username if self._me is not None else None
        report["bot_id"] = str(self._me.id) if self._me is not None else None
        report["waiting"] = self._lanes.waiting()
        return report

    def _fail(self, why: str) -> None:
        log.error("telegram.failed", error=self._health.failed(why))

    async def _confirm_offset(self) -> None:
        """Tell Telegram the updates already taken are done, so a restart does not replay them.

        Telegram confirms updates only with the *next* ``getUpdates``; without
        this the last batch before a stop would be answered again after it.
        """
        if self.config.mode != "polling" or self._offset is None or self._bot is None:
            return
        try:
            await self._bot.get_updates(offset=self._offset, limit=1, timeout=0, request_timeout=5)
        except (TelegramAPIError, ClientDecodeError) as exc:
            log.warning("telegram.confirm_failed", offset=self._offset, error=str(exc))

    # -- receiving ---------------------------------------------------------------------------

    async def _run(self) -> None:
        """Identify the bot, then poll (or set the webhook), reconnecting until stopped."""
        assert self._bot is not None
        bot = self._bot
        backoff = Backoff(self.backoff_base, self.backoff_cap)
        prepared = False  # getMe + deleteWebhook/setWebhook done
        while not self._stopping:
            try:
                if not prepared:
                    self._me = await bot.get_me()
                    if self.config.mode == "webhook":
                        await self._set_webhook(bot)
                        self._connected()
                        return  # updates now arrive on the route
                    await bot.delete_webhook(drop_pending_updates=False)
                    prepared = True
                    self._connected()
                await self._poll(bot, backoff)
            except TelegramUnauthorizedError as exc:
                self._fail(
                    f"Telegram refused the token in {self.config.token_env} "
                    f"(error_code 401: {exc.message}); get a new one from @BotFather"
                )
                return
            except TelegramRetryAfter as exc:
                self._health.set("reconnecting", describe(exc))
                log.warning(
                    "telegram.flood_wait", method=method_name(exc), retry_after=exc.retry_after
                )
                await asyncio.sleep(exc.retry_after)
            except TelegramBadRequest as exc:
                if self.config.mode == "webhook" and not prepared:
                    self._fail(f"setWebhook was refused ({describe(exc)}); check webhook_url")
                    return
                await self._pause(backoff, exc)
            except TelegramConflictError as exc:
                prepared = False  # a webhook may have been set meanwhile: delete it again
                await self._pause(backoff, exc, hint="is another process polling with this token?")
            except (TelegramAPIError, ClientDecodeError) as exc:
                await self._pause(backoff, exc)
            except Exception as exc:  # never let the reconnect loop die
                log.exception("telegram.poll_crashed", error=repr(exc))
                await self._pause(backoff, exc)

    def _connected(self) -> None:
        if self._health.connected(self.name):
            log.info(
                "telegram.connected",
                username=self._me.username if self._me else None,
                mode=self.config.mode,
            )

    async def _pause(self, backoff: Backoff, exc: BaseException, hint: str = "") -> None:
        why = describe(exc) + (f" ({hint})" if hint else "")
        self._health.set("reconnecting", why)
        delay = backoff.next()
        log.warning(
            "telegram.reconnecting",
            error_code=error_code(exc),
            error=why,
            retry_in=round(delay, 2),
        )
        await asyncio.sleep(delay)

    async def _set_webhook(self, bot: Bot) -> None:
        await bot.set_webhook(
            url=self.config.webhook_url,
            secret_token=self.secret,
            allowed_updates=ALLOWED_UPDATES,
        )

    async def _poll(self, bot: Bot, backoff: Backoff) -> None:
        """Long-poll ``getUpdates`` until an error (raised to ``_run``) or a stop."""
        while not self._stopping:
            await self._inbound.room()  # too many messages waiting: let Telegram keep the rest
            # after an error, a short poll first: "connected" as soon as Telegram answers
            timeout = self.poll_timeout if self._health.state == "connected" else 0
            updates = await bot.get_updates(
                offset=self._offset,
                timeout=timeout,
                allowed_updates=ALLOWED_UPDATES,
                request_timeout=timeout + REQUEST_SLACK,
            )
            self._connected()
            backoff.reset()
            for update in updates:
                self._offset = update.update_id + 1
                self._dispatch(update)

    async def _webhook(self, request: web.Request) -> web.Response:
        """Telegram's POST of one update: check the secret, answer at once, run in background."""
        if self._stopping or self._handle is None or self._bot is None or self._me is None:
            return web.json_response({"error": "the Telegram adapter is not ready"}, status=503)
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token")
        if given is None:
            log.warning("telegram.webhook_refused", status=401, peer=request.remote)
            return web.json_response({"error": "missing secret token"}, status=401)
        if not hmac.compare_digest(given.encode(errors="surrogateescape"), self.secret.encode()):
            log.warning("telegram.webhook_refused", status=403, peer=request.remote)
            return web.json_response({"error": "wrong secret token"}, status=403)
        if self._inbound.full:
            log.warning("telegram.overloaded", waiting=self._inbound.waiting)
            return web.json_response({"error": "busy, deliver again later"}, status=503)
        try:
            data = await request.json()
            update = Update.model_validate(data, context={"bot": self._bot})
        except (ValueError, ValidationError) as exc:
            log.warning("telegram.bad_update", error=preview(str(exc)))
            return web.json_response({"error": "not a Telegram update"}, status=400)
        self._dispatch(update)
        return web.json_response({"ok": True})

    def _dispatch(self, update: Update) -> None:
        """Run one update as its own task (duplicates and non-messages are dropped)."""
        if update.update_id in self._seen:
            return
        self._seen[update.update_id] = None
        if len(self._seen) > MAX_SEEN_UPDATES:
            self._seen.popitem(last=False)
        self._health.event()
        try:
            found = read_update(update, self._me)
        except Exception as exc:
            log.exception("telegram.update_failed", update_id=update.update_id, error=repr(exc))
            return
        for incoming in found:
            self._inbound.put(incoming.message.chat, incoming)

    async def _chat_admins(self, chat: int) -> list[Any]:
        """getChatAdministrators (for ``admins_from``)."""
        if self._bot is None:
            return []
        return list(await self._bot.get_chat_administrators(chat))
