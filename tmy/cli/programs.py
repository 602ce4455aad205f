"""The CLI-only programs: ``serve``, ``chat``, ``ask``, ``check``, ``test`` and ``mcp-serve``.

They are not operator commands (nothing to run in chat or over HTTP): each
is a process of its own — the daemon, a REPL, one message, a rules check, the
rules' own tests, the rules marked ``tool:`` served to an MCP client over stdio.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tmy import logs
from tmy.adapters.console import ConsoleAdapter
from tmy.adapters.listener import raise_open_file_limit
from tmy.app import App, build_registry, serve
from tmy.command import jsonable
from tmy.commands.lint import rule_warnings
from tmy.config import Settings, setting_error
from tmy.config.console import missing_password
from tmy.daemon import disabled_adapter
from tmy.engine.replies import error_reply_template
from tmy.extension import Extension
from tmy.mcpserve.stdio import serve_stdio
from tmy.mcpserve.tools import PLATFORM as MCP_PLATFORM
from tmy.mcpserve.tools import Caller
from tmy.message import Message, Reply
from tmy.rulebook.loader import load_rulebook
from tmy.ruletests import print_report, report_json, run_tests

TEST_HELP = (
    "Run the 'tests:' of rules files: each file's cases in order on a fresh temporary "
    "store, the LLM on the TESTONLY mock, outbound HTTP refused unless a case gives an "
    "'http:' canned response. Exit 0 all passed, 1 a case failed, 2 invalid rules or cases."
)


MCP_SERVE_HELP = (
    "Serve the rules marked 'tool:' as MCP tools over stdin/stdout, for an MCP client that "
    "starts this command (Claude Desktop, an IDE). The client speaks as --user (and --chat; "
    "PLATFORM is 'mcp' unless --platform says otherwise): a rule its filters do not admit "
    "is neither listed nor run. Logs go to stderr or the log file; stdout is the protocol."
)


ADMIN_HELP = (
    "the sender is an admin, whatever 'admins:' says: admin_only rules answer, .tmy commands run"
)


def add_programs(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """The subparsers of serve, chat, ask, check, test and mcp-serve."""
    p = sub.add_parser("serve", parents=[common], help="run the daemon (default)")
    p.add_argument("--http", metavar="HOST:PORT", help="where the HTTP adapter listens")
    p.add_argument("--no-console", action="store_true", help="no console adapter even on a TTY")
    p = sub.add_parser("chat", parents=[common], help="talk to the bot as one user (a REPL)")
    p.add_argument("--admin", action="store_true", help=ADMIN_HELP)
    p = sub.add_parser("ask", parents=[common], help="send one message, print the reply")
    p.add_argument("text", help="the message")
    p.add_argument("--admin", action="store_true", help=ADMIN_HELP)
    p.add_argument(
        "--json", action="store_true", help="print {rule, answer, error, trace_id, steps} as JSON"
    )
    p = sub.add_parser("check", parents=[common], help="validate the rules; exit 1 on any error")
    p.add_argument("path", nargs="?", help="rules directory or file (default: --rules)")
    p = sub.add_parser(
        "test",
        parents=[common],
        help="run the tests: of rules files; exit 1 when a case fails",
        description=TEST_HELP,
    )
    p.add_argument(
        "paths", nargs="*", metavar="PATH", help="rules directories or files (default: --rules)"
    )
    p.add_argument(
        "-k",
        dest="pattern",
        metavar="PATTERN",
        help="only cases whose name or send contains PATTERN (earlier cases of the file "
        "still run, unreported, to build their state)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p = sub.add_parser(
        "mcp-serve",
        parents=[common],
        help="serve the rules marked tool: to an MCP client over stdio",
        description=MCP_SERVE_HELP,
    )
    p.add_argument(
        "--admin",
        action="store_true",
        help="the client is an admin, whatever 'admins:' says: admin_only tool rules are "
        "listed and run",
    )


def run_serve(settings: Settings, args: argparse.Namespace, extensions: Sequence[Extension]) -> int:
    if getattr(args, "http", None):
        settings = settings.with_(http_listen=args.http, http_enabled=True)
    rotate = settings.log.rotate
    logs.configure(
        settings.log_level,
        settings.log_file or None,
        fmt=settings.log_format,
        max_bytes=rotate.max_bytes,
        backups=rotate.backups,
    )
    # room for connections, store sockets and outbound steps; both limits logged
    logs.get_logger("tmy").info("daemon.open_files", **raise_open_file_limit())
    if getattr(args, "no_console", False):
        settings = settings.with_(console=False)
    asyncio.run(serve(settings, extensions=extensions))
    return 0


def run_check(settings: Settings, path: str | None, extensions: Sequence[Extension]) -> int:
    # the one config value the config layer cannot judge: it compiles in tmy.values
    error_reply_template(settings)
    if settings.web_console.enabled and settings.web_console.admin is None:
        # what would stop `serve`: said by `check` too, with the key's line
        raise setting_error(settings, "console.enabled", missing_password())
    root = Path(path) if path else settings.rules
    rulebook = load_rulebook(
        root,
        build_registry(settings, extensions),
        store_url=settings.store,
        max_value_bytes=settings.max_value_bytes,
    )
    # warnings go to stderr, each "warning: file:line: …": the exit status stays 0
    for warning in rule_warnings(rulebook, functools.partial(disabled_adapter, settings)):
        print(f"warning: {warning}", file=sys.stderr)
    for extension in extensions:  # what only an extension can judge (MCP tool names)
        for warning in asyncio.run(extension.check_warnings(settings, rulebook)):
            print(f"warning: {warning}", file=sys.stderr)
    triggers = sum(len(r.triggers) for r in rulebook.rules)
    print(
        f"ok: {len(rulebook.rules)} rules, {triggers} triggers, "
        f"{len(rulebook.variables)} variables in {len(rulebook.files)} files"
    )
    for line in rulebook.atomic_report:
        print(f"atomic: {line}")
    return 0


def _no_reply_reason(reply: Any, text: str, settings: Settings, admin: bool) -> str:
    """Why ``ask`` printed nothing; a refused admin command says how to be an admin."""
    prefix = settings.admin_prefix
    if not admin and prefix and (text == prefix or text.startswith(prefix + " ")):
        return (
            f"'{prefix}' commands answer admins only: add --admin, or list this user "
            "under admins: in the config"
        )
    return reply.reason or "no rule matched"


async def run_ask(
    settings: Settings,
    text: str,
    as_json: bool,
    who: dict[str, str],
    extensions: Sequence[Extension],
    *,
    admin: bool = False,
) -> int:
    quiet = settings.with_(console=False, http_enabled=False)
    async with App(quiet, extensions=extensions) as app:
        assert app.engine is not None
        reply = await app.engine.handle(Message(text, is_admin=admin, **who))
    if as_json:
        print(json.dumps(jsonable(reply.as_dict(steps=True)), ensure_ascii=False, indent=2))
    else:
        if reply.rule is None and not reply.text:  # (an admin command answers with no rule)
            print(f"(no reply: {_no_reply_reason(reply, text, settings, admin)})", file=sys.stderr)
        if reply.error:
            print(f"error: {reply.error}", file=sys.stderr)
        if reply.text:
            print(reply.text)
        for line in _beside_text(reply):
            print(line, file=sys.stderr)
    return 1 if reply.error else 0


def _beside_text(reply: Reply) -> list[str]:
    """What a reply carries besides its text, for ``ask`` on a terminal (``--json`` shows
    it all): its structured parts and a request's decision."""
    lines = []
    out = reply.outgoing
    if out:
        listed = (("images", out.images), ("files", out.files), ("mentions", out.mentions))
        parts = [f"{k}: {', '.join(v)}" for k, v in listed if v]
        if out.buttons:
            parts.append("buttons: " + " | ".join(" ".join(b.text for b in r) for r in out.buttons))
        if out.reply_to is not None:
            parts.append(f"quotes: {out.reply_to or 'the message'}")
        lines.append(f"(with {'; '.join(parts)})")
    if reply.approve is not None:
        why = f": {reply.approve_reason}" if reply.approve_reason else ""
        lines.append(f"(request {'accepted' if reply.approve else 'declined'}{why})")
    return lines


async def run_chat(
    settings: Settings,
    who: dict[str, str],
    extensions: Sequence[Extension],
    *,
    admin: bool = False,
) -> int:
    async with App(settings, extensions=extensions) as app:
        engine = app.engine
        assert engine is not None
        print(
            f"tmy chat as {who['user']}{' (admin)' if admin else ''} — "
            f"{len(engine.rulebook.rules)} rules. Ctrl-D or /quit to leave.",
            file=sys.stderr,
        )

        async def handle(message: Message) -> Reply:
            message.is_admin = message.is_admin or admin  # --admin: every line from an admin
            return await engine.handle(message)

        console = ConsoleAdapter(**who)
        await console.start(handle)
        await console.done.wait()
    return 0


def run_test(settings: Settings, args: argparse.Namespace, extensions: Sequence[Extension]) -> int:
    """``tmy test``: 0 every case passed, 1 a case failed (or none ran), 2 invalid rules/cases."""
    if (
        getattr(args, "log_level", None) is None
        and not os.environ.get("TMY_LOG_LEVEL")
        and not settings.log_file
    ):
        logs.configure("error", None, fmt="json")  # a failing case shows its error itself
    paths = [Path(p) for p in args.paths] or [settings.rules]
    report = asyncio.run(run_tests(settings, paths, args.pattern, extensions=extensions))
    if report.errors:
        for error in report.errors:
            print(error, file=sys.stderr)
        if args.json:
            print(json.dumps(report_json(report), ensure_ascii=False, indent=2))
        return 2
    if args.json:
        print(json.dumps(report_json(report), ensure_ascii=False, indent=2, default=str))
    else:
        print_report(report)
    if not report.outcomes:
        where = ", ".join(str(p) for p in paths)
        if report.found:
            print(f"no test case matches -k {args.pattern!r} in {where}", file=sys.stderr)
        else:
            print(f"no test cases in {where}: add a 'tests:' list to a rules file", file=sys.stderr)
        return 1
    return 1 if report.failed else 0


async def run_mcp_serve(
    settings: Settings,
    who: dict[str, str],
    extensions: Sequence[Extension],
    *,
    admin: bool = False,
) -> int:
    """``mcp-serve``: the app as ``ask`` opens it (no listener, no adapters), served over
    stdio until the client closes it; with ``watch`` on, rule edits reload as in the daemon."""
    quiet = settings.with_(console=False, http_enabled=False)
    caller = Caller(
        user=who["user"],
        platform=who.get("platform") or MCP_PLATFORM,
        chat=who["chat"],
        user_name=who.get("user_name", ""),
        admin=admin,
    )
    async with App(quiet, extensions=extensions) as app:
        assert app.engine is not None
        folders = [settings.rules, settings.plugins] if settings.watch else []
        await serve_stdio(app.engine, caller, reload=app.reload, folders=folders)
    return 0
