"""``.tmy <command> …`` in chat: the operator commands for admins, in any chat.

A message that starts with the prefix (``admin_prefix``, default ``.tmy``) is a
command and never reaches the rules, on every adapter (``/v1/messages``
included). Only admins (``admins:``, matched per platform) get an answer;
anyone else gets no reply at all and an ``admin.refused`` warning is logged,
so the bot does not even confirm that the command exists. A command marked
``admin=False`` is the exception: anyone may run it. One marked ``chat_admin=True``
(it acts on this chat only: ``on``, ``off``, ``help``) may also be run by an
admin of the chat by the platform's roles (``message.chat_admin``, from
``admins_from``); to such an admin every other command is refused the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tmy.command import Command, Invocation, parse_words
from tmy.commands.help import help_text
from tmy.errors import TmyError
from tmy.logs import get_logger, preview
from tmy.message import Message

if TYPE_CHECKING:
    from tmy.types import AppLike

log = get_logger("tmy.admin")

DEFAULT_PREFIX = ".tmy"


def _may_run(message: Message, command: Command | None) -> bool:
    """A global admin runs any command; anyone an ``admin=False`` one; an admin of this
    chat by the platform's roles a ``chat_admin=True`` one."""
    if message.is_admin:
        return True
    if command is None:
        return False
    return not command.admin or (command.chat_admin and message.chat_admin)


class ChatCommands:
    """Parses ``<prefix> <command> …`` and runs it from the app's command table."""

    def __init__(
        self, commands: Mapping[str, Command], app: AppLike, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self.commands = commands
        self.app = app
        self.prefix = prefix

    def is_command(self, text: str) -> bool:
        if not text.startswith(self.prefix):
            return False
        rest = text[len(self.prefix) :]
        return not rest or rest[0].isspace()

    def _find(self, name: str) -> Command | None:
        command = self.commands.get(name)
        return command if command is not None and "chat" in command.fronts else None

    async def run(self, message: Message, text: str) -> str | None:
        """The answer, or None (refused: no reply at all)."""
        words = text[len(self.prefix) :].split(maxsplit=1)
        name = words[0].lower() if words else "help"
        rest = words[1].strip() if len(words) > 1 else ""
        command = self._find(name)
        if not _may_run(message, command):
            log.warning(
                "admin.refused",
                user=message.user,
                platform=message.platform,
                chat=message.chat,
                command=preview(text, 80),
            )
            return None
        log.info("admin.command", command=name, user=message.user, platform=message.platform)
        try:
            if command is None:
                return f"error: unknown command {name!r}; {help_text(self.commands)}"
            args = parse_words(command, rest)
            inv = Invocation(
                args,
                message,
                "chat",
                self.app,
                self.app.settings,
                compact=True,
                commands=self.commands,
            )
            result = await command.run(inv)
        except TmyError as exc:
            return f"error: {exc}"
        return result.text or "-"  # a chat message cannot be empty
