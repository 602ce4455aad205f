"""Operator commands, each defined once and reached from every front end.

A :class:`~tmy.command.Command` states its arguments, who may run it and
what it needs; it returns a :class:`~tmy.command.Result` that renders as
text (the CLI, ``.tmy`` in chat) and as JSON (the HTTP admin API, the web
console). The front ends — :mod:`tmy.cli`, :mod:`tmy.commands.chat`,
:mod:`tmy.commands.http` — only parse and render.

:data:`CORE` is the extension carrying the core commands; the LLM and memory
extensions carry theirs (``ctx``, ``budget``, ``memory``, ``dialog``).
"""

from __future__ import annotations

from tmy.commands.cron import CRON
from tmy.commands.explain import EXPLAIN
from tmy.commands.help import HELP
from tmy.commands.reload import RELOAD
from tmy.commands.rules import RULES
from tmy.commands.switch import OFF, ON
from tmy.commands.trace import TRACE
from tmy.commands.variables import VARS
from tmy.extension import Extension

CORE = Extension(
    name="core",
    commands=(HELP, RELOAD, RULES, VARS, ON, OFF, CRON, TRACE, EXPLAIN),
    doc="the core operator commands: help, reload, rules, vars, on, off, cron, trace, explain",
)

__all__ = ["CORE"]
