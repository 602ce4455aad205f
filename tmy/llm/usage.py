"""Token usage per user, chat and day, and the daily budgets that cap it.

Counters live in the store (so several daemons on one Redis share them) under
``llm/usage/<day>/all``, ``…/user/<platform>/<user>`` and
``…/chat/<platform>/<chat>``, each ``{prompt, completion, cached, calls,
latency_ms, models: {name: tokens}}`` (``latency_ms`` summed, so an average is
``latency_ms / calls``), kept for 40 days. ``<day>`` is the date in the
daemon's timezone. A call adds to them in memory (:class:`~tmy.llm.tally.Tally`);
they reach the store in one batch per ``llm.budget.flush_interval``, at a
clean stop, and — when a budget is configured — before the call's step goes on.

Budgets are checked before each request: once the user's (or everyone's)
tokens today reached ``llm.budget.per_user_daily_tokens`` (``daily_tokens``),
no request is sent and the step fails with a message the rule's ``on_error``
can show. The check reads the store (every daemon's written counts) plus what
this daemon has not written yet. A request already under way is allowed to
finish, so concurrent requests may overshoot a limit by what they use.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from tmy.config.llm import LLMConfig
from tmy.llm.tally import KEEP, Tally, add_to
from tmy.llm.wire import LLMError, Usage
from tmy.message import Message
from tmy.store.base import MISSING, Store
from tmy.store.board_keys import escape_key_part

__all__ = ["KEEP", "add_usage", "check_budget", "count", "keys", "today", "usage_of"]


def today(tz: tzinfo | None) -> str:
    """The counters' day: the date in the daemon's timezone (``local``: the machine's)."""
    return datetime.now(tz).date().isoformat()


def keys(day: str, message: Message) -> dict[str, str]:
    """The counter keys one call adds to."""
    platform = escape_key_part(message.platform)
    return {
        "all": f"llm/usage/{day}/all",
        "user": f"llm/usage/{day}/user/{platform}/{escape_key_part(message.user)}",
        "chat": f"llm/usage/{day}/chat/{platform}/{escape_key_part(message.chat)}",
    }


def _tokens(value: Any) -> int:
    if not isinstance(value, dict):
        return 0
    return int(value.get("prompt", 0)) + int(value.get("completion", 0))


async def check_budget(
    store: Store, config: LLMConfig, message: Message, day: str, tally: Tally | None = None
) -> None:
    """LLMError (final: no fallback helps) when today's budget is used up.

    ``tally``: this daemon's counts not written yet, added to the stored ones.
    """
    if not config.per_user_daily_tokens and not config.daily_tokens:
        return
    k = keys(day, message)
    everyone, user = await store.get_many([k["all"], k["user"]])
    if tally is not None:
        everyone = tally.with_unwritten(k["all"], everyone)
        user = tally.with_unwritten(k["user"], user)
    used = _tokens(user)
    if config.per_user_daily_tokens and used >= config.per_user_daily_tokens:
        raise LLMError(
            f"the daily LLM budget for {message.user} is used up ({used} of "
            f"{config.per_user_daily_tokens} tokens today; llm.budget.per_user_daily_tokens)",
            final=True,
        )
    used = _tokens(everyone)
    if config.daily_tokens and used >= config.daily_tokens:
        raise LLMError(
            f"the daily LLM budget is used up ({used} of {config.daily_tokens} tokens today; "
            "llm.budget.daily_tokens)",
            final=True,
        )


async def add_usage(
    store: Store, message: Message, day: str, usage: Usage, model: str, latency_ms: float = 0.0
) -> None:
    """Add one call's tokens and latency to the user's, the chat's and everyone's counters,
    straight in the store (one ``update`` each; the LLM step counts through its
    runtime's :class:`~tmy.llm.tally.Tally` instead)."""
    delta = {
        "prompt": usage.prompt,
        "completion": usage.completion,
        "cached": usage.cached,
        "calls": 1,
        "models": {model: usage.total},
        "latency_ms": latency_ms,
    }
    for key in keys(day, message).values():
        await store.update(key, lambda current: (add_to(current, delta), None), ttl=KEEP)


def count(tally: Tally, message: Message, day: str, usage: Usage, model: str, ms: float) -> None:
    """Count one call in ``tally`` (no I/O): the counters of :func:`keys`."""
    counters = list(keys(day, message).values())
    tally.add(counters, usage.prompt, usage.completion, usage.cached, model, ms)


async def usage_of(
    store: Store, message: Message, day: str, tally: Tally | None = None
) -> dict[str, Any]:
    """Today's counters for this message's user, chat and everyone (for the inspector);
    with ``tally``, what this daemon has not written yet is included."""
    k = keys(day, message)
    values = await store.get_many(list(k.values()))
    if tally is not None:
        values = [tally.with_unwritten(key, v) for key, v in zip(k.values(), values, strict=True)]
    return {name: ({} if v is MISSING else v) for name, v in zip(k, values, strict=True)}
