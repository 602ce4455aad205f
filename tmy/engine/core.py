"""The engine: Message in → Reply out. The one entry point every adapter calls.

It normalises and matches the message against the trigger index (or an open
session), builds the run's locals, runs the chain, assembles the reply
(``PRE_ANSWER + STEP_RESULT + POST_ANSWER``, or the rule's ``on_error`` text),
keeps ``STEP_SUMMARY`` and sessions in the store, and logs the whole run under
one ``trace_id``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from tmy import logs, metrics
from tmy.config import Settings
from tmy.engine.scheduler import Run, run_chain, run_steps
from tmy.engine.variables import Variables, conversation_key, escape_key_part
from tmy.errors import ConfigError, TmyError
from tmy.executors.registry import Registry
from tmy.http_client import new_http_client
from tmy.logs import PREVIEW, get_logger, preview
from tmy.message import Message, Reply, StepRecord, id_problem
from tmy.rulebook.model import OPEN_FILTERS, RUN_LOCALS, Rulebook
from tmy.rulebook.triggers import Match, strip_invisible
from tmy.store.base import MISSING, Store
from tmy.values.compiled import compile_template, to_text

log = get_logger("tmy")

LAST_RESORT_REPLY = "Sorry, something went wrong."


@dataclass
class Services:
    """What runs and executors can reach: settings, store, executors, shared clients."""

    settings: Settings
    store: Store
    registry: Registry
    step_hooks: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    engine: Any = None  # the Engine, set once built (tool calls run other rules through it)
    _http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared client (:mod:`tmy.http_client`), created on first use."""
        if self._http is None:
            self._http = new_http_client()
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


_TRACE_PREFIX = os.urandom(4).hex()
_trace_counter = itertools.count(1)
_TRACE_SET = logs.TRACE.set
_TRACE_RESET = logs.TRACE.reset


def _plain_value(x: Any) -> bool:
    """Short enough and JSON-native: logged as it is, without a preview."""
    t = type(x)
    if t is str:
        return len(x) <= PREVIEW
    if t is int:
        return -(2**63) <= x < 2**63
    return x is None or t is float or t is bool


def _step_fields(r: StepRecord) -> dict[str, Any]:
    """One step of a run.done line: values as they are when short and JSON-native."""
    x, y = r.input, r.result
    return {
        "uri": r.uri,
        "plugin": r.plugin,
        "input": x if _plain_value(x) else preview(x),
        "result": y if _plain_value(y) else preview(y),
        "error": r.error or None,
        "ms": r.ms,
        "skipped": r.skipped,
    }


def _trace_id() -> str:
    """Unique across processes (random prefix) and cheap (a counter): 16 hex digits."""
    return _TRACE_PREFIX + "%08x" % (next(_trace_counter) & 0xFFFFFFFF)


def _valid_unicode(text: str) -> str:
    """Lone surrogates (valid in JSON's \\ud800, not in UTF-8) become U+FFFD.

    Otherwise they reach logs, stores and replies that must encode to UTF-8.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class Admins:
    """Who is an admin: ``platform:user`` entries and bare user ids, matched apart.

    ``platform:user`` matches that user on that platform only: the platform and
    the user id of the message are compared separately, so ``user:
    "telegram:42"`` sent on ``http`` is not ``telegram:42``. A bare id matches
    that user id on any platform, but never a user id that contains ``:``
    (otherwise a crafted id could read as a listed ``platform:user``).
    """

    __slots__ = ("bare", "pairs")

    def __init__(self, entries: frozenset[str] | set[str] | list[str]) -> None:
        self.pairs: set[tuple[str, str]] = set()
        self.bare: set[str] = set()
        for entry in entries:
            platform, sep, user = entry.partition(":")
            if sep and platform and user:
                self.pairs.add((platform, user))
            else:
                self.bare.add(entry)

    def __bool__(self) -> bool:
        return bool(self.pairs or self.bare)

    def admits(self, platform: str, user: str) -> bool:
        if (platform, user) in self.pairs:
            return True
        return ":" not in user and user in self.bare


def _timezone(name: str) -> tzinfo | None:
    if name in ("", "local"):
        return None
    try:
        return ZoneInfo(name)
    except Exception:
        raise ConfigError(
            f"unknown timezone {name!r} (use an IANA name like 'Asia/Shanghai')"
        ) from None


class Engine:
    """Dispatches messages to rules. Safe to call concurrently from many adapters."""

    def __init__(self, rulebook: Rulebook, services: Services) -> None:
        self.rulebook = rulebook
        self.services = services
        self.settings = services.settings
        self.tz = _timezone(self.settings.timezone)
        self._error_reply = compile_template(self.settings.error_reply)
        unknown = self._error_reply.names - RUN_LOCALS
        if unknown:
            raise ConfigError(
                f"error_reply {self.settings.error_reply!r} refers to {sorted(unknown)[0]!r}; "
                "it may use only run locals such as {STEP_ERROR}, {USER_NAME} or {QUESTION}"
            )
        self.admins = Admins(self.settings.admins)
        self._inflight = 0
        self._idle: asyncio.Event | None = None  # set when the last run in flight ends
        services.engine = self
        self._now_cache: tuple[int, str] = (0, "")
        self.commands: Any = None  # tmy.admin.AdminCommands: "<prefix> …" for admins
        self.switch: Any = None  # tmy.admin.ChatSwitch: chats where the bot is off
        self.fixed_now: str | None = None  # pins NOW (YAML rule tests' ``now:``)
        self.dry_run = False  # explain's engine: nothing is stored or sent; logged as such
        self._meters: dict[str, Any] = {}  # per platform: received/matched/unmatched counters

    def _now(self) -> str:
        """NOW for this second (formatting a datetime per message is measurable)."""
        if self.fixed_now is not None:
            return self.fixed_now
        sec = int(time.time())
        if sec != self._now_cache[0]:
            now = datetime.fromtimestamp(sec, self.tz).astimezone(self.tz)
            self._now_cache = (sec, now.isoformat(timespec="seconds"))
        return self._now_cache[1]

    def replace_rulebook(self, rulebook: Rulebook) -> None:
        """Swap rules atomically: runs in flight finish on the rules they started with."""
        self.rulebook = rulebook

    @property
    def inflight(self) -> int:
        return self._inflight

    async def drain(self, timeout: float) -> bool:
        """Wait until no run is in flight; False when ``timeout`` passed first."""
        if self._inflight == 0:
            return True
        if self._idle is None:  # made only when someone waits: the hot path never pays
            self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def _settled(self) -> None:
        """No run is in flight any more: wake :meth:`drain`."""
        idle = self._idle
        if idle is not None:
            self._idle = None
            idle.set()

    async def handle(self, message: Message) -> Reply:
        """Answer one message. Never raises for bad input or a failing step."""
        trace_id = _trace_id()
        self._inflight += 1
        token = _TRACE_SET(trace_id)
        try:
            if logs.DEBUG_ENABLED:
                return await self._handle_debug(message, trace_id)
            return await self._handle(message, trace_id)
        except Exception as exc:  # an engine bug: answer, log it, keep serving
            return self._crashed(trace_id, exc)
        finally:
            _TRACE_RESET(token)
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._settled()

    async def _handle_debug(self, message: Message, trace_id: str) -> Reply:
        """:meth:`_handle` plus the per-event ``reply.sent`` line of ``debug`` logging."""
        started = time.perf_counter()
        try:
            reply = await self._handle(message, trace_id)
        except Exception as exc:
            reply = self._crashed(trace_id, exc)
        logs.emit(
            "debug",
            "reply.sent",
            rule=reply.rule,
            answer=preview(reply.text),
            error=reply.error,
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return reply

    def _crashed(self, trace_id: str, exc: Exception) -> Reply:
        """An engine bug while answering: log it with its traceback, answer anyway."""
        log.exception("message.crashed")
        return Reply(LAST_RESORT_REPLY, None, trace_id, error=f"internal error: {exc!r}")

    async def _handle(self, message: Message, trace_id: str) -> Reply:
        text = message.text if isinstance(message.text, str) else to_text(message.text)
        if not text.isascii():
            text = message.text = _valid_unicode(text)
        limit = self.settings.max_message_chars
        if len(text) > limit:
            error = f"message too long: {len(text)} characters (the limit is {limit})"
            self._log_received("warning", message, text)
            log.warning("message.refused", reason=error)
            return Reply("", None, trace_id, error=error)
        id_limit = self.settings.max_id_chars
        user, chat, platform = message.user, message.chat, message.platform
        if not (  # the usual ids: short ASCII text (checked in full below otherwise)
            type(user) is str
            and type(chat) is str
            and type(platform) is str
            and len(user) + len(chat) + len(platform) <= id_limit
            and (user + chat + platform).isascii()
        ):
            for name in ("user", "chat", "platform"):
                problem = id_problem(name, getattr(message, name), id_limit)
                if problem is not None:
                    log.warning("message.refused", reason=problem)
                    return Reply("", None, trace_id, error=f"bad message: {problem}")
        if not message.is_admin and self.admins:
            message.is_admin = self.admins.admits(message.platform, message.user)
        commands = self.commands
        if commands is not None and text.startswith(commands.prefix) and commands.is_command(text):
            self._log_received("info", message, text)
            metrics.message(message.platform, False)
            answer = await commands.run(message, text)  # never reaches the rules
            return Reply(answer or "", None, trace_id)
        rulebook = self.rulebook
        match = rulebook.index.match(
            text, lambda rule: rule.filters is OPEN_FILTERS or rule.filters.admits(message)
        )
        if match is None and rulebook.has_sessions:
            match = await self._session_match(rulebook, message, text)
        meters = self._meters.get(message.platform)  # metrics.message, without two calls
        if meters is None:
            if len(self._meters) >= 1000:  # platform names come from callers: stay bounded
                self._meters.clear()
            meters = self._meters[message.platform] = metrics.message_meters(message.platform)
        meters[0].value += 1
        meters[1 if match is not None else 2].value += 1
        if match is None:
            return self._unmatched(rulebook, message, text, trace_id)
        switch = self.switch
        if switch is not None:
            cached = switch._cache.get((message.platform, message.chat))  # ChatSwitch.cached
            if cached is not None and cached[1] > time.monotonic():
                off = cached[0]
            else:
                off = await switch.is_off(message)
            if off:
                reason = "the bot is switched off in this chat (an admin can say '.tmy on')"
                if self.commands is not None:
                    reason = reason.replace(".tmy", self.commands.prefix)
                return self._no_run(message, text, trace_id, reason, rule=match.rule.id)
        cooldown = match.rule.cooldown
        if cooldown is not None:
            left = await self.cooldown_claim(match.rule, message)
            if left > 0:
                return await self._cooled(match, message, text, trace_id, left)
        if logs.DEBUG_ENABLED:
            self._log_received("debug", message, text)
            logs.emit(
                "debug",
                "rule.matched",
                rule=match.rule.id,
                trigger=match.trigger.source if match.trigger else "<session>",
                MAGIC=match.magic,
                QUESTION=preview(match.question),
            )
        started = time.perf_counter()  # run_rule, inlined: one coroutine less per message
        reply = await self._run(match, message, trace_id, text, True, None)
        if logs.INFO_ENABLED:
            self._log_run(match, message, text, reply, time.perf_counter() - started)
        metrics.run(reply.rule, reply.error is None)
        return reply

    def _unmatched(self, rulebook: Rulebook, message: Message, text: str, trace_id: str) -> Reply:
        """No rule for this message: one cheap info line, so its trace id leads somewhere.

        The reason is found only now (a second lookup without filters), so the
        matched path pays nothing for it.
        """
        reason = "no trigger matched"
        # without any filtered rule, a second look (filters ignored) cannot find one
        refused = rulebook.index.match(text) if rulebook.has_filters else None
        if refused is not None:
            why = refused.rule.filters.refusal(message)
            reason = f"rule {refused.rule.id!r} matched but {why or 'its filters refused it'}"
        return self._no_run(message, text, trace_id, reason)

    def _no_run(
        self, message: Message, text: str, trace_id: str, reason: str, rule: str | None = None
    ) -> Reply:
        if logs.INFO_ENABLED:
            event = {
                "text": text if len(text) <= PREVIEW else preview(text),
                "user": message.user,
                "chat": message.chat,
                "platform": message.platform,
                "rule": rule,
                "reason": reason,
                "event": "message.unmatched",
            }
            logs.emit_event("info", event, logs.TRACE.get())
        return Reply("", None, trace_id, None, [], False, reason)

    def _cooldown_key(self, rule: Any, message: Message) -> str:
        per = rule.cooldown.per
        if per == "global":
            return f"cooldown/{rule.id}"
        where = escape_key_part(message.platform)
        if per == "chat":
            return f"cooldown/{rule.id}/chat/{where}/{escape_key_part(message.chat)}"
        return f"cooldown/{rule.id}/user/{where}/{escape_key_part(message.user)}"

    async def cooldown_claim(self, rule: Any, message: Message) -> float:
        """Start the rule's cooldown window for this message, or the seconds still left.

        One atomic store update (kept in the store, so the window holds across
        daemons): 0 means the window was free and is now started.
        """
        seconds = rule.cooldown.seconds
        now = self._epoch()

        def claim(current: Any) -> tuple[Any, float]:
            if isinstance(current, (int, float)) and current > now:
                return current, current - now
            return now + seconds, 0.0

        return await self.services.store.update(
            self._cooldown_key(rule, message), claim, ttl=seconds + 1
        )

    async def cooldown_left(self, rule: Any, message: Message) -> float:
        """Seconds left in the rule's cooldown for this message (0 when free); reads only."""
        if rule.cooldown is None:
            return 0.0
        until = await self.services.store.get(self._cooldown_key(rule, message))
        return max(0.0, until - self._epoch()) if isinstance(until, (int, float)) else 0.0

    def _epoch(self) -> float:
        """Now, in seconds: the pinned NOW of a rule test when there is one (cooldowns)."""
        if self.fixed_now is not None:
            try:
                return datetime.fromisoformat(self.fixed_now).timestamp()
            except ValueError:
                pass
        return time.time()

    async def cooldown_reply(self, match: Match, message: Message, text: str, left: float) -> Reply:
        """What a rule in its cooldown window answers (for ``explain``); logs nothing."""
        return await self._cooled(match, message, text, "", left, log_it=False)

    async def _cooled(
        self,
        match: Match,
        message: Message,
        text: str,
        trace_id: str,
        left: float,
        *,
        log_it: bool = True,
    ) -> Reply:
        rule = match.rule
        reason = f"rule {rule.id!r} is cooling down ({left:.0f} s left)"
        template = rule.cooldown.reply
        if template is None:
            if log_it:
                self._log_cooldown(message, text, rule.id, left, "")
            return Reply("", rule.id, trace_id, reason=reason)
        loc = self.locals_for(match, message, text)
        loc["COOLDOWN_LEFT"] = max(1, round(left))
        variables = Variables(loc, self.rulebook.variables, self.services.store, message)
        try:
            await variables.fetch(template.names)
            answer = to_text(template.evaluate(variables))
        except TmyError as exc:
            log.warning("cooldown.reply_failed", rule=rule.id, error=str(exc))
            return Reply("", rule.id, trace_id, error=f"cooldown reply: {exc}", reason=reason)
        if log_it:
            self._log_cooldown(message, text, rule.id, left, answer)
        return Reply(answer, rule.id, trace_id, reason=reason)

    def _log_cooldown(
        self, message: Message, text: str, rule: str, left: float, answer: str
    ) -> None:
        if logs.INFO_ENABLED:
            logs.emit(
                "info",
                "run.cooldown",
                rule=rule,
                left=round(left, 1),
                answer=preview(answer),
                text=preview(text),
                user=message.user,
                chat=message.chat,
                platform=message.platform,
            )

    def _log_received(self, level: str, message: Message, text: str) -> None:
        logs.emit(
            level,
            "message.received",
            text=preview(text),
            user=message.user,
            chat=message.chat,
            platform=message.platform,
        )

    async def _session_match(self, rulebook: Rulebook, message: Message, text: str) -> Match | None:
        try:
            rule_id = await self.services.store.get(conversation_key("session", message))
        except TmyError as exc:
            log.warning("session.lookup_failed", error=str(exc))
            return None
        rule = rulebook.by_id.get(rule_id) if isinstance(rule_id, str) else None
        if rule is None or not rule.filters.admits(message):
            return None
        return Match(rule, None, "", strip_invisible(text).strip())  # as sent, not NFKC

    def locals_for(self, match: Match, message: Message, text: str) -> dict[str, Any]:
        """The locals every run starts with (seed 004 + who/where)."""
        loc = {
            "MAGIC": match.magic,
            "QUESTION": match.question,
            "TEXT": text,
            "STEP_URI": "",
            "STEP_ERROR": "",
            "STEP_RESULT": match.question,
            "PRE_ANSWER": "",
            "POST_ANSWER": "",
            "STEP_SUMMARY": "",
            "USER": message.user,
            "USER_NAME": message.user_name,
            "CHAT": message.chat,
            "PLATFORM": message.platform,
            "NOW": self._now(),
        }
        if match.groups:  # a regex trigger's named groups; the built-ins win over them
            loc = {**match.groups, **loc}
        return loc

    async def run_scheduled(
        self, rule: Any, message: Message, question: str, extra: dict[str, Any]
    ) -> Reply:
        """Run ``rule`` without a trigger (a cron firing): traced, logged and drained
        like a message; ``extra`` adds run locals (``FIRE_TIME``). Never raises."""
        trace_id = _trace_id()
        self._inflight += 1
        token = logs.bind_trace(trace_id)
        try:
            log.info(
                "cron.fired", rule=rule.id, platform=message.platform, chat=message.chat, **extra
            )
            match = Match(rule, None, "", question)
            reply = await self.run_rule(match, message, trace_id, question, extra=extra)
            metrics.run(rule.id, reply.error is None)
            return reply
        except Exception as exc:  # an engine bug: log it, keep the scheduler alive
            log.exception("cron.crashed", rule=rule.id)
            return Reply(LAST_RESORT_REPLY, rule.id, trace_id, error=f"internal error: {exc!r}")
        finally:
            logs.TRACE.reset(token)
            self._inflight -= 1
            if self._inflight == 0:
                self._settled()

    async def run_rule(
        self,
        match: Match,
        message: Message,
        trace_id: str,
        text: str,
        *,
        finish: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> Reply:
        """Run ``match.rule`` for ``message`` and build the reply.

        ``finish=False`` (a rule run as an LLM tool) leaves the conversation's
        STEP_SUMMARY and session alone: they belong to the rule the user reached.
        ``extra`` adds run locals (a cron run's ``FIRE_TIME``).
        """
        started = time.perf_counter()
        reply = await self._run(match, message, trace_id, text, finish, extra)
        if logs.INFO_ENABLED:
            self._log_run(match, message, text, reply, time.perf_counter() - started, finish)
        return reply

    def _log_run(
        self,
        match: Match,
        message: Message,
        text: str,
        reply: Reply,
        seconds: float,
        finish: bool = True,
    ) -> None:
        """The run's one line at ``info``: enough for ``trace`` to rebuild it.

        One line per run instead of one per event (received, matched, each
        step's start and end, reply) is most of what a matched message costs;
        per-event lines remain at ``debug``, and a step still running after
        ``log.slow_step`` seconds logs ``step.running`` (a hung step stays visible).
        """
        q = match.question
        answer = reply.text
        event = {
            "rule": match.rule.id,
            "trigger": match.trigger.source if match.trigger else "<session>",
            "text": text if len(text) <= PREVIEW else preview(text),
            "question": q if type(q) is str and len(q) <= PREVIEW else preview(q),
            "user": message.user,
            "chat": message.chat,
            "platform": message.platform,
            "answer": answer if len(answer) <= PREVIEW else preview(answer),
            "error": reply.error,
            "ms": int(seconds * 1e6 + 0.5) / 1000,  # to the µs, cheaper than round()
            "steps": [_step_fields(r) for r in reply.steps],
            "event": "run.done",
        }
        if reply.stopped:
            event["stopped"] = True
        if not finish:
            event["nested"] = True
        if self.dry_run:
            event["dry_run"] = True
        logs.emit_event("info", event, logs.TRACE.get())

    async def _run(
        self,
        match: Match,
        message: Message,
        trace_id: str,
        text: str,
        finish: bool,
        extra: dict[str, Any] | None,
    ) -> Reply:
        rule = match.rule
        services = self.services
        rulebook = self.rulebook
        start_locals = self.locals_for(match, message, text)
        if extra:
            start_locals.update(extra)
        variables = Variables(
            start_locals,
            rulebook.variables,
            services.store,
            message,
            rulebook.locked_variables,
        )
        run = Run(rule, message, trace_id, variables, services)
        if rule.prefetch:  # every declared variable the chain reads: one round-trip
            try:
                await variables.fetch(rule.prefetch)
            except TmyError:
                pass  # the step that needs it reports the store's error where it happens
        if rule.atomic_vars:
            await run_chain(run)
        else:
            await run_steps(run, rule.steps)
        loc = variables.locals
        if run.failed:
            error = to_text(loc.get("STEP_ERROR")) or "error"
            log.warning("run.failed", rule=rule.id, uri=loc.get("STEP_URI"), error=error)
            text_out = await self._error_text(run)
            return Reply(text_out, rule.id, trace_id, error=error, steps=run.records)
        pre, result, post = loc.get("PRE_ANSWER"), loc.get("STEP_RESULT"), loc.get("POST_ANSWER")
        if pre == "" and post == "" and type(result) is str:  # the usual reply: the result
            answer = result
        else:
            answer = to_text(pre) + to_text(result) + to_text(post)
        limit = self.settings.max_reply_chars
        if len(answer) > limit:
            error = (
                f"the reply is {len(answer)} characters long (limits.max_reply_chars is {limit})"
            )
            loc["STEP_ERROR"] = error
            log.warning("run.failed", rule=rule.id, uri=loc.get("STEP_URI"), error=error)
            text_out = await self._error_text(run)
            return Reply(text_out, rule.id, trace_id, error=error, steps=run.records)
        if finish and (rule.session > 0 or loc.get("STEP_SUMMARY")):
            await self._after_run(run)
        return Reply(answer, rule.id, trace_id, None, run.records, run.stopped)

    async def _error_text(self, run: Run) -> str:
        """The on_error text (else error_reply, else the last resort), never longer than
        ``limits.max_reply_chars``: an ``on_error`` quoting ``{STEP_RESULT}`` must not
        send the very reply the limit refused."""
        limit = self.settings.max_reply_chars
        template = run.rule.on_error or self._error_reply
        try:
            await run.vars.fetch(template.names)
            text = to_text(template.evaluate(run.vars))
            if len(text) <= limit:
                return text
            log.warning(
                "on_error.failed",
                rule=run.rule.id,
                error=f"the error text is {len(text)} characters long "
                f"(limits.max_reply_chars is {limit})",
            )
        except TmyError as exc:
            log.warning("on_error.failed", rule=run.rule.id, error=str(exc))
        try:
            text = to_text(self._error_reply.evaluate(run.vars))
        except TmyError:  # a run local the failed run never set: the reply must still go out
            return LAST_RESORT_REPLY
        return text if len(text) <= limit else LAST_RESORT_REPLY

    async def _after_run(self, run: Run) -> None:
        """Keep STEP_SUMMARY and the rule's session for this conversation."""
        store = self.services.store
        summary = run.locals.get("STEP_SUMMARY")
        try:
            if summary:
                if (
                    isinstance(summary, list)
                    and len(summary) == 2
                    and all(isinstance(s, str) for s in summary)
                ):
                    await store.set(conversation_key("summary", run.message), summary)
                    log.info("summary.saved", ask=preview(summary[0]), answer=preview(summary[1]))
                else:
                    log.warning(
                        "summary.invalid",
                        value=preview(summary),
                        hint='STEP_SUMMARY must be ["<ask>", "<answer>"]',
                    )
            if run.rule.session > 0:
                await store.set(
                    conversation_key("session", run.message), run.rule.id, ttl=run.rule.session
                )
        except TmyError as exc:
            log.warning("after_run.failed", error=str(exc))

    async def summary_for(self, message: Message) -> list[str] | None:
        """The STEP_SUMMARY stored for this conversation, if any."""
        value = await self.services.store.get(conversation_key("summary", message))
        return None if value is MISSING else value
