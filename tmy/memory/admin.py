"""TRANSITION(A2): ``.tmy memory`` / ``.tmy dialog`` for tmy/admin.py until B's chat front end
(tmy.commands.chat) runs the commands of :mod:`tmy.memory.commands` itself. Deleted then."""

from __future__ import annotations

from typing import Any

from tmy.command import Invocation, parse_words
from tmy.memory.commands import DIALOG, MEMORY
from tmy.message import Message


async def command(app: Any, message: Message, name: str, rest: str) -> str:
    chosen = MEMORY if name == "memory" else DIALOG
    args = parse_words(chosen, rest)
    inv = Invocation(args, message, "chat", app, app.settings, compact=True)  # type: ignore[call-arg]
    return (await chosen.run(inv)).text
