"""``cooldown:`` windows: kept in the store, so a window holds across daemons.

A rule with a cooldown runs at most once per window per user, chat or
globally (``per``); within the window it answers its cooldown ``reply`` (or
nothing). Starting a window is one atomic store update, so two daemons
cannot both start it.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tmy import logs
from tmy.engine.keys import escape_key_part
from tmy.engine.variables import Variables
from tmy.errors import TmyError
from tmy.logs import get_logger, preview
from tmy.message import Message, Reply
from tmy.rulebook.model import Rule, Rulebook
from tmy.rulebook.triggers import Match
from tmy.store.base import Store
from tmy.values.compiled import to_text

if TYPE_CHECKING:
    from tmy.engine.services import Services

log = get_logger("tmy")


def epoch(fixed_now: str | None) -> float:
    """Now, in seconds: a rule test's pinned NOW when there is one."""
    if fixed_now is not None:
        try:
            return datetime.fromisoformat(fixed_now).timestamp()
        except ValueError:
            pass
    return time.time()


def cooldown_key(rule: Rule, message: Message) -> str:
    """The store key of ``rule``'s window for ``message`` (by its ``per``)."""
    assert rule.cooldown is not None
    per = rule.cooldown.per
    if per == "global":
        return f"cooldown/{rule.id}"
    where = escape_key_part(message.platform)
    if per == "chat":
        return f"cooldown/{rule.id}/chat/{where}/{escape_key_part(message.chat)}"
    return f"cooldown/{rule.id}/user/{where}/{escape_key_part(message.user)}"


async def claim(store: Store, rule: Rule, message: Message, now: float) -> float:
    """Start the rule's window for this message, or the seconds still left (0: started now)."""
    assert rule.cooldown is not None
    seconds = rule.cooldown.seconds

    def start(current: Any) -> tuple[Any, float]:
        if isinstance(current, (int, float)) and current > now:
            return current, current - now
        return now + seconds, 0.0

    return await store.update(cooldown_key(rule, message), start, ttl=seconds + 1)


async def left(store: Store, rule: Rule, message: Message, now: float) -> float:
    """Seconds left in the rule's window for this message (0 when free); reads only."""
    if rule.cooldown is None:
        return 0.0
    until = await store.get(cooldown_key(rule, message))
    return max(0.0, until - now) if isinstance(until, (int, float)) else 0.0


def log_cooldown(message: Message, text: str, rule: str, seconds_left: float, answer: str) -> None:
    """``run.cooldown``: the rule matched inside its window and answered ``answer``."""
    if logs.INFO_ENABLED:
        logs.emit(
            "info",
            "run.cooldown",
            rule=rule,
            left=round(seconds_left, 1),
            answer=preview(answer),
            text=preview(text),
            user=message.user,
            chat=message.chat,
            platform=message.platform,
        )


async def cooled_reply(
    rule: Rule, variables: Variables, text: str, trace_id: str, seconds_left: float, log_it: bool
) -> Reply:
    """What ``rule`` answers inside its window: its cooldown ``reply`` (with
    ``COOLDOWN_LEFT``), or nothing. ``variables`` holds the run's starting locals."""
    assert rule.cooldown is not None
    message = variables.message
    reason = f"rule {rule.id!r} is cooling down ({seconds_left:.0f} s left)"
    template = rule.cooldown.reply
    if template is None:
        if log_it:
            log_cooldown(message, text, rule.id, seconds_left, "")
        return Reply("", rule.id, trace_id, reason=reason)
    variables.locals["COOLDOWN_LEFT"] = max(1, round(seconds_left))
    try:
        await variables.fetch(template.names)
        await variables.fetch_boards(getattr(template, "boards", ()))
        answer = to_text(template.evaluate(variables))
    except TmyError as exc:
        log.warning("cooldown.reply_failed", rule=rule.id, error=str(exc))
        return Reply("", rule.id, trace_id, error=f"cooldown reply: {exc}", reason=reason)
    if log_it:
        log_cooldown(message, text, rule.id, seconds_left, answer)
    return Reply(answer, rule.id, trace_id, reason=reason)


class Cooldowns:
    """The engine's cooldown methods (a mixin of :class:`tmy.engine.core.Engine`), for its
    per-message path, ``explain`` and the event path."""

    services: Services
    rulebook: Rulebook
    fixed_now: str | None

    if TYPE_CHECKING:  # the engine's own

        def locals_for(self, match: Match, message: Message, text: str) -> dict[str, Any]: ...

    async def cooldown_claim(self, rule: Rule, message: Message) -> float:
        """Start the rule's cooldown window for this message, or the seconds still left.

        One atomic store update (kept in the store, so the window holds across
        daemons): 0 means the window was free and is now started.
        """
        return await claim(self.services.store, rule, message, epoch(self.fixed_now))

    async def cooldown_left(self, rule: Rule, message: Message) -> float:
        """Seconds left in the rule's cooldown for this message (0 when free); reads only."""
        return await left(self.services.store, rule, message, epoch(self.fixed_now))

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
        cooldown = match.rule.cooldown
        assert cooldown is not None
        loc = self.locals_for(match, message, text) if cooldown.reply else {}
        variables = Variables(loc, self.rulebook.variables, self.services.store, message)
        return await cooled_reply(match.rule, variables, text, trace_id, left, log_it)
