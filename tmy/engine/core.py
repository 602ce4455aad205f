"""The engine: Message in → Reply out. The one entry point every adapter calls.

It passes the message through the gates (:mod:`tmy.engine.gates`: sizes and
ids, admins, ``.tmy`` commands, the chat switch), matches it against the
trigger index (or an open session), checks the rule's cooldown
(:mod:`tmy.engine.cooldowns`), builds the run's locals (the message's event,
attachments and quote are read only when a run names them:
:mod:`tmy.engine.context`), runs the chain (:mod:`tmy.engine.scheduler`),
assembles the reply — text, a structured reply's parts, a request's APPROVE —
(:mod:`tmy.engine.replies`), and logs the whole run under one ``trace_id``
(:mod:`tmy.engine.tracing`).

:meth:`Engine._planned` (a FAQ answer, no coroutine) and :meth:`Engine._handle` are
the per-message path, their fast tests inline on purpose (each call saved shows in
``bench/dispatch.py``). The rarer ways to a run — platform events, session bursts,
cron firings — are :class:`~tmy.engine.events.Dispatch`'s, the cooldowns
:class:`~tmy.engine.cooldowns.Cooldowns`': mixins of the one :class:`Engine`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from tmy import logs, metrics
from tmy.engine import cooldowns, replies
from tmy.engine.debounce import Debouncer
from tmy.engine.events import Dispatch
from tmy.engine.gates import (
    Admins,
    ChatCommandsGate,
    ChatSwitchGate,
    filtered_match,
    traced_match,
    valid_unicode,
)
from tmy.engine.inflight import InFlight
from tmy.engine.plans import ConstantPlan, constant_plan
from tmy.engine.refusals import Refusals
from tmy.engine.replies import LAST_RESORT_REPLY
from tmy.engine.running import Running
from tmy.engine.services import Services
from tmy.engine.tracing import (
    HEX2,
    TRACE_COUNTER,
    TRACE_HIGH,
    log_matched,
    log_received,
    log_run,
    roll_trace_high,
)
from tmy.executors.registry import Registry
from tmy.logs import preview
from tmy.message import Message, Reply
from tmy.rulebook.model import Rule, Rulebook
from tmy.rulebook.triggers import Match, match_of
from tmy.values.compiled import to_text

__all__ = ["LAST_RESORT_REPLY", "Admins", "Engine", "Services"]  # Admins, Services: tests, app


_TRACE_SET = logs.TRACE.set
_TRACE_RESET = logs.TRACE.reset
_perf_counter = time.perf_counter
PLANS_SPARE = 1_000  # plans kept beyond one a rule (a reload's runs ask of old rules)
_UNPLANNED: Any = object()  # Engine._plans: this rule's constant_plan not asked yet
_NO_HIT: Any = object()  # Engine._planned: past the gates, the index found no rule
_UNMADE: Any = object()  # Engine._planned: the index's entry hit, its Match not made yet


class Engine(InFlight, Dispatch, cooldowns.Cooldowns, Running, Refusals):
    """Dispatches messages to rules. Safe to call concurrently from many adapters."""

    def __init__(
        self,
        rulebook: Rulebook,
        services: Services,
        *,
        commands: ChatCommandsGate | None = None,
        switch: ChatSwitchGate | None = None,
        fixed_now: str | None = None,
        dry_run: bool = False,
    ) -> None:
        """``commands``: the ``.tmy`` front end (admin commands never reach the rules);
        ``switch``: the chats where the bot is off. Both optional (a rule test's engine).
        ``fixed_now``: NOW pinned (a second engine copies its first one's; see
        :meth:`pin_now`); ``dry_run``: explain's engine, whose runs store and send
        nothing and are logged as such."""
        self.rulebook = rulebook
        self.services = services
        self.settings = services.settings
        self.tz = self.settings.tz
        self._error_reply = replies.error_reply_template(self.settings)
        self.admins = Admins(self.settings.admins)
        self._admins = self.admins if self.admins else None  # read per message: no __bool__
        self.commands = commands
        self.switch = switch  # and _verdicts (the property's setter)
        InFlight.__init__(self)
        services.engine = self
        self._now_cache: tuple[int, str] = (0, "")
        self.fixed_now = fixed_now  # pins NOW (YAML rule tests' ``now:``); see pin_now
        self.dry_run = dry_run
        self._meters: dict[str, Any] = {}  # per platform: its matched and unmatched counters
        self._runs: dict[str, Any] = {}  # per rule id: its (ok, error) run counters
        # per rule: its steps when its run is only constants (running.constant_plan), or None
        self._plans: dict[Rule, ConstantPlan | None] = {}
        self.bursts = Debouncer()  # session follow-ups of debounced rules, being collected
        # gets each run.done / message.unmatched dict, logged or not (the console's feed)
        self.observer: Callable[[dict[str, Any]], None] | None = None

    @property
    def switch(self) -> ChatSwitchGate | None:
        """The chats where the bot is off (None: nowhere)."""
        return self._switch

    @switch.setter
    def switch(self, switch: ChatSwitchGate | None) -> None:
        self._switch = switch  # and a ChatSwitch's verdicts, read inline on the FAQ way
        self._verdicts = getattr(switch, "verdicts", None)  # (None: another gate's cached())

    def replace_rulebook(self, rulebook: Rulebook, registry: Registry | None = None) -> None:
        """Swap rules atomically: runs in flight finish on the rules they started with.

        ``registry``: the executors the new rules were loaded against (a reload), put
        in force with them — no run sees the new rules with the old executors.
        """
        if registry is not None:
            self.services.replace_registry(registry)
        self.rulebook = rulebook
        self._plans = {}  # the old rules' verdicts (a run in flight asks about its rule again)
        self._runs = {}

    async def handle(self, message: Message) -> Reply:
        """Answer one message. Never raises for bad input or a failing step. (:meth:`answer`
        and the await, answer's first half inline: one frame less for a FAQ answer.)"""
        n = next(TRACE_COUNTER)  # tracing.trace_id(), inline
        if not n & 255:
            roll_trace_high(n)
        trace_id = TRACE_HIGH[0] + HEX2[n & 255]
        hit = None
        if not logs.DEBUG_ENABLED:
            try:
                hit = self._planned(message, trace_id)
            except Exception as exc:  # an engine bug: answer, log it, keep serving
                token = _TRACE_SET(trace_id)
                try:
                    return self._crashed(trace_id, exc)
                finally:
                    _TRACE_RESET(token)
            if type(hit) is Reply:
                return hit
        return await self._answering(message, trace_id, hit)

    def answer(self, message: Message) -> Reply | Callable[[], Coroutine[Any, Any, Reply]]:
        """:meth:`handle` for a caller that can take the reply at once: a FAQ answer (a
        constant rule's, or no rule's) is returned, no task needed; else what makes the
        coroutine that answers (call it, await that once: none exists before the caller's
        task runs, so a task that never does leaves none unawaited)."""
        n = next(TRACE_COUNTER)  # tracing.trace_id(), inline
        if not n & 255:
            roll_trace_high(n)
        trace_id = TRACE_HIGH[0] + HEX2[n & 255]
        hit = None
        if not logs.DEBUG_ENABLED:
            try:  # the usual FAQ answer: no coroutine, no await — no other run sees it in
                # flight (not counted) and it logs with its trace id in hand (none bound)
                hit = self._planned(message, trace_id)
            except Exception as exc:  # an engine bug: answer, log it, keep serving
                token = _TRACE_SET(trace_id)
                try:
                    return self._crashed(trace_id, exc)
                finally:
                    _TRACE_RESET(token)
            if type(hit) is Reply:
                return hit
        return partial(self._answering, message, trace_id, hit)

    async def _answering(self, message: Message, trace_id: str, hit: Any) -> Reply:
        """:meth:`answer`'s coroutine: the run in flight (counted, its trace id bound)."""
        self._inflight += 1
        token = _TRACE_SET(trace_id)
        try:
            if logs.DEBUG_ENABLED:
                return await self._handle_debug(message, trace_id)
            return await self._handle(message, trace_id, hit)
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

    async def _handle(self, message: Message, trace_id: str, hit: Any = None) -> Reply:
        """The per-message path, in the gates' order (:mod:`tmy.engine.gates`), kept whole
        with the usual cases tested inline on purpose: every call it saves shows in
        ``bench/dispatch_callgrind.py``; the rarer paths are calls. ``hit``: what
        :meth:`_planned` found past the gates (a Match, or _NO_HIT), not asked again."""
        rulebook = self.rulebook
        if hit is not None:
            text = message.text
            match = None if hit is _NO_HIT else hit
        else:
            text, match = await self._gates(message, trace_id)
            if type(text) is not str:
                return text
        if match is None and rulebook.has_sessions:
            match = await replies.session_match(rulebook, self.services.store, message, text)
            if match is not None and match.rule.debounce:
                return await self._burst(match, message, trace_id)
        if match is None:
            return self._unmatched(rulebook, message, text, trace_id)  # counted there
        meters = self._meters.get(message.platform)  # metrics.message, without two calls
        if meters is None:
            meters = self._meters_of(message.platform)
        meters[0].value += 1.0
        rule = match.rule
        switch = self.switch
        if switch is not None:
            off = switch.cached(message)
            if off is None:
                off = await switch.is_off(message)
            if off:
                return self._switched_off(message, text, trace_id, rule.id)
        if rule.cooldown is not None:
            left = await self.cooldown_claim(rule, message)
            if left > 0:
                return await self._cooled(match, message, text, trace_id, left)
        plan = self._plans.get(rule, _UNPLANNED)
        if plan is _UNPLANNED:
            plan = self._plan(rule)
        if logs.DEBUG_ENABLED or (message.reply_to and message.api is not None):
            plan = self._general(match, message, text)
        started = _perf_counter()  # run_rule, inlined: one coroutine less per message
        if plan is not None:
            reply = plan.reply(trace_id, started)
        else:
            reply = await self._run(match, message, trace_id, text, True, None)
        observer = self.observer
        if logs.INFO_ENABLED or observer is not None:
            seconds = _perf_counter() - started
            if plan is None or observer or not plan.log(match, message, text, reply, seconds):
                log_run(match, message, text, reply, seconds, True, self.dry_run, observer)
        runs = self._runs.get(reply.rule)  # metrics.run, without two calls
        if runs is None:
            runs = self._runs[reply.rule] = metrics.run_meters(reply.rule)
        runs[0 if reply.error is None else 1].value += 1.0
        return reply

    def _planned(self, message: Message, trace_id: str) -> Any:
        """:meth:`_handle`'s way, no coroutine, for plain ASCII text and ids, no event or
        command: the reply when a constant rule answers (switch verdict cached "on", no
        cooldown) or, without sessions, no rule does. Else, having counted and logged
        nothing, what :meth:`_handle` goes on from: the Match, :data:`_NO_HIT` or None."""
        text, user, chat, platform = message.text, message.user, message.chat, message.platform
        if (
            message.event is not None
            or not type(text) is type(user) is type(chat) is type(platform) is str
        ):
            return None
        ids = f"{user}\0{chat}\0{platform}"  # said.joined_ids: ASCII check; the line's key
        settings = self.settings
        if not (
            text.isascii()
            and ids.isascii()
            and len(text) <= settings.max_message_chars
            and len(ids) <= settings.max_id_chars + 2
        ):
            return None
        if (commands := self.commands) is not None and text.startswith(commands.prefix):
            return None
        if not message.is_admin and self._admins is not None:
            message.is_admin = self._admins.judge(message)
        rulebook = self.rulebook
        quick = rulebook.index.quick
        if quick is not None and not rulebook.has_filters:  # TriggerIndex.match's first way
            shown = text.strip()
            folded = shown.casefold()
            entry = quick(folded)  # no Match made: a constant rule's answer needs none
            if entry is None:
                match = None
            else:
                rule, trigger, match = entry[1], entry[2], _UNMADE
                n = len(trigger.literal)  # QUESTION: triggers.question_after, inline (an
                question = shown[n:].strip() if len(shown) > n else ""  # ASCII fold: same length)
        else:  # filters or regex triggers (a regex timeout is logged under this trace id)
            match = traced_match(rulebook, message, text, trace_id)
            if match is not None:
                rule, trigger, question = match.rule, match.trigger, match.question
        if match is None:  # a session may take it, else no rule does (counted there)
            has_sessions = rulebook.has_sessions
            return _NO_HIT if has_sessions else self._unmatched(rulebook, message, text, trace_id)
        plan = self._plans.get(rule, _UNPLANNED)  # not a subscript: a rule's first hit —
        if plan is _UNPLANNED:  # each message's at 100,000 rules — would raise (~100 ns)
            plan = self._plan(rule)
        if (
            plan is not None
            and rule.cooldown is None
            and not (message.reply_to and message.api is not None)  # a quote to fetch: general
        ):
            started = _perf_counter()
            verdicts = self._verdicts
            if verdicts is not None:  # ChatSwitch.cached, inline: a fresh verdict "on"
                chats = verdicts.get(platform)
                verdict = None if chats is None else chats.get(chat)
                on = verdict is not None and not verdict[0] and verdict[1] > started
            else:
                on = self._switch is None or self._switch.cached(message) is False
            if on:  # a constant rule answers, here
                try:
                    meters = self._meters[platform]
                except KeyError:
                    meters = self._meters_of(platform)
                meters[0].value += 1.0  # matched (received is matched + unmatched)
                if plan.one and self.observer is None and logs.INFO_ENABLED:  # a FAQ answer
                    reply = plan.run(trigger, question, message, text, trace_id, started, ids)
                else:
                    reply = plan.run_watched(
                        trigger, question, message, text, trace_id, started, self.observer
                    )
                return reply  # its run counted by the plan (metrics.run)
        return match_of(entry, question) if match is _UNMADE else match  # the general run's

    async def _gates(self, message: Message, trace_id: str) -> tuple[Any, Match | None]:
        """The gates before the rules, and the index's answer: (text, match), or (the
        reply, None) when a gate answers (too long, bad ids, an event, a command)."""
        text = message.text if isinstance(message.text, str) else to_text(message.text)
        if not text.isascii():
            text = message.text = valid_unicode(text)
        if len(text) > self.settings.max_message_chars:
            return self._too_long(message, text, trace_id), None
        id_limit = self.settings.max_id_chars
        user, chat, platform = message.user, message.chat, message.platform
        if not (  # the usual ids: short ASCII text (checked in full by id_refusal otherwise)
            type(user) is str
            and type(chat) is str
            and type(platform) is str
            and len(user) + len(chat) + len(platform) <= id_limit
            and (user + chat + platform).isascii()
        ):
            refused = self._bad_ids(message, id_limit, trace_id)
            if refused is not None:
                return refused, None
        if not message.is_admin and self._admins is not None:
            message.is_admin = self._admins.judge(message)
        if message.event is not None:  # a platform event: no trigger, the rules' events:
            return await self._event(message, trace_id), None
        commands = self.commands
        if commands is not None and text.startswith(commands.prefix) and commands.is_command(text):
            return await self._command(commands, message, text, trace_id), None
        return text, filtered_match(self.rulebook, message, text)

    def _general(self, match: Match, message: Message, text: str) -> None:
        """The general run it is (None for the plan): ``debug`` logs its step.done lines
        (and these two here); a quote to fetch is a REPLY_TO local."""
        if logs.DEBUG_ENABLED:
            log_received("debug", message, text)
            log_matched(match)

    def _plan(self, rule: Rule) -> ConstantPlan | None:
        """``rule``'s :class:`ConstantPlan` (None: the general run), kept per rule.

        An ``explain`` engine (dry run: its lines say so) always takes the general run.
        One verdict per rule is kept (a plan is ~0.4 kB, only for rules that ran): a fixed
        cap below the rulebook's size made a daemon whose traffic spans more rules than
        the cap make plans again and again (~50,000 instructions each, at 10,000 rules
        on the QQ path every message); :data:`PLANS_SPARE` more for a reload's old rules.
        """
        plan = None if self.dry_run else constant_plan(rule, self.settings.max_reply_chars)
        if len(self._plans) >= len(self.rulebook.rules) + PLANS_SPARE:  # bounded by the rules
            self._plans.clear()
        self._plans[rule] = plan
        return plan

    def _meters_of(self, platform: str) -> Any:
        """The (matched, unmatched) counters of ``platform``, kept by the engine."""
        if len(self._meters) >= 1000:  # platform names come from callers: stay bounded
            self._meters.clear()
        meters = self._meters[platform] = metrics.message_meters(platform)
        return meters
