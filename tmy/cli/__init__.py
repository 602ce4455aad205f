"""``python run.py …`` / ``tmy …``: the programs and every operator command.

The programs (``serve``, ``chat``, ``ask``, ``check``, ``test``, ``mcp-serve``) live in
:mod:`tmy.cli.programs`; the operator commands (``vars``, ``cron``, ``trace``,
``explain``, ``reload`` … and whatever an extension adds) are built from the
command registry by :mod:`tmy.cli.commands`.

Common options work before or after the command: ``--config``, ``--rules``,
``--store``, ``--user``, ``--user-name``, ``--chat``, ``--platform``,
``--log-level`` (each has a ``TMY_*`` environment twin). Exit codes: 0 ok, 1 the
command failed (rule errors, a failed run with ``ask``), 2 bad usage or configuration,
141 the output's reader stopped early (a closed pipe).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence

from tmy import logs
from tmy.builtins import extensions
from tmy.cli.commands import add_commands, run_command
from tmy.cli.options import COMMON, common_parser, identity, option, settings_from
from tmy.cli.programs import (
    add_programs,
    run_ask,
    run_chat,
    run_check,
    run_mcp_serve,
    run_serve,
    run_test,
)
from tmy.command import Command, command_table
from tmy.errors import ConfigError, RuleError, TmyError

__all__ = ["COMMON", "build_parser", "extensions", "identity", "main", "settings_from"]


def build_parser(commands: Mapping[str, Command] | None = None) -> argparse.ArgumentParser:
    """The whole command line: the programs, then one subcommand per operator command."""
    if commands is None:
        commands = command_table(extensions())
    common = common_parser()
    parser = argparse.ArgumentParser(
        prog="tmy", parents=[common], description="tmy: a chat-bot daemon driven by YAML rules."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_programs(sub, common)
    add_commands(sub, common, commands)
    return parser


BROKEN_PIPE = 141
"""The exit status when whoever reads the output stopped early (``check | head -1``): what a
process killed by SIGPIPE reports (128 + 13), without a traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); the exit status.

    Every command's output may go to a pipe whose reader stops early (``check |
    head -1``): that ends the command quietly with :data:`BROKEN_PIPE`.
    """
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the guard: a closed pipe fails here, not at exit
        return code
    except BrokenPipeError:
        _drop_stdout()
        return BROKEN_PIPE


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's final flush of what is still
    buffered would otherwise fail again (``Exception ignored … BrokenPipeError``)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (a test's capture): nothing to protect
        pass


def _main(argv: Sequence[str] | None) -> int:
    found = extensions()
    commands = command_table(found)
    args = build_parser(commands).parse_args(argv)
    name = args.command or "serve"
    try:
        settings = settings_from(args, found)
        if name == "serve":
            return run_serve(settings, args, found)
        quiet = option(args, "log-level") is None
        logs.configure(
            "warning" if quiet and not settings.log_file else settings.log_level,
            settings.log_file or None,
            fmt="json" if settings.log_format == "auto" else settings.log_format,
            max_bytes=settings.log.rotate.max_bytes,
            backups=settings.log.rotate.backups,
        )
        if name == "check":
            return run_check(settings, args.path, found)
        if name == "ask":
            who = identity(args)
            return asyncio.run(
                run_ask(settings, args.text, args.json, who, found, admin=args.admin)
            )
        if name == "chat":
            return asyncio.run(run_chat(settings, identity(args), found, admin=args.admin))
        if name == "test":
            return run_test(settings, args, found)
        if name == "mcp-serve":  # PLATFORM "mcp" unless --platform names one
            who = {**identity(args), "platform": option(args, "platform") or ""}
            return asyncio.run(run_mcp_serve(settings, who, found, admin=args.admin))
        return run_command(commands[name], args, settings, commands, found)
    except RuleError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (ConfigError, TmyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
