"""What a message passes before any rule runs: sizes and ids, admins, commands, the chat switch.

In :meth:`tmy.engine.core.Engine.handle`'s order: the text is made valid
Unicode and its length checked; the user, chat and platform ids are checked
(a fast test for the usual short ASCII ids, :func:`id_refusal` otherwise); the
sender's admin flag is set from ``admins``; an admin command (``.tmy …``) is
handed to the chat command front end and never reaches the rules; after a
rule matched, the chat switch (``.tmy off``) may still refuse the run. Rule
filters and cooldowns are the rules' own gates (:mod:`tmy.rulebook.model`,
:mod:`tmy.engine.cooldowns`).

The engine inlines the fast tests; the functions here are the slower paths.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from tmy import logs
from tmy.message import Message, id_problem
from tmy.rulebook.model import OPEN_FILTERS, Rulebook
from tmy.rulebook.triggers import Match

NO_TRIGGER = "no trigger matched"
CHAT_OFF_REASON = "the bot is switched off in this chat (an admin can say '{prefix} on')"


class ChatCommandsGate(Protocol):
    """The ``.tmy`` command front end, as the engine uses it (tmy.commands.chat.ChatCommands).

    ``prefix`` is compared first, on every message: a text that does not start
    with it never costs an :meth:`is_command` call.
    """

    prefix: str

    def is_command(self, text: str) -> bool: ...

    async def run(self, message: Message, text: str) -> str | None: ...


class ChatSwitchGate(Protocol):
    """Chats where the bot is switched off, as the engine uses it (tmy.engine.switch.ChatSwitch).

    :meth:`cached` answers from memory (None: not known now); only then does the
    engine await :meth:`is_off`, so a matched message usually pays no coroutine.
    """

    def cached(self, message: Message) -> bool | None: ...

    async def is_off(self, message: Message) -> bool: ...


class Admins:
    """Who is an admin: ``platform:user`` entries and bare user ids, matched apart.

    ``platform:user`` matches that user on that platform only: the platform and
    the user id of the message are compared separately, so ``user:
    "telegram:42"`` sent on ``http`` is not ``telegram:42``. A bare id matches
    that user id on any platform, but never a user id that contains ``:``
    (otherwise a crafted id could read as a listed ``platform:user``).
    """

    __slots__ = ("bare", "pairs")

    def __init__(self, entries: Iterable[str]) -> None:
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

    def judge(self, message: Message) -> bool:
        """Whether ``message`` comes from an admin: its sender, or whom its adapter judges it
        as (``admin_as``: an API key's identity on /v1 and /mcp; ``""``: no one)."""
        judged = message.user if message.admin_as is None else message.admin_as
        return judged != "" and self.admits(message.platform, judged)


def valid_unicode(text: str) -> str:
    """Lone surrogates (valid in JSON's \\ud800, not in UTF-8) become U+FFFD.

    Otherwise they reach logs, stores and replies that must encode to UTF-8.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def id_refusal(message: Message, limit: int) -> str | None:
    """What is wrong with the message's user, chat or platform id, or None.

    The slow path: the engine first tests for the usual short ASCII ids inline.
    """
    for name in ("user", "chat", "platform"):
        problem = id_problem(name, getattr(message, name), limit)
        if problem is not None:
            return problem
    return None


def filtered_match(rulebook: Rulebook, message: Message, text: str) -> Match | None:
    """The index's full lookup for ``message``, its rules' filters asked."""
    admits = None  # no filtered rule: no closure per message, no call per candidate
    if rulebook.has_filters:
        admits = lambda rule: rule.filters is OPEN_FILTERS or rule.filters.admits(message)  # noqa: E731
    return rulebook.index.match(text, admits)


def traced_match(rulebook: Rulebook, message: Message, text: str, trace_id: str) -> Match | None:
    """:func:`filtered_match` under ``message``'s trace id (the engine's FAQ way binds none):
    a regex trigger abandoned for its time budget logs ``trigger.regex_timeout``, and
    ``tmy trace`` finds it with the message."""
    token = logs.TRACE.set(trace_id)
    try:
        return filtered_match(rulebook, message, text)
    finally:
        logs.TRACE.reset(token)


def unmatched_reason(rulebook: Rulebook, message: Message, text: str) -> str:
    """Why no rule runs for ``message``: no trigger, or the filters of the rule that matched.

    Found only once no rule took the message (a second lookup, filters
    ignored), so the matched path pays nothing for it; without filtered rules
    (``rulebook.has_filters``) the engine knows the answer without asking.
    """
    refused = rulebook.index.match(text)
    if refused is None:
        return NO_TRIGGER
    why = refused.rule.filters.refusal(message)
    return f"rule {refused.rule.id!r} matched but {why or 'its filters refused it'}"
