"""Operator commands, each defined once and reached from every front end.

A :class:`~tmy.command.Command` states its arguments, who may run it and
what it needs; it returns a :class:`~tmy.command.Result` that renders as
text (the CLI, ``.tmy`` in chat) and as JSON (the HTTP admin API, the web
console). The front ends — :mod:`tmy.cli`, :mod:`tmy.commands.chat`,
:mod:`tmy.commands.http` — only parse and render.
"""
