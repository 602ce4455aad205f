"""What adapters hand the engine (:class:`Message`), get back (:class:`Reply`) and address
(:class:`Target`), and the rule every user, chat and platform id meets (:func:`id_problem`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Message:
    """One incoming chat message, platform-neutral."""

    text: str
    user: str = "anonymous"
    chat: str = ""  # "" means the user's private chat with the bot
    platform: str = "console"
    user_name: str = ""
    private: bool | None = None  # None: private when chat is ""
    is_admin: bool = False
    raw: Any = None  # the platform's own event, for adapters and plugins
    mentions_bot: bool = False  # the bot was @-mentioned or replied to (group chats)
    reply_to: str | None = None  # the platform's id of the message this one quotes
    self_id: str = ""  # which bot account received it (several accounts on one platform)
    message_id: str = ""  # the platform's id of this message
    # an identity that lasts one request (the OpenAI facade without a user or an API key):
    # no LLM history, dialogue record or memory entry is kept for it, so nothing piles up
    # under one-off ids and nothing could ever be recalled by someone else
    ephemeral: bool = False

    def __post_init__(self) -> None:
        if self.private is None:
            self.private = self.chat == ""
        if not self.chat:
            self.chat = f"private:{self.user}"
        if not self.user_name:
            self.user_name = self.user


@dataclass(slots=True)
class StepRecord:
    """What one step did, for ``ask --json`` and tests."""

    uri: str
    plugin: str
    input: Any = None
    result: Any = None
    error: str = ""
    ms: float = 0.0
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. LLM model, tokens, retries

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not out["extra"]:
            del out["extra"]
        out["error"] = self.error or None  # null when none, as in the log and explain
        return out


@dataclass(slots=True)
class Reply:
    """The engine's answer to one message."""

    text: str
    rule: str | None
    trace_id: str
    error: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    stopped: bool = False  # a step's ``stop:`` ended the run (an answer, not an error)
    reason: str | None = None  # why there is no run: no trigger, a filter, a cooldown, …

    @property
    def matched(self) -> bool:
        return self.rule is not None

    def as_dict(self, *, steps: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule,
            "answer": self.text,
            "error": self.error,
            "trace_id": self.trace_id,
        }
        if self.stopped:
            out["stopped"] = True
        if self.reason is not None:
            out["reason"] = self.reason
        if steps:
            out["steps"] = [s.as_dict() for s in self.steps]
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """Where a message sent on the bot's own initiative goes.

    ``chat`` uses the platform's chat ids as rules see them in ``CHAT``
    (``group:<id>`` or ``private:<user>`` on OneBot, a channel id on Discord
    and Telegram); ``user`` is optional (a private chat, or someone to @).
    """

    platform: str
    chat: str
    user: str = ""


def id_problem(name: str, value: Any, limit: int) -> str | None:
    """Why ``value`` cannot be a user/chat/platform id, or None when it can.

    Ids become store keys, log fields and lock names: they must be text, valid
    UTF-8 (no lone surrogates) and short.
    """
    if not isinstance(value, str):
        return f"{name!r} must be a string, not {type(value).__name__}"
    if len(value) > limit:
        return f"{name!r} is {len(value)} characters long (the limit is {limit})"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{name!r} contains a lone surrogate (not valid Unicode text)"
    return None
