"""The command contract: arguments, permission, what it needs, and a two-form result.

An operator command (``vars``, ``trace``, ``memory`` …) is defined once as a
:class:`Command` and reached from three front ends that only parse and
render: the CLI (:mod:`tmy.cli`), ``.tmy`` in chat (:mod:`tmy.commands.chat`),
the HTTP admin API (:mod:`tmy.commands.http`) and the web console
(:mod:`tmy.console`, front ``console``). The console is a client of the same
commands the HTTP API offers (with a login instead of a key): a command or an
argument offered on ``http`` is offered on ``console`` too (:func:`offered`), and
both take arguments by name (:func:`args_by_name`). Extensions carry their
commands (``Extension.commands``); the app's command table is
:func:`command_table` of its extensions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tmy.errors import TmyError
from tmy.message import Message

if TYPE_CHECKING:
    from tmy.config import Settings
    from tmy.types import AppLike, ExtensionLike

Front = Literal["cli", "chat", "http", "console"]
ALL_FRONTS: frozenset[str] = frozenset(("cli", "chat", "http", "console"))
CLI_ONLY: frozenset[str] = frozenset(("cli",))


class CommandError(TmyError):
    """A command used wrongly: the text goes back to whoever ran it (exit 2 on the CLI)."""


def offered(fronts: frozenset[str], front: str) -> bool:
    """Whether something declared for ``fronts`` exists on ``front``: the web console
    has whatever the HTTP API has (it is that API's client, logged in)."""
    return front in fronts or (front == "console" and "http" in fronts)


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument, positional (``name``) or a flag (``--name``), the same on every front end.

    ``rest=True`` (the last positional): in chat and HTTP ``argv`` it takes the rest of
    the line verbatim (``explain TEXT``); on the CLI it is one (quoted) argument.
    ``flag=True`` with ``takes_value=False`` is a boolean switch (``--json``, ``--force``).
    Flags sharing a ``group`` exclude each other on the CLI. ``fronts``: where the
    argument exists (``trace --follow`` is the CLI's only).
    """

    name: str
    help: str = ""
    flag: bool = False
    required: bool = True
    takes_value: bool = True
    choices: tuple[str, ...] | None = None
    default: Any = None
    rest: bool = False
    metavar: str | None = None
    short: str | None = None
    group: str | None = None
    fronts: frozenset[str] = ALL_FRONTS

    @property
    def option(self) -> str:
        """The CLI spelling of a flag: ``--user-name`` for ``user_name``."""
        return "--" + self.name.replace("_", "-")

    @property
    def empty(self) -> Any:
        """The value when not given: False for a switch, else ``default``."""
        return False if self.flag and not self.takes_value else self.default


@dataclass(frozen=True, slots=True)
class Result:
    """What a command produced: ``text`` for people, ``data`` (JSON-able) for programs.

    ``exit_code`` is the CLI's exit status; without one it is 0 when ``ok``, else 1.
    """

    text: str
    data: Any = None
    ok: bool = True
    exit_code: int | None = None

    @property
    def code(self) -> int:
        if self.exit_code is not None:
            return self.exit_code
        return 0 if self.ok else 1

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "text": self.text, "data": self.data}


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a command: parsed arguments, who asked, from where, and the open app.

    ``compact`` asks for the chat rendering (chat, and HTTP ``argv``); the CLI and HTTP
    ``args`` get the full one. ``emit`` prints a line at once (the CLI only: streaming).
    ``commands`` is the app's command table (``help`` lists it).
    """

    args: Mapping[str, Any]
    who: Message
    front: str
    app: AppLike | None  # the open app; None when the command needs only the settings (CLI)
    settings: Settings | None = None
    compact: bool = False
    emit: Callable[..., None] | None = None  # emit(line, stderr=False)
    commands: Mapping[str, Command] = field(default_factory=dict)  # the app's command table


@dataclass(frozen=True, slots=True)
class Command:
    """An operator command (see :mod:`tmy.commands`).

    ``needs``: ``"app"`` (the store and rules open: most commands), ``"daemon"`` (a
    running daemon: ``reload``; the CLI asks the daemon over HTTP), ``"settings"``
    (nothing opened). ``admin``: chat refuses it to non-admins (the CLI user and the
    HTTP API key holder are the operator). ``chat_admin``: an admin of the chat it is
    said in by the platform's roles (``admins_from``: a QQ group owner, a Telegram
    chat administrator) may run it there too — for commands that act on that chat
    only (``on``/``off``, ``explain``); the others need a global admin (``admins:``).
    ``fronts``: where it is reachable.
    ``usage``: the chat form after the name (``get|set|del PATH [VALUE]``);
    ``usage_error``: what a missing required argument answers (default ``usage: NAME USAGE``).
    ``description``: the CLI's ``NAME --help`` text (default: ``help``).
    ``json_help``: the CLI gets ``--json`` (with this help), printing ``Result.data``.
    ``quiet``: the CLI logs errors only unless a level or a log file is asked for (a dry
    run's expected warnings would be noise).
    """

    name: str
    help: str
    run: Callable[[Invocation], Awaitable[Result]]
    args: tuple[Arg, ...] = ()
    needs: Literal["app", "daemon", "settings"] = "app"
    admin: bool = True
    chat_admin: bool = False
    fronts: frozenset[str] = ALL_FRONTS
    usage: str = ""
    usage_error: str = ""
    description: str = ""
    json_help: str = ""
    quiet: bool = False

    def args_for(self, front: str) -> tuple[Arg, ...]:
        """The arguments that exist on ``front``."""
        return tuple(a for a in self.args if offered(a.fronts, front))

    def offered_on(self, front: str) -> bool:
        """Whether the command is reachable from ``front``."""
        return offered(self.fronts, front)

    @property
    def synopsis(self) -> str:
        """``name usage`` as ``.tmy help`` lists it."""
        return f"{self.name} {self.usage}".strip()

    @property
    def misuse(self) -> str:
        """The answer to a missing required argument."""
        return self.usage_error or f"usage: {self.synopsis}"


def parse_words(command: Command, text: str, front: str = "chat") -> dict[str, Any]:
    """The arguments of ``command`` from a line as typed in chat.

    The flags ``front`` offers (``--dry-run``, ``--target X``, ``--target=X``) are taken
    out wherever they stand; the other words fill the positionals of ``front`` in order;
    a ``rest`` positional takes the remainder of the line. A missing required positional
    is a CommandError with the usage; words beyond the positionals are ignored, as the
    chat commands always did. A command with no chat flags reads its line verbatim.
    """
    args = {a.name: a.empty for a in command.args_for(front)}
    positionals = [a for a in command.args_for(front) if not a.flag]
    flags = {a.option: a for a in command.args_for(front) if a.flag}
    remaining = _take_flags(text.strip(), flags, args, command) if flags else text.strip()
    for arg in positionals:
        if not remaining:
            if arg.required:
                raise CommandError(command.misuse)
            break
        if arg.rest:
            args[arg.name] = remaining
            break
        parts = remaining.split(maxsplit=1)
        args[arg.name] = parts[0]
        remaining = parts[1].strip() if len(parts) > 1 else ""
    return args


def _take_flags(text: str, flags: dict[str, Arg], args: dict[str, Any], command: Command) -> str:
    """Set the flags found among ``text``'s words in ``args``; the other words, re-joined."""
    words, kept = text.split(), []
    while words:
        word = words.pop(0)
        option, eq, value = word.partition("=")
        arg = flags.get(option)
        if arg is None:
            kept.append(word)
        elif not arg.takes_value:
            args[arg.name] = True
        elif eq:
            args[arg.name] = value
        elif words:
            args[arg.name] = words.pop(0)
        else:
            raise CommandError(f"{option} needs a value; {command.misuse}")
    return " ".join(kept)


def args_by_name(command: Command, given: Any, front: str = "http") -> dict[str, Any]:
    """Arguments given by name (HTTP ``{"args": …}``, a console form) checked against the
    command's arguments on ``front``, defaults filled; CommandError for misuse.

    A switch takes true or false; any other value is text (a number is taken as its
    text); a value among ``choices`` must be one of them.
    """
    if not isinstance(given, Mapping):
        raise CommandError("'args' must be a JSON object of argument names and values")
    known = {a.name: a for a in command.args_for(front)}
    unknown = sorted(set(given) - set(known))
    if unknown:
        names = ", ".join(known) or "none"
        raise CommandError(f"{command.name} has no argument {unknown[0]!r} (it takes: {names})")
    return {name: _by_name(command, arg, given.get(name)) for name, arg in known.items()}


def _by_name(command: Command, arg: Arg, value: Any) -> Any:
    if value is None:
        if arg.required and not arg.flag:
            raise CommandError(f"{command.misuse} ('{arg.name}' is required)")
        return arg.empty
    if arg.flag and not arg.takes_value:
        if not isinstance(value, bool):
            raise CommandError(f"'{arg.name}' is true or false")
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise CommandError(f"'{arg.name}' must be text")
    if arg.choices is not None and value not in arg.choices:
        raise CommandError(f"'{arg.name}' is one of {', '.join(arg.choices)}")
    return value


def command_table(extensions: Iterable[ExtensionLike]) -> dict[str, Command]:
    """Name -> Command over ``extensions`` (``Extension.commands``), in their order."""
    table: dict[str, Command] = {}
    for extension in extensions:
        for command in extension.commands:
            table.setdefault(command.name, command)
    return table


def jsonable(value: Any) -> Any:
    """A value as JSON can hold it: bytes decoded, anything odd as its repr, huge ints as text.

    For ``Result.data`` built from step inputs and results (``ask --json``, ``explain --json``).
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is None or isinstance(value, (str, bool, float)):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 64 else str(value)
    return repr(value)
