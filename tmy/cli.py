"""``python run.py …`` / ``tmy …``: serve, chat, ask, check, vars, cron, reload.

Common options work before or after the command: ``--config``, ``--rules``,
``--store``, ``--user``, ``--user-name``, ``--chat``, ``--platform``,
``--log-level`` (each has a ``TMY_*`` environment twin). Exit codes: 0 ok, 1 the
command failed (rule errors, a failed run with ``ask``), 2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from tmy import logs
from tmy.config import Settings, load_settings
from tmy.errors import ConfigError, RuleError, TmyError

# name -> (help, env var)
COMMON = {
    "config": (
        "config file; its relative paths are relative to its directory (default: "
        "./config/tmy.yaml, else the checkout's config/tmy.yaml)",
        "TMY_CONFIG",
    ),
    "rules": ("rules directory", "TMY_RULES"),
    "store": ("store URL: sqlite:///data/tmy.db or redis://host:6379/0", "TMY_STORE"),
    "user": ("user id for chat/ask/vars/explain (default: $USER, else console)", "TMY_USER"),
    "user-name": (
        "display name (USER_NAME) for chat/ask/explain (default: the user id)",
        "TMY_USER_NAME",
    ),
    "chat": ("chat id for chat/ask/vars (default: private chat)", "TMY_CHAT"),
    "platform": ("platform name for chat/ask/vars (default: console)", "TMY_PLATFORM"),
    "log-level": ("debug | info | warning | error", "TMY_LOG_LEVEL"),
}

# Extra subcommands: name -> (configure(subparser), run(args, settings) -> int[, help]).
# The --help line is the optional third element, else COMMAND_HELP[name], else the
# first sentence of the parser description configure() sets, else its docstring's.
COMMANDS: dict[str, Any] = {}
# The modules that add them when imported (after this module is loaded: they import it).
COMMAND_MODULES = (
    "tmy.app",
    "tmy.explain",
    "tmy.tracelog",
    "tmy.ruletests",
    "tmy.memory.autoinstall",
)
# One help line each for ``--help`` (the modules' own descriptions are longer).
COMMAND_HELP = {
    "ctx": "print the LLM request a message would send, without sending it",
    "explain": "why the bot answers a message (or not): matches, near misses, each step",
    "trace": "rebuild a past run from the JSON log (--follow tails it)",
    "test": "run the tests: of rules files; exit 1 when a case fails",
    "memory": "long-term memory: list, delete or export entries (list --dialog: summaries)",
}


def _common() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    for name, (help_, env) in COMMON.items():
        parent.add_argument(f"--{name}", default=argparse.SUPPRESS, help=f"{help_} [{env}]")
    return parent


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="tmy", parents=[common], description="tmy: a chat-bot daemon driven by YAML rules."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("serve", parents=[common], help="run the daemon (default)")
    p.add_argument("--http", metavar="HOST:PORT", help="where the HTTP adapter listens")
    p.add_argument("--no-console", action="store_true", help="no console adapter even on a TTY")
    sub.add_parser("chat", parents=[common], help="talk to the bot as one user (a REPL)")
    p = sub.add_parser("ask", parents=[common], help="send one message, print the reply")
    p.add_argument("text", help="the message")
    p.add_argument(
        "--json", action="store_true", help="print {rule, answer, error, trace_id, steps} as JSON"
    )
    p = sub.add_parser("check", parents=[common], help="validate the rules; exit 1 on any error")
    p.add_argument("path", nargs="?", help="rules directory or file (default: --rules)")
    p = sub.add_parser("vars", parents=[common], help="list / get / set / del persistent variables")
    p.add_argument("action", choices=["list", "get", "set", "del"])
    p.add_argument("name", nargs="?", help="variable name (or path for get)")
    p.add_argument("value", nargs="?", help="for set: JSON, or a plain string")
    p.add_argument(
        "--force",
        action="store_true",
        help="set: store VALUE even when its type differs from the declared default's",
    )
    p = sub.add_parser("cron", parents=[common], help="scheduled rules: next fire times, last runs")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p = sub.add_parser("reload", parents=[common], help="make the running daemon reload its rules")
    p.add_argument("--url", help="the daemon's listener (default: from adapters.http.listen)")
    p.add_argument("--key", help="API key for the listener [TMY_API_KEY]")
    import importlib

    for module in COMMAND_MODULES:  # installs extensions, which add their commands
        importlib.import_module(module)
    for name, entry in COMMANDS.items():
        configure = entry[0]
        configure(sub.add_parser(name, parents=[common], help=_command_help(name, entry)))
    return parser


def _first_sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    for end in (". ", "; "):
        text = text.split(end, 1)[0]
    return text.rstrip(".")


def _command_help(name: str, entry: tuple[Any, ...]) -> str:
    """The one ``--help`` line of an extension command (never empty: it must be listed)."""
    if len(entry) > 2 and entry[2]:
        return str(entry[2])
    if name in COMMAND_HELP:
        return COMMAND_HELP[name]
    probe = argparse.ArgumentParser(add_help=False)  # configure() only adds arguments
    entry[0](probe)
    return (
        _first_sentence(probe.description)
        or _first_sentence(entry[0].__doc__)
        or f"the {name} command"
    )


def _opt(args: argparse.Namespace, name: str) -> Any:
    value = getattr(args, name.replace("-", "_"), None)
    if value is None:
        value = os.environ.get(COMMON[name][1]) or None
    return value


def settings_from(args: argparse.Namespace) -> Settings:
    return load_settings(
        _opt(args, "config"),
        rules=_opt(args, "rules"),
        store=_opt(args, "store"),
        log_level=_opt(args, "log-level"),
    )


def identity(args: argparse.Namespace) -> dict[str, str]:
    who = {
        "user": _opt(args, "user") or os.environ.get("USER") or "console",
        "chat": _opt(args, "chat") or "",
        "platform": _opt(args, "platform") or "console",
    }
    name = _opt(args, "user-name")
    if name:
        who["user_name"] = name
    return who


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = args.command or "serve"
    try:
        settings = settings_from(args)
        if command == "serve":
            if getattr(args, "http", None):
                settings = settings.with_(http_listen=args.http, http_enabled=True)
            logs.configure(settings.log_level, settings.log_file or None, fmt=settings.log_format)
            from tmy.adapters.listener import raise_open_file_limit
            from tmy.app import serve

            # room for connections, store sockets and outbound steps; both limits logged
            logs.get_logger("tmy").info("daemon.open_files", **raise_open_file_limit())

            if getattr(args, "no_console", False):
                settings = settings.with_(console=False)
            asyncio.run(serve(settings))
            return 0
        quiet = _opt(args, "log-level") is None
        logs.configure(
            "warning" if quiet and not settings.log_file else settings.log_level,
            settings.log_file or None,
            fmt="json" if settings.log_format == "auto" else settings.log_format,
        )
        if command == "check":
            return cmd_check(settings, args.path)
        if command == "ask":
            return asyncio.run(cmd_ask(settings, args.text, args.json, identity(args)))
        if command == "chat":
            return asyncio.run(cmd_chat(settings, identity(args)))
        if command == "vars":
            return asyncio.run(cmd_vars(settings, args, identity(args)))
        if command == "cron":
            return asyncio.run(cmd_cron(settings, args.json))
        if command == "reload":
            return cmd_reload(settings, args.url, args.key)
        return COMMANDS[command][1](args, settings)
    except RuleError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (ConfigError, TmyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def cmd_check(settings: Settings, path: str | None) -> int:
    from tmy.app import build_registry
    from tmy.rulebook.loader import load_rulebook

    root = Path(path) if path else settings.rules
    rulebook = load_rulebook(root, build_registry(settings), store_url=settings.store)
    for warning in rulebook.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    triggers = sum(len(r.triggers) for r in rulebook.rules)
    print(
        f"ok: {len(rulebook.rules)} rules, {triggers} triggers, "
        f"{len(rulebook.variables)} variables in {len(rulebook.files)} files"
    )
    for line in rulebook.atomic_report:
        print(f"atomic: {line}")
    return 0


async def cmd_ask(settings: Settings, text: str, as_json: bool, who: dict[str, str]) -> int:
    from tmy.app import App
    from tmy.message import Message

    async with App(settings.with_(console=False, http_enabled=False)) as app:
        assert app.engine is not None
        reply = await app.engine.handle(Message(text, **who))
    if as_json:
        print(json.dumps(jsonable(reply.as_dict(steps=True)), ensure_ascii=False, indent=2))
    else:
        if reply.rule is None and not reply.text:  # (an admin command answers with no rule)
            print(f"(no reply: {reply.reason or 'no rule matched'})", file=sys.stderr)
        if reply.error:
            print(f"error: {reply.error}", file=sys.stderr)
        if reply.text:
            print(reply.text)
    return 1 if reply.error else 0


def jsonable(value: Any) -> Any:
    """Step inputs/results as JSON: bytes decoded, anything odd as its repr, huge ints as text
    (for ``ask --json`` and ``explain --json``)."""
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


async def cmd_chat(settings: Settings, who: dict[str, str]) -> int:
    from tmy.adapters.console import ConsoleAdapter
    from tmy.app import App

    async with App(settings) as app:
        assert app.engine is not None
        print(
            f"tmy chat as {who['user']} — {len(app.engine.rulebook.rules)} rules. "
            "Ctrl-D or /quit to leave.",
            file=sys.stderr,
        )
        console = ConsoleAdapter(**who)
        await console.start(app.engine.handle)
        await console.done.wait()
    return 0


async def cmd_vars(settings: Settings, args: argparse.Namespace, who: dict[str, str]) -> int:
    from tmy.admin import CommandError, vars_command
    from tmy.app import App
    from tmy.message import Message

    async with App(settings.with_(console=False, http_enabled=False)) as app:
        assert app.engine is not None and app.store is not None
        try:
            out = await vars_command(
                app.engine.rulebook,
                app.store,
                Message("", **who),
                args.action,
                args.name,
                args.value,
                force=args.force,
            )
        except CommandError as exc:
            raise ConfigError(str(exc)) from None
        if out:
            print(out)
    return 0


async def cmd_cron(settings: Settings, as_json: bool) -> int:
    from tmy.app import App
    from tmy.cron import format_report, jobs_report

    async with App(settings.with_(console=False, http_enabled=False)) as app:
        assert app.engine is not None and app.store is not None
        jobs = await jobs_report(app.engine.rulebook, app.store, settings.timezone)
    print(json.dumps(jobs, ensure_ascii=False, indent=2) if as_json else format_report(jobs))
    return 0


def cmd_reload(settings: Settings, url: str | None, key: str | None) -> int:
    """Ask the running daemon (on its HTTP listener) to reload; print the outcome."""
    import httpx

    from tmy.adapters.http import parse_listen

    if url is None:
        host, port = parse_listen(settings.http_listen)
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    key = key or os.environ.get("TMY_API_KEY") or next(iter(settings.http_api_keys), None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        # a JSON body: the listener takes /admin/reload only as application/json, which a
        # web page cannot send cross-site without a CORS preflight
        response = httpx.post(
            f"{url.rstrip('/')}/admin/reload", json={}, headers=headers, timeout=120
        )
    except httpx.HTTPError as exc:
        print(f"error: no daemon answered at {url}: {exc}", file=sys.stderr)
        return 2
    try:
        result = response.json()
    except ValueError:
        print(
            f"error: {url} answered {response.status_code}: {response.text[:200]}", file=sys.stderr
        )
        return 2
    if response.status_code == 401:
        print(f"error: {result.get('error')} (--key, or TMY_API_KEY)", file=sys.stderr)
        return 2
    if result.get("ok"):
        print(f"reloaded: {result['rules']} rules from {result['files']} files ({result['ms']} ms)")
        for warning in result.get("warnings", []):
            print(f"warning: {warning}")
        return 0
    print("reload failed, the running rules are unchanged:", file=sys.stderr)
    for line in result.get("errors") or [result.get("error", "unknown error")]:
        print(line, file=sys.stderr)
    return 1
