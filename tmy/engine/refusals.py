"""The engine's answers without a run: a message refused (too long, bad ids), a
``.tmy`` command, a message no rule takes, a rule in a chat where the bot is off, and
the last resort when the engine itself failed.

A mixin of :class:`tmy.engine.core.Engine` (its ``settings``, ``commands`` and
``observer``): the rarer ends of the per-message path, kept out of it.
"""

from __future__ import annotations

from typing import Any

from tmy import logs, metrics
from tmy.engine.gates import (
    CHAT_OFF_REASON,
    NO_TRIGGER,
    ChatCommandsGate,
    id_refusal,
    unmatched_reason,
)
from tmy.engine.replies import LAST_RESORT_REPLY
from tmy.engine.tracing import log_received, log_unmatched
from tmy.logs import get_logger
from tmy.message import Message, Reply
from tmy.rulebook.model import Rulebook

log = get_logger("tmy")


class Refusals:
    """Replies of the per-message path that run no rule."""

    def _crashed(self, trace_id: str, exc: Exception) -> Reply:
        """An engine bug while answering: log it with its traceback, answer anyway."""
        log.exception("message.crashed")
        return Reply(LAST_RESORT_REPLY, None, trace_id, error=f"internal error: {exc!r}")

    settings: Any
    commands: ChatCommandsGate | None
    observer: Any

    def _bad_ids(self, message: Message, id_limit: int, trace_id: str) -> Reply | None:
        problem = id_refusal(message, id_limit)
        if problem is None:
            return None
        log.warning("message.refused", reason=problem)
        return Reply("", None, trace_id, error=f"bad message: {problem}")

    def _too_long(self, message: Message, text: str, trace_id: str) -> Reply:
        limit = self.settings.max_message_chars
        error = f"message too long: {len(text)} characters (the limit is {limit})"
        log_received("warning", message, text)
        log.warning("message.refused", reason=error)
        return Reply("", None, trace_id, error=error)

    async def _command(
        self, commands: ChatCommandsGate, message: Message, text: str, trace_id: str
    ) -> Reply:
        """A ``.tmy`` command: answered by the front end, never reaches the rules."""
        log_received("info", message, text)
        metrics.message(message.platform, False)
        answer = await commands.run(message, text)
        return Reply(answer or "", None, trace_id)

    def _unmatched(self, rulebook: Rulebook, message: Message, text: str, trace_id: str) -> Reply:
        """No rule for this message: one cheap info line, so its trace id leads somewhere.

        The reason is found only now (a second lookup without filters), so the
        matched path pays nothing for it. Counted here (metrics.message, unmatched).
        """
        meters = self._meters.get(message.platform)
        if meters is None:
            meters = self._meters_of(message.platform)
        meters[1].value += 1.0  # unmatched (received is matched + unmatched)
        observer = self.observer
        if not rulebook.has_filters and observer is None:  # nothing but the line is logged
            if logs.INFO_ENABLED:
                log_unmatched(message, text, NO_TRIGGER, None, None, trace_id)
            return Reply("", None, trace_id, None, [], False, NO_TRIGGER)
        token = logs.TRACE.set(trace_id)  # the engine's FAQ way binds none: a regex timeout
        try:  # in the second look, and the observer, are under the message's trace id
            # without any filtered rule, a second look (filters ignored) cannot find one
            reason = (
                unmatched_reason(rulebook, message, text) if rulebook.has_filters else NO_TRIGGER
            )
            log_unmatched(message, text, reason, None, observer, trace_id)
        finally:
            logs.TRACE.reset(token)
        return Reply("", None, trace_id, None, [], False, reason)

    def _switched_off(self, message: Message, text: str, trace_id: str, rule: str) -> Reply:
        """A rule matched in a chat where the bot is off: no run, one unmatched line."""
        prefix = self.commands.prefix if self.commands is not None else ".tmy"
        reason = CHAT_OFF_REASON.format(prefix=prefix)
        return self._no_run(message, text, trace_id, reason, rule=rule)

    def _no_run(
        self, message: Message, text: str, trace_id: str, reason: str, rule: str | None = None
    ) -> Reply:
        observer = self.observer
        if logs.INFO_ENABLED or observer is not None:
            log_unmatched(message, text, reason, rule, observer)
        return Reply("", None, trace_id, None, [], False, reason)
