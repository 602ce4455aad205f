"""The command contract: arguments, permission, what it needs, and a two-form result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from tmy.errors import TmyError
from tmy.message import Message

Front = Literal["cli", "chat", "http"]
ALL_FRONTS: frozenset[str] = frozenset(("cli", "chat", "http"))


class CommandError(TmyError):
    """A command used wrongly: the text goes back to whoever ran it (exit 2 on the CLI)."""


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument, positional (``name``) or a flag (``--name``), the same on every front end.

    ``rest=True``: the positional takes the rest of the line as one text (``explain TEXT``).
    ``flag=True`` with ``takes_value=False`` is a boolean switch (``--json``, ``--force``).
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


@dataclass(frozen=True, slots=True)
class Result:
    """What a command produced: ``text`` for people, ``data`` (JSON-able) for programs."""

    text: str
    data: Any = None
    ok: bool = True
    exit_code: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "text": self.text, "data": self.data}


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a command: parsed arguments, who asked, from where, and the open app."""

    args: Mapping[str, Any]
    who: Message
    front: str
    app: Any  # tmy.app.App (typed Any here: commands sit below the app layer)


@dataclass(frozen=True, slots=True)
class Command:
    """An operator command (see :mod:`tmy.commands`).

    ``needs``: ``"app"`` (the store and rules open: most commands), ``"daemon"`` (a
    running daemon: ``reload``; the CLI asks the daemon over HTTP), ``"settings"``
    (nothing opened). ``admin``: chat and HTTP refuse it to non-admins (the CLI user
    is the operator). ``fronts``: where it is reachable.
    """

    name: str
    help: str
    run: Callable[[Invocation], Awaitable[Result]]
    args: tuple[Arg, ...] = ()
    needs: Literal["app", "daemon", "settings"] = "app"
    admin: bool = True
    fronts: frozenset[str] = ALL_FRONTS
    usage: str = ""
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
