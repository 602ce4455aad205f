"""The operator commands on the command line: argparse subcommands built from the registry.

Each :class:`~tmy.command.Command` becomes a subcommand with its CLI arguments
(``Arg``s whose fronts include "cli"), ``--json`` when it has a JSON form, and
``--url``/``--key`` when it runs in the daemon. The app is opened as the command
``needs``: ``app`` opens one (no console, no listener), ``settings`` none,
``daemon`` asks the running daemon over HTTP (``POST /admin/commands/{name}``;
``reload`` keeps the route it always used, ``POST /admin/reload``).

A command that posts to chats (:data:`DAEMON_FIRST`: ``cron fire``) is asked of the
running daemon first, because only the daemon has connected platform adapters; when
no daemon answers it runs here (a note on stderr says so).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tmy import logs
from tmy.adapters.http import parse_listen
from tmy.app import App
from tmy.cli.options import identity, option, sender
from tmy.command import Arg, Command, Invocation, Result
from tmy.commands.cron_fire import is_posting
from tmy.commands.reload import cli_text as reload_text
from tmy.config import Settings
from tmy.extension import Extension

DAEMON_FIRST: dict[str, Callable[[dict[str, Any]], bool]] = {"cron": is_posting}
"""Commands (by name) whose run, for the arguments given, posts to chats: asked of the
running daemon first (``--url``/``--key`` as for ``reload``), else run here."""


def add_commands(
    sub: Any, common: argparse.ArgumentParser, commands: Mapping[str, Command]
) -> None:
    """One subcommand per command reachable from the CLI."""
    for command in commands.values():
        if "cli" not in command.fronts:
            continue
        parser = sub.add_parser(
            command.name,
            parents=[common],
            help=command.help,
            description=command.description or command.help,
        )
        groups: dict[str, Any] = {}
        for arg in command.args_for("cli"):
            target = parser
            if arg.group is not None:
                if arg.group not in groups:
                    groups[arg.group] = parser.add_mutually_exclusive_group()
                target = groups[arg.group]
            _add_argument(target, arg)
        if command.json_help:
            parser.add_argument("--json", action="store_true", help=command.json_help)
        if command.needs == "daemon" or command.name in DAEMON_FIRST:
            parser.add_argument(
                "--url", help="the daemon's listener (default: from adapters.http.listen)"
            )
            parser.add_argument("--key", help="API key for the listener [TMY_API_KEY]")


def _add_argument(parser: Any, arg: Arg) -> None:
    if not arg.flag:
        parser.add_argument(
            arg.name,
            nargs=None if arg.required else "?",
            choices=arg.choices,
            default=arg.default,
            metavar=arg.metavar,
            help=arg.help or None,
        )
        return
    names = [arg.option] + ([arg.short] if arg.short else [])
    if not arg.takes_value:
        parser.add_argument(*names, dest=arg.name, action="store_true", help=arg.help or None)
        return
    parser.add_argument(
        *names,
        dest=arg.name,
        choices=arg.choices,
        default=arg.default,
        metavar=arg.metavar,
        help=arg.help or None,
    )


def _emit(line: str, stderr: bool = False) -> None:
    print(line, file=sys.stderr if stderr else sys.stdout, flush=True)


def _show(result: Result, as_json: bool) -> int:
    """Print ``result`` (JSON with ``--json``; text on stdout, or stderr when not ok)."""
    if as_json and result.data is not None:
        print(json.dumps(result.data, ensure_ascii=False, indent=2, default=str))
    elif result.text:
        print(result.text, file=sys.stdout if result.ok else sys.stderr)
    return result.code


def run_command(
    command: Command,
    args: argparse.Namespace,
    settings: Settings,
    commands: Mapping[str, Command],
    extensions: Sequence[Extension],
) -> int:
    """Run ``command`` as parsed from the command line; the exit status."""
    values = {a.name: getattr(args, a.name, a.empty) for a in command.args_for("cli")}
    if command.json_help:
        values["json"] = bool(getattr(args, "json", False))
    if command.quiet and not option(args, "log-level") and not settings.log_file:
        logs.configure("error")  # the command's expected warnings would only be noise
    if command.needs == "daemon" or _posts_through_daemon(command, values, args):
        sent = {a.name: values[a.name] for a in command.args_for("http") if a.name in values}
        body = {"args": sent, **identity(args)}
        as_json = bool(command.json_help) and values.get("json", False)
        first = command.needs != "daemon"  # else the daemon is the only place it runs
        code = ask_daemon(command.name, body, settings, args.url, args.key, fallback=first,
                          as_json=as_json)  # fmt: skip
        if code is not None:
            return code
    inv = Invocation(values, sender(args), "cli", None, settings, emit=_emit, commands=commands)
    if command.needs == "settings":
        result = _run(command.run(inv))
    else:
        result = _run(_in_app(command, inv, extensions))
    return _show(result, bool(command.json_help) and values.get("json", False))


def _posts_through_daemon(
    command: Command, values: dict[str, Any], args: argparse.Namespace
) -> bool:
    """Whether this run posts to chats and is asked of the running daemon first.

    ``--rules``/``--store`` on the command line name rules or a store of this
    invocation's own, which the daemon at the listener does not serve: a fire then
    runs here, on those (as its ``--dry-run`` does), unless ``--url`` names a daemon.
    """
    posts = DAEMON_FIRST.get(command.name)
    if posts is None or not posts(values):
        return False
    own = [f"--{name}" for name in ("rules", "store") if getattr(args, name, None)]
    if own and not getattr(args, "url", None):
        print(
            f"note: {' and '.join(own)} given: {command.name} runs in this process on them, "
            "not in the daemon at the listener (--url asks a daemon)",
            file=sys.stderr,
        )
        return False
    return True


def _run(coro: Coroutine[Any, Any, Result]) -> Result:
    """``asyncio.run(coro)``; in a thread of its own when called from a running event loop
    (a program embedding the CLI, a test calling ``main`` from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _in_app(command: Command, inv: Invocation, extensions: Sequence[Extension]) -> Result:
    settings = inv.settings.with_(console=False, http_enabled=False)
    async with App(settings, extensions=extensions) as app:
        inv = Invocation(
            inv.args, inv.who, "cli", app, inv.settings, emit=inv.emit, commands=inv.commands
        )
        return await command.run(inv)


def daemon_url(settings: Settings) -> str:
    """Where the running daemon listens (a wildcard listen address reached on loopback)."""
    host, port = parse_listen(settings.http_listen)
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def ask_daemon(
    name: str,
    body: Mapping[str, Any],
    settings: Settings,
    url: str | None,
    key: str | None,
    *,
    fallback: bool = False,
    as_json: bool = False,
) -> int | None:
    """Run command ``name`` in the running daemon (its HTTP listener); print the outcome.

    ``body`` is what ``POST /admin/commands/{name}`` takes: ``args`` and who asks.
    ``reload`` posts to ``POST /admin/reload`` instead, as it always has: this CLI then
    still reloads a daemon of an older version, which logs the reload as it did.
    ``fallback``: when no daemon answers (nothing listens there, or the config's
    listener is off and no ``url`` is given), say so on stderr and return None: the
    caller runs the command itself. ``as_json``: print the answer's ``data``.
    """
    import httpx  # deferred: httpx is ~50 ms of every CLI start

    if fallback and url is None and not settings.http_enabled:
        print(
            "note: adapters.http is off in the config, so no daemon can be asked; running it here",
            file=sys.stderr,
        )
        return None
    url = url or daemon_url(settings)
    key = key or os.environ.get("TMY_API_KEY") or next(iter(settings.http_api_keys), None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    legacy = name == "reload"
    path = "/admin/reload" if legacy else f"/admin/commands/{name}"
    try:
        # a JSON body: the listener takes /admin/… only as application/json, which a
        # web page cannot send cross-site without a CORS preflight
        response = httpx.post(
            f"{url.rstrip('/')}{path}",
            json={} if legacy else dict(body),
            headers=headers,
            timeout=httpx.Timeout(120, connect=5),
        )
    except httpx.ConnectError as exc:
        if fallback:
            print(f"note: no daemon answered at {url} ({exc}); running it here", file=sys.stderr)
            return None
        print(f"error: no daemon answered at {url}: {exc}", file=sys.stderr)
        return 2
    except httpx.HTTPError as exc:
        print(f"error: no daemon answered at {url}: {exc}", file=sys.stderr)
        return 2
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if legacy and isinstance(answer, dict) and response.status_code != 401:
        answer = {"ok": bool(answer.get("ok")), "text": reload_text(answer)}
    if not isinstance(answer, dict) or (response.status_code != 401 and "text" not in answer):
        shown = response.text[:200]
        print(f"error: {url} answered {response.status_code}: {shown}", file=sys.stderr)
        return 2
    if response.status_code == 401:
        print(f"error: {answer.get('error')} (--key, or TMY_API_KEY)", file=sys.stderr)
        return 2
    ok = bool(answer.get("ok"))
    if as_json and answer.get("data") is not None:
        print(json.dumps(answer["data"], ensure_ascii=False, indent=2, default=str))
    elif answer.get("text"):
        print(answer["text"], file=sys.stdout if ok else sys.stderr)
    if response.status_code == 400:
        return 2
    return 0 if ok else 1
