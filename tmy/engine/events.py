"""The engine's rarer ways to a run: platform events, debounced session bursts, cron firings.

A message with ``event`` set (a member joined, a friend request, a button press:
:class:`tmy.message.Event`) matches no trigger: it goes to the first rule, in
rulebook order, whose ``events:`` list its kind and whose filters (platforms,
chats, private, admin_only) admit it. An event no rule wants is answered with
an empty reply that says why, and logged once, at ``debug``, as
``event.unhandled`` (kind, raw, platform, chat, user): never silently lost.

A session follow-up of a rule with ``session: {…, debounce: N}`` waits in the
engine's :class:`~tmy.engine.debounce.Debouncer` until the user pauses; the last
message of the burst runs the rule with every text (``QUESTION``, ``BURST``).

Both then take the same way as a matched message (:meth:`Dispatch.dispatch`):
the chat switch, the rule's cooldown, the run, its ``run.done`` line. A
scheduled rule's firing (:meth:`Dispatch.run_scheduled`) runs its rule directly:
the scheduler has claimed the occurrence and checked the switch itself. The
per-message path of a plain text message stays inline in
:meth:`tmy.engine.core.Engine._handle`; these are methods of the engine (a mixin)
so that path pays nothing for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tmy import logs, metrics
from tmy.engine.debounce import Debouncer
from tmy.engine.replies import LAST_RESORT_REPLY
from tmy.engine.tracing import trace_id as new_trace_id
from tmy.logs import get_logger, preview
from tmy.message import EVENT_KINDS, Message, Reply
from tmy.rulebook.model import Rule, Rulebook
from tmy.rulebook.triggers import Match

if TYPE_CHECKING:
    from tmy.engine.core import Engine

log = get_logger("tmy")


def event_rule(rulebook: Rulebook, message: Message) -> Rule | None:
    """The rule that takes the event ``message`` carries: the first listing its kind whose
    filters admit it (``mention`` aside: an event mentions nobody), or None."""
    assert message.event is not None
    for rule in rulebook.events.get(message.event.kind, ()):
        if rule.filters.admits_event(message):
            return rule
    return None


def unhandled_reason(rulebook: Rulebook, message: Message) -> str:
    """Why no rule takes the event ``message`` carries (one line, for the reply and explain)."""
    assert message.event is not None
    kind = message.event.kind
    if kind not in EVENT_KINDS:
        return f"no rule wants the event {kind!r}: it is not one of {', '.join(EVENT_KINDS)}"
    listening = rulebook.events.get(kind, ())
    if not listening:
        return f"no rule wants the event {kind} (no rule lists it under events:)"
    first = listening[0]
    why = first.filters.refusal(message, event=True) or "its filters refused it"
    more = f" (and {len(listening) - 1} more refused it)" if len(listening) > 1 else ""
    return f"no rule wants the event {kind}: rule {first.id!r} lists it but {why}{more}"


class Dispatch:
    """The engine's event, burst, cron and shared after-match paths (see the module docstring)."""

    bursts: Debouncer

    async def _event(self: Engine, message: Message, trace_id: str) -> Reply:
        """Answer a platform event (``message.event`` is set; its text is ``""``)."""
        rulebook = self.rulebook
        rule = event_rule(rulebook, message)
        metrics.message(message.platform, rule is not None)
        if rule is None:
            reason = unhandled_reason(rulebook, message)
            if logs.DEBUG_ENABLED:
                event = message.event
                assert event is not None
                logs.emit(
                    "debug",
                    "event.unhandled",
                    kind=event.kind,
                    raw=event.raw,
                    platform=message.platform,
                    chat=message.chat,
                    user=message.user,
                    reason=reason,
                )
            return Reply("", None, trace_id, reason=reason)
        return await self.dispatch(Match(rule, None, "", ""), message, "", trace_id)

    async def _burst(self: Engine, match: Match, message: Message, trace_id: str) -> Reply:
        """A session follow-up of a debounced rule: collected; the burst's last message runs
        the rule for all of them, the others answer nothing."""
        rule = match.rule
        metrics.message(message.platform, True)
        key = (message.platform, message.chat, message.user, rule.id)
        burst = await self.bursts.collect(key, match.question, rule.debounce)
        if burst is None:
            reason = (
                f"debounced: rule {rule.id!r} answers this burst once the user has been "
                f"silent for {rule.debounce:g} s"
            )
            if logs.INFO_ENABLED:
                logs.emit(
                    "info",
                    "message.debounced",
                    rule=rule.id,
                    text=preview(match.question),
                    user=message.user,
                    chat=message.chat,
                    platform=message.platform,
                )
            return Reply("", rule.id, trace_id, reason=reason)
        question = "\n".join(burst)
        joined = Match(rule, None, "", question)
        return await self.dispatch(joined, message, question, trace_id, {"BURST": burst})

    async def run_scheduled(
        self: Engine, rule: Rule, message: Message, question: str, extra: dict[str, Any]
    ) -> Reply:
        """Run ``rule`` without a trigger (a cron firing): traced, logged and drained
        like a message; ``extra`` adds run locals (``FIRE_TIME``). Never raises."""
        trace_id = new_trace_id()
        self._inflight += 1
        token = logs.bind_trace(trace_id)
        try:
            log.info(
                "cron.fired", rule=rule.id, platform=message.platform, chat=message.chat, **extra
            )
            match = Match(rule, None, "", question)
            reply = await self.run_rule(
                match, message, trace_id, question, extra=extra, scheduled=True
            )
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

    async def dispatch(
        self: Engine,
        match: Match,
        message: Message,
        text: str,
        trace_id: str,
        extra: dict[str, Any] | None = None,
    ) -> Reply:
        """After a match (an event's rule, a burst): the chat switch, the cooldown, the run
        and its ``run.done`` line — what :meth:`Engine._handle` does inline for a message
        a trigger matched. ``extra`` adds run locals (``BURST``)."""
        switch = self.switch
        if switch is not None and await switch.is_off(message):
            return self._switched_off(message, text, trace_id, match.rule.id)
        if match.rule.cooldown is not None:
            left = await self.cooldown_claim(match.rule, message)
            if left > 0:
                return await self._cooled(match, message, text, trace_id, left)
        reply = await self.run_rule(match, message, trace_id, text, extra=extra)
        metrics.run(reply.rule, reply.error is None)
        return reply
