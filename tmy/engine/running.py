"""A matched rule's run: its locals, its chain, its reply (a mixin of the engine).

:meth:`Running._run` is the general run: the run's locals (seed 004 + who/where),
its :class:`~tmy.engine.variables.Variables`, the chain
(:mod:`tmy.engine.scheduler`), the reply (:mod:`tmy.engine.replies`).

A rule whose every step is an ADJUST of a constant takes a shorter way
(:mod:`tmy.engine.plans`), chosen in :meth:`tmy.engine.core.Engine._handle`.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tmy import logs
from tmy.engine import replies
from tmy.engine.context import decision, quoted
from tmy.engine.keys import conversation_key
from tmy.engine.run import Run
from tmy.engine.scheduler import run_chain, run_steps
from tmy.engine.tracing import log_run
from tmy.engine.variables import Variables
from tmy.errors import EvalError, TmyError
from tmy.logs import get_logger
from tmy.message import Message, Reply
from tmy.rulebook.triggers import Match
from tmy.store.base import MISSING
from tmy.values.compiled import to_text

if TYPE_CHECKING:
    from tmy.config import Settings
    from tmy.engine.services import Services
    from tmy.rulebook.model import Rulebook

log = get_logger("tmy")

_perf_counter = time.perf_counter


class Running:
    """The engine's runs: :meth:`run_rule` (events, cron, tools) and :meth:`_run`."""

    rulebook: Rulebook
    services: Services
    settings: Settings
    tz: Any
    fixed_now: str | None
    dry_run: bool
    observer: Any
    _now_cache: tuple[int, str]
    _error_reply: Any

    def _now(self) -> str:
        """NOW for this second (formatting a datetime per message is measurable)."""
        if self.fixed_now is not None:
            return self.fixed_now
        sec = int(time.time())
        if sec != self._now_cache[0]:
            now = datetime.fromtimestamp(sec, self.tz).astimezone(self.tz)
            self._now_cache = (sec, now.isoformat(timespec="seconds"))
        return self._now_cache[1]

    def pin_now(self, now: str | None) -> None:
        """Pin NOW (and the cooldowns' clock) to the ISO time ``now``; None: the real clock.

        A YAML rule test's ``now:`` holds for its case only.
        """
        self.fixed_now = now

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

    async def run_rule(
        self,
        match: Match,
        message: Message,
        trace_id: str,
        text: str,
        *,
        finish: bool = True,
        extra: dict[str, Any] | None = None,
        scheduled: bool = False,
    ) -> Reply:
        """Run ``match.rule`` for ``message`` and build the reply.

        ``finish=False`` (a rule run as an LLM tool) leaves the conversation's
        STEP_SUMMARY and session alone: they belong to the rule the user reached.
        ``extra`` adds run locals (a cron run's ``FIRE_TIME``); ``scheduled``: a cron
        firing (its ``run.done`` says so: no message came in).
        """
        started = _perf_counter()
        reply = await self._run(match, message, trace_id, text, finish, extra)
        observer = self.observer
        if logs.INFO_ENABLED or observer is not None:
            seconds = _perf_counter() - started
            log_run(match, message, text, reply, seconds, finish, self.dry_run, observer, scheduled)
        return reply

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
        if message.reply_to and message.api is not None:  # REPLY_TO: fetched once matched
            start_locals["REPLY_TO"] = await quoted(message)
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
            return await self._failed(run, to_text(loc.get("STEP_ERROR")) or "error")
        pre, result, post = loc.get("PRE_ANSWER"), loc.get("STEP_RESULT"), loc.get("POST_ANSWER")
        outgoing = approve = None
        reason = ""
        try:
            if pre == "" and post == "" and type(result) is str:  # the usual reply: the result
                answer = result
            else:  # text around it, or a structured reply map (images, buttons …)
                answer, outgoing = replies.answer(pre, result, post)
            event = message.event
            if "APPROVE" in loc and event is not None and event.is_request:  # its decision
                approve, reason = decision(loc)
        except EvalError as exc:
            loc["STEP_ERROR"] = str(exc)
            return await self._failed(run, str(exc))
        if len(answer) > self.settings.max_reply_chars:
            error = loc["STEP_ERROR"] = replies.too_long(answer, self.settings.max_reply_chars)
            return await self._failed(run, error)
        if finish and (rule.session > 0 or loc.get("STEP_SUMMARY")):
            await replies.keep_conversation(run, services.store)
        reply = Reply(answer, rule.id, trace_id, None, run.records, run.stopped)
        if outgoing:
            reply.outgoing = outgoing
        if approve is not None:
            reply.approve, reply.approve_reason = approve, reason
        return reply

    async def _failed(self, run: Run, error: str) -> Reply:
        """A run that ended with ``error``: logged, answered with its error text."""
        rule = run.rule
        log.warning("run.failed", rule=rule.id, uri=run.locals.get("STEP_URI"), error=error)
        text = await replies.error_text(run, self._error_reply, self.settings.max_reply_chars)
        return Reply(text, rule.id, run.trace_id, error=error, steps=run.records)

    async def summary_for(self, message: Message) -> list[str] | None:
        """The STEP_SUMMARY stored for this conversation, if any."""
        value = await self.services.store.get(conversation_key("summary", message))
        return None if value is MISSING else value
