"""``vars list|get|set|del NAME [VALUE] [--force]``, in chat ``.tmy vars get|set|del PATH [VALUE]``.

The same command on every front end. ``set`` of a whole variable checks VALUE
against the type of its declared default (list, dict, int, float, str, bool;
an int is fine where a float is declared) and refuses a mismatch unless
``--force`` — or a trailing word ``--force`` in VALUE, the form chat uses
(``.tmy vars set NAME VALUE --force``: in chat VALUE is the rest of the line).
The text is the same everywhere, except that chat shows ``-`` for an empty answer
(a message cannot be empty) where the CLI prints nothing.
"""

from __future__ import annotations

import json
from typing import Any

from tmy.command import Arg, Command, CommandError, Invocation, Result
from tmy.engine.keys import variable_key
from tmy.engine.variables import Variables
from tmy.logs import preview
from tmy.message import Message
from tmy.store.base import MISSING, Store
from tmy.values.paths import parse_path

ACTIONS = ("list", "get", "set", "del")
USAGE = "usage: vars get|set|del PATH [VALUE] (or vars list)"
_TYPE_NAMES = {list: "list", dict: "dict", bool: "bool", int: "int", float: "float", str: "str"}
_FORCE = "--force"
_WANT = {
    "list": 'a JSON list, e.g. ["a", "b"]',
    "dict": 'a JSON object, e.g. {"key": "value"}',
    "bool": "true or false",
    "int": "a whole number, e.g. 3",
    "float": "a number, e.g. 2.5",
}


def _type_name(value: Any) -> str:
    """The JSON-ish type word of ``value``: list, dict, bool, int, float, str (or null)."""
    if value is None:
        return "null"
    for kind, word in _TYPE_NAMES.items():  # bool before int: True is not a number here
        if isinstance(value, kind):
            return word
    return type(value).__name__


def _fits(declared: str, value: Any) -> bool:
    """Whether ``value`` may replace a variable whose default is a ``declared`` (int for float)."""
    got = _type_name(value)
    return declared in ("null", got) or (declared == "float" and got == "int")


def split_force(value: str | None, force: bool) -> tuple[str | None, bool]:
    """A trailing word ``--force`` (the chat form) taken off the value."""
    if value is not None and (value == _FORCE or value.endswith(" " + _FORCE)):
        value = value[: -len(_FORCE)].rstrip() or None
        force = True
    return value, force


def _loose(text: str) -> Any:
    """``text`` as JSON, or as itself when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def typed_value(name: str, default: Any, text: str, force: bool) -> Any:
    """VALUE as JSON, or as plain text, whichever has the default's type; CommandError if none.

    ``vars set greeting 42`` stores the text "42" when greeting's default is a string;
    a value of another type than the default is refused unless ``force``.
    """
    parsed = _loose(text)
    if force:
        return parsed
    declared = _type_name(default)
    for candidate in (parsed, text):
        if _fits(declared, candidate):
            return candidate
    got = _type_name(parsed)
    article = "an" if got[0] in "aeiou" else "a"
    raise CommandError(
        f"{name} is declared as {declared} (default {json.dumps(default, ensure_ascii=False)}), "
        f"but {preview(text, 60)!r} is {article} {got}: give "
        f"{_WANT.get(declared, 'a value of that type')}, or add --force to store it anyway"
    )


async def list_vars(rulebook: Any, store: Store, who: Message) -> Result:
    """Every declared variable: name, scope and ``who``'s value (or the default)."""
    lines, data = [], {}
    for var, decl in sorted(rulebook.variables.items()):
        got = await store.get(variable_key(decl, who))
        value = decl.default if got is MISSING else got
        shown = json.dumps(value, ensure_ascii=False)
        lines.append(f"{var}\t{decl.scope}\t{'(default) ' if got is MISSING else ''}{shown}")
        data[var] = {"scope": decl.scope, "value": value, "default": got is MISSING}
    return Result("\n".join(lines), data)


async def vars_command(
    rulebook: Any,
    store: Store,
    who: Message,
    action: str | None,
    name: str | None,
    value: str | None,
    force: bool = False,
) -> Result:
    """``vars list|get|set|del`` on ``rulebook``'s variables, as ``who`` sees them."""
    value, force = split_force(value, force)
    if action == "list":
        return await list_vars(rulebook, store, who)
    if action is None:
        raise CommandError(USAGE)
    if action not in ACTIONS:
        raise CommandError("vars takes list, get, set or del")
    if not name:
        raise CommandError(f"vars {action} needs a variable name")
    declared = rulebook.variables
    path = parse_path(name)
    decl = declared.get(path.root)
    if decl is None:
        known = ", ".join(sorted(declared)) or "none"
        raise CommandError(f"{path.root!r} is not a declared variable (declared: {known})")
    key = variable_key(decl, who)
    if action == "get":
        got = await Variables({}, declared, store, who).read(path)
        return Result(json.dumps(got, ensure_ascii=False, indent=2), got)
    if action == "del":
        if path.segments:
            raise CommandError(
                f"vars del takes a variable name, not a position ({name!r}); "
                f"to change one position use: vars set {name} VALUE"
            )
        await store.delete(key)
        await Variables({}, declared, store, who).sync_ranks([path.root])  # off its board
        return Result(f"{path.root} reset to its default", {"reset": path.root})
    if value is None:
        raise CommandError("vars set needs a value (JSON, or a plain string)")
    # one position inside: the default says nothing about its type
    parsed = _loose(value) if path.segments else typed_value(path.root, decl.default, value, force)
    await Variables({}, declared, store, who, rulebook.locked_variables).write(path, parsed)
    stored = await store.get(key)
    return Result(json.dumps(stored, ensure_ascii=False), stored)


async def _run(inv: Invocation) -> Result:
    a = inv.args
    return await vars_command(
        inv.app.engine.rulebook,
        inv.app.store,
        inv.who,
        a["action"],
        a["name"],
        a["value"],
        force=bool(a.get("force")),
    )


VARS = Command(
    name="vars",
    help="list / get / set / del persistent variables",
    run=_run,
    usage="get|set|del PATH [VALUE] [--force]",
    usage_error=USAGE,
    args=(
        Arg("action", choices=ACTIONS),
        Arg("name", "variable name (or path for get)", required=False),
        Arg("value", "for set: JSON, or a plain string", required=False, rest=True),
        Arg(
            "force",
            "set: store VALUE even when its type differs from the declared default's",
            flag=True,
            takes_value=False,
            fronts=frozenset(("cli", "http")),
        ),
    ),
)
