"""Admin commands in chat: ``.tmy reload``, ``.tmy off``, ``.tmy vars get …``.

A message that starts with the prefix (``admin_prefix``, default ``.tmy``) is a
command and never reaches the rules, on every adapter (``/v1/messages``
included). Only admins (``admins:``, matched per platform) get an answer;
anyone else gets no reply at all and a ``admin.refused`` warning is logged, so
the bot does not even confirm that the command exists.

``on``/``off`` silence the bot in the chat the command is sent in: the switch
is stored (``off/<platform>/<chat>``), so every daemon on the store honours it;
each daemon caches it for :data:`OFF_CACHE_SECONDS`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tmy.engine.variables import Variables, escape_key_part, variable_key
from tmy.errors import TmyError
from tmy.logs import get_logger, preview
from tmy.message import Message
from tmy.store.base import MISSING, Store
from tmy.values.paths import parse_path

log = get_logger("tmy.admin")

DEFAULT_PREFIX = ".tmy"
OFF_CACHE_SECONDS = 2.0
_OFF_CACHE_MAX = 10_000
HELP = (
    "commands: reload | rules [ID] | vars get|set|del PATH [VALUE] [--force] | on | off | cron | "
    "budget [USER] | trace ID | explain TEXT | memory [USER] | memory del ID | "
    "dialog [USER|clear]"
)


class CommandError(TmyError):
    """A command used wrongly: the text goes back to the admin."""


def off_key(message: Message) -> str:
    return f"off/{escape_key_part(message.platform)}/{escape_key_part(message.chat)}"


class ChatSwitch:
    """Which chats are switched off, read through a short per-daemon cache."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple[str, str], tuple[bool, float]] = {}

    async def is_off(self, message: Message) -> bool:
        now = time.monotonic()
        hit = self._cache.get((message.platform, message.chat))
        if hit is not None and hit[1] > now:
            return hit[0]
        key = off_key(message)
        try:
            off = await self.store.get(key) is not MISSING
        except TmyError as exc:  # the switch must not silence the bot when the store stalls
            log.warning("chat_switch.lookup_failed", error=str(exc))
            return False
        if len(self._cache) >= _OFF_CACHE_MAX:
            self._cache.clear()
        self._cache[(message.platform, message.chat)] = (off, now + OFF_CACHE_SECONDS)
        return off

    async def set(self, message: Message, off: bool) -> None:
        key = off_key(message)
        if off:
            await self.store.set(key, {"by": f"{message.platform}:{message.user}"})
        else:
            await self.store.delete(key)
        self._cache[(message.platform, message.chat)] = (off, time.monotonic() + OFF_CACHE_SECONDS)


_TYPE_NAMES = {list: "list", dict: "dict", bool: "bool", int: "int", float: "float", str: "str"}
_FORCE = "--force"


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


def _split_force(value: str | None, force: bool) -> tuple[str | None, bool]:
    """A trailing word ``--force`` (the admin command's form) taken off the value."""
    if value is not None and (value == _FORCE or value.endswith(" " + _FORCE)):
        value = value[: -len(_FORCE)].rstrip() or None
        force = True
    return value, force


def _typed_value(name: str, default: Any, text: str, force: bool) -> Any:
    """VALUE as JSON, or as plain text, whichever has the default's type; CommandError if none.

    ``vars set greeting 42`` stores the text "42" when greeting's default is a string;
    a value of another type than the default is refused unless ``force``.
    """
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = text
    if force:
        return parsed
    declared = _type_name(default)
    for candidate in (parsed, text):
        if _fits(declared, candidate):
            return candidate
    got = _type_name(parsed)
    shown = preview(text, 60)
    article = "an" if got[0] in "aeiou" else "a"
    want = {
        "list": 'a JSON list, e.g. ["a", "b"]',
        "dict": 'a JSON object, e.g. {"key": "value"}',
        "bool": "true or false",
        "int": "a whole number, e.g. 3",
        "float": "a number, e.g. 2.5",
    }.get(declared, "a value of that type")
    raise CommandError(
        f"{name} is declared as {declared} (default {json.dumps(default, ensure_ascii=False)}), "
        f"but {shown!r} is {article} {got}: give {want}, or add --force to store it anyway"
    )


async def vars_command(
    rulebook: Any,
    store: Store,
    who: Message,
    action: str,
    name: str | None,
    value: str | None,
    force: bool = False,
) -> str:
    """``vars list|get|set|del`` for the CLI and the admin command: the text to show.

    ``set`` of a whole variable checks VALUE against the type of its declared default
    (list, dict, int, float, str, bool; an int is fine where a float is declared) and
    refuses a mismatch unless ``force`` — or a trailing word ``--force`` in VALUE, the
    form the admin command ``.tmy vars set NAME VALUE --force`` passes.
    """
    declared = rulebook.variables
    value, force = _split_force(value, force)
    if action == "list":
        lines = []
        for var, decl in sorted(declared.items()):
            got = await store.get(variable_key(decl, who))
            shown = (
                "(default) " + json.dumps(decl.default, ensure_ascii=False)
                if got is MISSING
                else json.dumps(got, ensure_ascii=False)
            )
            lines.append(f"{var}\t{decl.scope}\t{shown}")
        return "\n".join(lines)
    if action not in ("get", "set", "del"):
        raise CommandError("vars takes list, get, set or del")
    if not name:
        raise CommandError(f"vars {action} needs a variable name")
    path = parse_path(name)
    decl = declared.get(path.root)
    if decl is None:
        known = ", ".join(sorted(declared)) or "none"
        raise CommandError(f"{path.root!r} is not a declared variable (declared: {known})")
    key = variable_key(decl, who)
    if action == "get":
        got = await Variables({}, declared, store, who).read(path)
        return json.dumps(got, ensure_ascii=False, indent=2)
    if action == "del":
        if path.segments:
            raise CommandError(
                f"vars del takes a variable name, not a position ({name!r}); "
                f"to change one position use: vars set {name} VALUE"
            )
        await store.delete(key)
        return f"{path.root} reset to its default"
    if value is None:
        raise CommandError("vars set needs a value (JSON, or a plain string)")
    if path.segments:  # one position inside: the default says nothing about its type
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
    else:
        parsed = _typed_value(path.root, decl.default, value, force)
    await Variables({}, declared, store, who, rulebook.locked_variables).write(path, parsed)
    return json.dumps(await store.get(key), ensure_ascii=False)


def describe_rules(rulebook: Any, rule_id: str | None) -> str:
    """``rules`` (one line a rule) or ``rules ID`` (one rule in detail)."""
    if not rule_id:
        lines = [f"{len(rulebook.rules)} rules in {len(rulebook.files)} files"]
        for rule in rulebook.rules[:50]:
            triggers = ", ".join(t.source for t in rule.triggers) or "(no trigger)"
            sched = " [scheduled]" if "schedule" in rule.extras else ""
            lines.append(f"{rule.id}: {preview(triggers, 80)}{sched}")
        if len(rulebook.rules) > 50:
            lines.append(f"… and {len(rulebook.rules) - 50} more (rules ID for one)")
        return "\n".join(lines)
    rule = rulebook.by_id.get(rule_id)
    if rule is None:
        raise CommandError(f"no rule {rule_id!r}")
    f = rule.filters
    lines = [
        f"{rule.id} ({rule.file}:{rule.line}), priority {rule.priority}",
        "triggers: " + (", ".join(t.source for t in rule.triggers) or "(none)"),
        "steps: " + " -> ".join(f"{s.uri} [{s.plugin}]" for s in rule.steps),
    ]
    if not f.is_open:
        lines.append(
            f"filters: platforms={sorted(f.platforms) if f.platforms else 'any'} "
            f"chats={sorted(f.chats) if f.chats else 'any'} private={f.private} "
            f"admin_only={f.admin_only} mention={f.mention}"
        )
    if rule.session:
        lines.append(f"session: {rule.session:g} s")
    if "schedule" in rule.extras:
        lines.append(f"schedule: {rule.extras['schedule'].describe()}")
    return "\n".join(lines)


class AdminCommands:
    """Parses and runs ``<prefix> <command> …`` for admins."""

    def __init__(
        self,
        app: Any,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self.app = app
        self.prefix = prefix
        self.switch = ChatSwitch(app.store)
        self.reload: Callable[[str], Awaitable[Any]] | None = None  # set by the App

    def is_command(self, text: str) -> bool:
        if not text.startswith(self.prefix):
            return False
        rest = text[len(self.prefix) :]
        return not rest or rest[0].isspace()

    async def run(self, message: Message, text: str) -> str | None:
        """The answer for an admin, or None (refused: no reply at all)."""
        if not message.is_admin:
            log.warning(
                "admin.refused",
                user=message.user,
                platform=message.platform,
                chat=message.chat,
                command=preview(text, 80),
            )
            return None
        words = text[len(self.prefix) :].split(maxsplit=1)
        name = words[0].lower() if words else "help"
        rest = words[1].strip() if len(words) > 1 else ""
        log.info("admin.command", command=name, user=message.user, platform=message.platform)
        try:
            return await self._dispatch(message, name, rest)
        except TmyError as exc:
            return f"error: {exc}"

    async def _dispatch(self, message: Message, name: str, rest: str) -> str:
        engine = self.app.engine
        store = self.app.store
        if name == "help":
            return HELP
        if name == "reload":
            if self.reload is None:
                raise CommandError("reload is not available here")
            result = await self.reload(f"admin {message.platform}:{message.user}")
            return result.summary()
        if name == "rules":
            return describe_rules(engine.rulebook, rest or None)
        if name == "vars":
            parts = rest.split(maxsplit=2)
            if not parts:
                raise CommandError("usage: vars get|set|del PATH [VALUE] (or vars list)")
            action = parts[0]
            path = parts[1] if len(parts) > 1 else None
            value = parts[2] if len(parts) > 2 else None
            return await vars_command(engine.rulebook, store, message, action, path, value) or "-"
        if name in ("on", "off"):
            await self.switch.set(message, name == "off")
            log.info("chat.switched", chat=message.chat, platform=message.platform, state=name)
            return (
                f"the bot is off in this chat ({message.chat}); '{self.prefix} on' turns it back on"
                if name == "off"
                else f"the bot is on in this chat ({message.chat})"
            )
        if name == "cron":
            from tmy.cron import format_report, jobs_report

            jobs = await jobs_report(engine.rulebook, store, self.app.settings.timezone)
            return format_report(jobs)
        if name == "budget":
            return await self._budget(message, rest or None)
        if name == "trace":
            if not rest:
                raise CommandError("usage: trace TRACE_ID")
            from tmy.tracelog import trace_reply

            return await trace_reply(self.app.settings.log_file, rest.split()[0])
        if name == "explain":
            if not rest:
                raise CommandError("usage: explain TEXT")
            from tmy.explain import explain_text

            return await explain_text(engine, message, rest)
        if name in ("memory", "dialog"):  # long-term memory (tmy/memory/admin.py)
            from tmy.memory.admin import command

            return await command(self.app, message, name, rest)
        raise CommandError(f"unknown command {name!r}; {HELP}")

    async def _budget(self, message: Message, user: str | None) -> str:
        from tmy.llm.usage import today, usage_of

        who = message if user is None else Message("", user=user, platform=message.platform)
        day = today(self.app.engine.tz)
        usage = await usage_of(self.app.store, who, day)
        return f"LLM usage on {day} for {who.platform}:{who.user}: " + json.dumps(
            usage, ensure_ascii=False, sort_keys=True
        )
