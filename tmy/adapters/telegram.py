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

Only ``message`` updates are asked for. Each one is queued for its chat and
runs as its own task (a long LLM run never stops the reader). Chats are
served fairly (:mod:`tmy.adapters.fairness`): at most :data:`MAX_RUNS` runs
are in the engine at once, at most :data:`MAX_RUNS_PER_CHAT` from one chat,
round-robin over the chats with messages waiting; at most
``max_pending_per_chat`` messages wait per chat (past that the chat's oldest
is dropped: ``telegram.chat_dropped``, the ``tmy_chat_dropped`` metric) and
:data:`MAX_PENDING` in all (polling then waits before fetching more; a webhook
answers 503 and Telegram delivers again later).

**What a message becomes** (decisions, documented in the README):

* messages from bots (``from.is_bot``) are ignored, so two bots cannot answer
  each other forever (this includes anonymous group admins, who post as
  ``@GroupAnonymousBot``);
* the text is ``text``, or the ``caption`` of a photo/video/document; a
  message with neither (a sticker, a service message) is ignored;
* ``/command@thisbot`` becomes ``/command``; a message that starts with a
  command for **another** bot (``/start@otherbot``) is ignored, as Telegram
  means it for that bot only;
* ``mentions_bot`` is set by an ``@thisbot`` mention (stripped from the text),
  a ``text_mention`` of the bot (stripped too), a reply to one of the bot's
  messages, or a message that starts with a command (bare ``/cmd`` or
  ``/cmd@thisbot``: Telegram treats commands as addressed to bots);
* ``CHAT`` is the chat id (negative for groups), ``USER`` the sender's user id,
  ``USER_NAME`` their full name.

**Sending.** Replies go to the same chat (and forum topic) as a reply to the
triggering message, split into pieces of at most :data:`MAX_TEXT` UTF-16
units (Telegram's own count), on a line break when there is one in the
second half of the piece, else on a space. Sent as plain text (no parse mode),
so nothing a user typed can turn into markup. A 429 waits Telegram's
``retry_after`` and tries again (at most :data:`MAX_SEND_RETRIES` times and
never for longer than :data:`MAX_FLOOD_WAIT` per wait) — only that chat waits:
replies queue per chat (at most ``max_pending_per_chat``, the oldest dropped
past it), a chat waiting out its flood wait holds no send slot, and the
:data:`MAX_SENDS` sends in flight go round-robin over the chats; a group upgraded to a
supergroup is followed to its new id; network errors and 5xx are retried with
backoff; anything else is logged with Telegram's ``error_code`` and
``description`` and raised as :class:`~tmy.errors.AdapterError`.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import re
import secrets
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramEntityTooLarge,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import Message as TgMessage
from aiogram.types import MessageEntity, ReplyParameters, Update, User
from aiogram.utils.token import TokenValidationError
from aiohttp import web
from pydantic import ValidationError

from tmy import metrics, redact
from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.fairness import ChatQueues, PendingSend
from tmy.config import Settings
from tmy.errors import AdapterError, ConfigError
from tmy.logs import get_logger, preview
from tmy.message import Message, Target

log = get_logger("tmy.adapter.telegram")

MAX_TEXT = 4096  # Telegram's limit for one message, in UTF-16 code units
POLL_TIMEOUT = 25  # seconds one getUpdates long poll waits on Telegram's side
REQUEST_SLACK = 15  # seconds added to POLL_TIMEOUT before the HTTP request itself times out
MAX_SEND_RETRIES = 3  # retries of one sendMessage after 429 / migration / network / 5xx
MAX_FLOOD_WAIT = 120  # a 429 asking for a longer wait fails the send instead of blocking it
MAX_RUNS = 64  # messages of this adapter in the engine at once
MAX_RUNS_PER_CHAT = 16  # of those, from one chat (the rest stay free for the other chats)
MAX_PENDING = 1000  # messages waiting in all chats; polling pauses, the webhook says 503
MAX_SENDS = 32  # sendMessage requests in flight at once (all chats)
MAX_SEEN_UPDATES = 2048  # update ids remembered, so a webhook delivered twice runs once
ALLOWED_UPDATES = ["message"]  # what tmy asks Telegram for (edits, channel posts: not served)

_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram accepts as secret_token
_CHAT_RE = re.compile(r"-?\d{1,20}|@[A-Za-z0-9_]{4,64}")  # a chat id, or @channelusername
# HTTP status of each aiogram error class (Telegram's error_code is the HTTP status)
_ERROR_CODES: tuple[tuple[type[TelegramAPIError], int], ...] = (
    (TelegramRetryAfter, 429),
    (TelegramBadRequest, 400),
    (TelegramUnauthorizedError, 401),
    (TelegramForbiddenError, 403),
    (TelegramNotFound, 404),
    (TelegramConflictError, 409),
    (TelegramEntityTooLarge, 413),
    (TelegramServerError, 500),
)


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    """``adapters.telegram`` with its defaults (see config/tmy.yaml for each key)."""

    token_env: str = "TELEGRAM_TOKEN"
    api_base: str = "https://api.telegram.org"
    mode: str = "polling"
    webhook_url: str = ""
    webhook_path: str = "/telegram/webhook"
    webhook_secret: str = ""
    max_pending_per_chat: int = 20

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> TelegramConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in section.items() if k in known and v is not None})
        if config.mode not in ("polling", "webhook"):
            raise ConfigError(
                f"adapters.telegram.mode must be polling or webhook (got {config.mode!r})"
            )
        if not _is_http_url(config.api_base):
            raise ConfigError(
                f"adapters.telegram.api_base must be an http(s) URL (got {config.api_base!r})"
            )
        if not config.token_env:
            raise ConfigError("adapters.telegram.token_env must name an environment variable")
        if config.mode == "webhook":
            if not _is_http_url(config.webhook_url):
                raise ConfigError(
                    "adapters.telegram.webhook_url must be the public https:// URL Telegram "
                    f"posts updates to (got {config.webhook_url!r})"
                )
            if not config.webhook_path.startswith("/"):
                raise ConfigError(
                    f"adapters.telegram.webhook_path must start with '/' "
                    f"(got {config.webhook_path!r})"
                )
        cap = config.max_pending_per_chat
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_PENDING:
            raise ConfigError(
                f"adapters.telegram.max_pending_per_chat must be a whole number from 1 to "
                f"{MAX_PENDING} (got {cap!r})"
            )
        if config.webhook_secret and not _SECRET_RE.fullmatch(config.webhook_secret):
            raise ConfigError(
                "adapters.telegram.webhook_secret may use only A-Z, a-z, 0-9, _ and - "
                "(1 to 256 characters), as Telegram requires"
            )
        return config


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def from_settings(
    settings: Settings, env: Mapping[str, str] | None = None
) -> TelegramAdapter | None:
    """The adapter ``adapters.telegram`` describes, or None when it is not enabled.

    The token is read from the environment variable ``token_env`` names. A
    missing token is not a config error: the adapter starts in state
    ``failed`` saying so, and the rest of the daemon serves on.
    """
    section = settings.adapters.get("telegram") or {}
    if not section.get("enabled"):
        return None
    config = TelegramConfig.from_section(section)
    env = os.environ if env is None else env
    token = (env.get(config.token_env) or "").strip()
    return TelegramAdapter(config, token=token, shutdown_grace=settings.shutdown_grace)


class TelegramAdapter:
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
    ) -> None:
        self.config = config or TelegramConfig()
        self.token = token
        self.shutdown_grace = shutdown_grace  # how long stop() lets replies in flight go out
        self.secret = self.config.webhook_secret
        redact.add(token)
        redact.add(self.secret)
        self._handle: Handler | None = None
        self._bot: Bot | None = None
        self._me: User | None = None
        self._health = AdapterHealth()
        self._connected_before = False  # metrics: a later "connected" is a reconnect
        self._runner: asyncio.Task[None] | None = None
        cap = self.config.max_pending_per_chat
        # keyed by chat id: messages waiting to run, replies waiting for their chat's turn
        self._inbound: ChatQueues[tuple[Message, TgMessage]] = ChatQueues(
            self.name, "message", self._answer, per_chat=cap, total=MAX_PENDING,
            in_flight=MAX_RUNS, per_chat_in_flight=MAX_RUNS_PER_CHAT,
        )  # fmt: skip
        self._outbound: ChatQueues[_Outgoing] = ChatQueues(
            self.name, "reply", self._send_step, per_chat=cap, total=MAX_PENDING,
            in_flight=MAX_SENDS, on_drop=_Outgoing.dropped, on_fail=_Outgoing.failed,
        )  # fmt: skip
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
        self._inbound.accepting = self._outbound.accepting = True  # again after a stop()
        self._health.set("starting")
        if not self.token:
            self._fail(
                f"no bot token: set the environment variable {self.config.token_env} "
                "to the token @BotFather gave you"
            )
            return
        try:
            session = AiohttpSession(api=TelegramAPIServer.from_base(self.config.api_base))
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
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None
        self._inbound.accepting = False
        deadline = asyncio.get_running_loop().time() + self.shutdown_grace
        await self._inbound.join(self.shutdown_grace)  # runs end; their replies are queued
        await self._outbound.join(deadline - asyncio.get_running_loop().time())
        await self._inbound.close()
        await self._outbound.close()
        if self._bot is not None:
            await self._confirm_offset()
            await self._bot.session.close()
            self._bot = None
        if self._health.state != "failed":
            self._health.set("stopped")

    def health(self) -> dict[str, Any]:
        report = self._health.as_dict()
        report["mode"] = self.config.mode
        report["username"] = self._me.username if self._me is not None else None
        report["bot_id"] = str(self._me.id) if self._me is not None else None
        report["waiting"] = {"messages": self._inbound.waiting, "replies": self._outbound.waiting}
        return report

    def _fail(self, why: str) -> None:
        why = redact.redact(why)
        self._health.set("failed", why)
        log.error("telegram.failed", error=why)

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
                self._health.set("reconnecting", _describe(exc))
                log.warning("telegram.flood_wait", method=_method(exc), retry_after=exc.retry_after)
                await asyncio.sleep(exc.retry_after)
            except TelegramBadRequest as exc:
                if self.config.mode == "webhook" and not prepared:
                    self._fail(f"setWebhook was refused ({_describe(exc)}); check webhook_url")
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
        if self._health.state != "connected":
            self._health.set("connected")
            metrics.adapter_connected(self.name, reconnect=self._connected_before)
            self._connected_before = True
            log.info(
                "telegram.connected",
                username=self._me.username if self._me else None,
                mode=self.config.mode,
            )

    async def _pause(self, backoff: Backoff, exc: BaseException, hint: str = "") -> None:
        why = _describe(exc) + (f" ({hint})" if hint else "")
        self._health.set("reconnecting", why)
        delay = backoff.next()
        log.warning(
            "telegram.reconnecting",
            error_code=_error_code(exc),
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
        if self._inbound.waiting >= MAX_PENDING:
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
            message = self._to_message(update)
        except Exception as exc:
            log.exception("telegram.update_failed", update_id=update.update_id, error=repr(exc))
            return
        if message is None or update.message is None:
            return
        self._inbound.put(message.chat, (message, update.message))

    async def _answer(self, chat: Hashable, incoming: tuple[Message, TgMessage]) -> None:
        """Run the rules on one message and queue the reply (a ChatQueues work); never raises."""
        message, original = incoming
        assert self._handle is not None
        try:
            reply = await self._handle(message)
            if not reply.text.strip():
                return None
            thread = original.message_thread_id if original.is_topic_message else None
            self._queue(original.chat.id, reply.text, reply_to=original.message_id,
                        thread=thread)  # fmt: skip
        except Exception as exc:
            log.exception("telegram.message_failed", message_id=message.message_id, error=repr(exc))
        return None

    def _to_message(self, update: Update) -> Message | None:
        """The tmy Message for one update, or None when it is not for the rules."""
        m = update.message
        me = self._me
        if m is None or me is None:
            return None
        sender = m.from_user
        if sender is None or sender.is_bot:
            return None
        if m.text is not None:
            text, entities = m.text, m.entities
        elif m.caption is not None:
            text, entities = m.caption, m.caption_entities
        else:
            return None  # a sticker, a photo without caption, a service message
        text, mentioned = read_addressing(text, entities or [], me.id, me.username or "")
        if text is None:
            return None  # a command for another bot
        reply_to = None
        quoted = m.reply_to_message
        # in a forum topic every message "replies" to the topic's first message: not a quote
        if quoted is not None and not (m.is_topic_message and quoted.forum_topic_created):
            reply_to = str(quoted.message_id)
            if quoted.from_user is not None and quoted.from_user.id == me.id:
                mentioned = True
        return Message(
            text,
            user=str(sender.id),
            chat=str(m.chat.id),
            platform=self.name,
            user_name=sender.full_name or sender.username or str(sender.id),
            private=m.chat.type == "private",
            raw=update.model_dump(mode="json", exclude_none=True, by_alias=True),
            mentions_bot=mentioned,
            reply_to=reply_to,
            self_id=str(me.id),
            message_id=str(m.message_id),
        )

    # -- sending -----------------------------------------------------------------------------

    async def send(self, target: Target, text: str) -> None:
        """Post ``text`` to the chat id ``target.chat`` (or the private chat of ``target.user``)."""
        chat = (target.chat or target.user).strip()
        if not _CHAT_RE.fullmatch(chat):
            raise AdapterError(
                f"telegram: the target chat must be a chat id (a number, negative for groups) "
                f"or @channelname (got {chat!r})"
            )
        if not text.strip():
            raise AdapterError("telegram: refusing to send an empty message")
        if self._bot is None or self._me is None:
            raise AdapterError(f"telegram: not connected ({self._health.error or 'starting'})")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue(int(chat) if chat[0] != "@" else chat, text, done=done)
        await done

    def _queue(
        self,
        chat: int | str,
        text: str,
        *,
        reply_to: int | None = None,
        thread: int | None = None,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        """Queue ``text`` for ``chat`` in pieces; the first one quotes ``reply_to``."""
        out = _Outgoing(chat, split_text(text), reply_to, thread, done)
        out.backoff = Backoff(self.backoff_base, self.backoff_cap)
        if not out.pieces:
            out.finish(None)
            return
        self._outbound.put(str(chat), out)

    async def _send_step(self, key: Hashable, out: _Outgoing) -> float | None:
        """One ``sendMessage`` of ``out``'s next piece (a ChatQueues work).

        Returns the pause before calling again (the next piece, or a retry: a
        429's ``retry_after`` is waited out by this chat alone), None when done.
        """
        bot = self._bot
        if bot is None:
            out.finish(AdapterError("telegram: the adapter is stopped"))
            return None
        chat = out.chat
        reply = None
        if out.reply_to is not None and out.index == 0:
            reply = ReplyParameters(message_id=out.reply_to, allow_sending_without_reply=True)
        try:
            await bot.send_message(chat, out.pieces[out.index], message_thread_id=out.thread,
                                   reply_parameters=reply)  # fmt: skip
        except TelegramRetryAfter as exc:
            if out.retries >= MAX_SEND_RETRIES or exc.retry_after > MAX_FLOOD_WAIT:
                return self._give_up(out, exc)
            log.warning("telegram.flood_wait", chat=str(chat), retry_after=exc.retry_after)
            out.retries += 1
            return float(exc.retry_after)
        except TelegramMigrateToChat as exc:
            if out.retries >= MAX_SEND_RETRIES:
                return self._give_up(out, exc)
            log.info("telegram.chat_migrated", chat=str(chat), to=exc.migrate_to_chat_id)
            out.chat, out.reply_to, out.thread = exc.migrate_to_chat_id, None, None
            out.retries += 1
            return 0.0
        except (TelegramNetworkError, TelegramServerError) as exc:
            if out.retries >= MAX_SEND_RETRIES or isinstance(exc, TelegramEntityTooLarge):
                return self._give_up(out, exc)
            delay = out.backoff.next()
            log.warning("telegram.send_retry", chat=str(chat), error=_describe(exc),
                        error_code=_error_code(exc), retry_in=round(delay, 2))  # fmt: skip
            out.retries += 1
            return delay
        except (TelegramAPIError, ClientDecodeError) as exc:
            return self._give_up(out, exc)
        except asyncio.CancelledError:
            out.finish(AdapterError(f"telegram: stopped before the message to {chat} went out"))
            raise
        out.index += 1
        out.retries = 0
        out.backoff.reset()
        if out.index < len(out.pieces):
            return 0.0
        out.finish(None)
        return None

    def _give_up(self, out: _Outgoing, exc: Exception) -> None:
        out.finish(self._send_failed(out.chat, exc, out.retries))
        return None

    def _send_failed(self, chat: int | str, exc: Exception, retries: int) -> AdapterError:
        code = _error_code(exc)
        why = _describe(exc)
        log.warning("telegram.send_failed", chat=str(chat), error_code=code, description=why,
                    retries=retries)  # fmt: skip
        return AdapterError(f"telegram: sendMessage to {chat} failed (error_code {code}): {why}")


class _Outgoing(PendingSend):
    """One reply (or ``send``) waiting in its chat's queue, with its retry state."""

    __slots__ = ("backoff", "chat", "index", "pieces", "reply_to", "retries", "thread")
    platform = "telegram"

    def __init__(
        self,
        chat: int | str,
        pieces: list[str],
        reply_to: int | None,
        thread: int | None,
        done: asyncio.Future[None] | None,
    ) -> None:
        self.chat = chat  # followed to the supergroup's id after a migration
        self.pieces = pieces
        self.index = 0  # the next piece to send
        self.reply_to = reply_to  # quoted by the first piece
        self.thread = thread
        super().__init__(done)  # send() waits on it; None for replies
        self.retries = 0  # of the current piece
        self.backoff = Backoff()


# -- text ------------------------------------------------------------------------------------


def _utf16_len(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def _index(text: str, units: int) -> int:
    """The str index of UTF-16 offset ``units`` (Telegram counts entity offsets in UTF-16)."""
    if text.isascii():
        return min(units, len(text))
    seen = 0
    for i, ch in enumerate(text):
        if seen >= units:
            return i
        seen += _utf16_len(ch)
    return len(text)


def read_addressing(
    text: str, entities: Sequence[MessageEntity], bot_id: int, username: str
) -> tuple[str | None, bool]:
    """(text for the rules, addressed to the bot?) — text is None for another bot's command.

    Strips ``@username`` mentions and text mentions of the bot, turns
    ``/cmd@username`` into ``/cmd``; a leading command (bare or for this bot)
    counts as addressed to the bot.
    """
    name = username.lower()
    cuts: list[tuple[int, int, str]] = []
    addressed = False
    for entity in sorted(entities, key=lambda e: e.offset):
        start = _index(text, entity.offset)
        end = _index(text, entity.offset + entity.length)
        span = text[start:end]
        if entity.type == "mention" and name and span[1:].lower() == name:
            cuts.append((start, end, ""))
            addressed = True
        elif entity.type == "text_mention" and entity.user is not None:
            if entity.user.id == bot_id:
                cuts.append((start, end, ""))
                addressed = True
        elif entity.type == "bot_command":
            command, at, target = span.partition("@")
            if at and target.lower() != name:
                if not text[:start].strip():
                    return None, False  # the message is a command for another bot
                continue
            if at:
                cuts.append((start, end, command))
            if not text[:start].strip():
                addressed = True
    for start, end, replacement in reversed(cuts):
        text = _cut(text, start, end, replacement)
    return text.strip(), addressed


def _cut(text: str, start: int, end: int, replacement: str) -> str:
    """Replace ``text[start:end]``; a removed mention takes one side's spacing with it."""
    before, after = text[:start], text[end:]
    if replacement:
        return before + replacement + after
    if not before.strip():  # "@bot, hello" -> "hello"
        after = after.lstrip(" \t").lstrip(",:，：").lstrip()
    elif before[-1:].isspace():  # "hi @bot there" -> "hi there"
        after = after.lstrip(" \t")
    return before + after


def split_text(text: str, limit: int = MAX_TEXT) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-16 units, cut on line breaks when possible.

    A piece ends at the last line break in its second half, else at the last
    space there, else exactly at the limit. Blank pieces are dropped
    (Telegram refuses empty messages).
    """
    pieces: list[str] = []
    while text:
        fit = _fit(text, limit)
        if fit == len(text):
            piece, text = text, ""
        else:
            window = text[:fit]
            cut = window.rfind("\n")
            if cut < fit // 2:
                cut = window.rfind(" ")
            if cut < fit // 2:
                piece, text = window, text[fit:]
            else:
                piece, text = window[:cut], text[cut + 1 :]
        if piece.strip():
            pieces.append(piece)
    return pieces


def _fit(text: str, limit: int) -> int:
    """How many characters of ``text`` fit in ``limit`` UTF-16 units."""
    if len(text) <= limit // 2:
        return len(text)
    units = 0
    for i, ch in enumerate(text):
        units += _utf16_len(ch)
        if units > limit:
            return i
    return len(text)


# -- errors ----------------------------------------------------------------------------------


def _error_code(exc: BaseException) -> int | None:
    """Telegram's ``error_code`` for an aiogram error (it is the HTTP status)."""
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return None


def _method(exc: TelegramAPIError) -> str:
    return getattr(exc.method, "__api_method__", type(exc.method).__name__)


def _describe(exc: BaseException) -> str:
    """One line naming what failed, with Telegram's description; secrets removed."""
    if isinstance(exc, TelegramAPIError):
        first = exc.message.splitlines()[0] if exc.message else type(exc).__name__
        text = f"{_method(exc)}: {first}"
    elif isinstance(exc, ClientDecodeError):
        text = f"unreadable answer from the Bot API: {exc.message}"
    else:
        text = str(exc) or type(exc).__name__
    return redact.redact(text)
