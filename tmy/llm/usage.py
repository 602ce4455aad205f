"""Token usage per user, chat and day, and the daily budgets that cap it.

Counters live in the store (so several daemons on one Redis share them) under
``llm/usage/<day>/all``, ``…/user/<platform>/<user>`` and
``…/chat/<platform>/<chat>``, each ``{prompt, completion, cached, calls,
latency_ms, models: {name: tokens}}`` (``latency_ms`` summed, so an average is
``latency_ms / calls``), added to with the store's atomic ``update`` and kept
for 40 days. ``<day>`` is the date in the daemon's timezone.

Budgets are checked before each request: once the user's (or everyone's)
tokens today reached ``llm.budget.per_user_daily_tokens`` (``daily_tokens``),
no request is sent and the step fails with a message the rule's ``on_error``
can show. A request already under way is allowed to finish, so concurrent
requests may overshoot a limit by what they use.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from tmy.config.llm import LLMConfig
from tmy.llm.wire import LLMError, Usage
from tmy.message import Message
from tmy.store.base import MISSING, Store

KEEP = 40 * 86400


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def today(tz: tzinfo | None) -> str:
    """The counters' day: the date in the daemon's timezone (``local``: the machine's)."""
    return datetime.now(tz).date().isoformat()


def keys(day: str, message: Message) -> dict[str, str]:
    """The counter keys one call adds to."""
    platform = _escape(message.platform)
    return {
        "all": f"llm/usage/{day}/all",
        "user": f"llm/usage/{day}/user/{platform}/{_escape(message.user)}",
        "chat": f"llm/usage/{day}/chat/{platform}/{_escape(message.chat)}",
    }


def _tokens(value: Any) -> int:
    if not isinstance(value, dict):
        return 0
    return int(value.get("prompt", 0)) + int(value.get("completion", 0))


async def check_budget(store: Store, config: LLMConfig, message: Message, day: str) -> None:
    """LLMError (final: no fallback helps) when today's budget is used up."""
    if not config.per_user_daily_tokens and not config.daily_tokens:
        return
    k = keys(day, message)
    everyone, user = await store.get_many([k["all"], k["user"]])
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
    """Add one call's tokens and latency to the user's, the chat's and everyone's counters."""

    def add(current: Any) -> tuple[Any, None]:
        value = dict(current) if isinstance(current, dict) else {}
        for field, n in (
            ("prompt", usage.prompt),
            ("completion", usage.completion),
            ("cached", usage.cached),
            ("calls", 1),
        ):
            value[field] = int(value.get(field, 0)) + n
        models = dict(value.get("models") or {})
        models[model] = int(models.get(model, 0)) + usage.total
        value["models"] = models
        value["latency_ms"] = round(float(value.get("latency_ms", 0.0)) + latency_ms, 3)
        return value, None

    for key in keys(day, message).values():
        await store.update(key, add, ttl=KEEP)


async def usage_of(store: Store, message: Message, day: str) -> dict[str, Any]:
    """Today's counters for this message's user, chat and everyone (for the inspector)."""
    k = keys(day, message)
    values = await store.get_many(list(k.values()))
    return {name: ({} if v is MISSING else v) for name, v in zip(k, values, strict=True)}
