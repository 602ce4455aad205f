"""``python run.py memory list|del|export``: long-term memory for scripts.

* ``memory list`` — the entries the ``--user`` / ``--chat`` / ``--platform`` identity
  can see (its own, its chat's, the global ones); ``--all`` every entry in the store;
  ``--dialog`` that user's dialogue summaries instead; ``--json`` as JSON.
* ``memory del ID`` — delete one entry for good (exit 1 when there is none).
* ``memory export`` — every memory key (entries, summaries, open conversations) as
  one JSON object on stdout (``--out FILE`` to write a file).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from tmy.config import Settings


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``memory`` subcommand's arguments."""
    parser.description = "list, delete or export long-term memory entries and dialogue summaries"
    parser.add_argument("action", choices=["list", "del", "export"])
    parser.add_argument("id", nargs="?", help="for del: the entry id")
    parser.add_argument("--all", action="store_true", help="list: every entry in the store")
    parser.add_argument("--dialog", action="store_true", help="list: dialogue summaries")
    parser.add_argument("--json", action="store_true", help="list: print JSON")
    parser.add_argument("--out", help="export: write to this file instead of stdout")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Entry point for ``tmy memory``."""
    from tmy.cli import identity

    return asyncio.run(_run(args, settings, identity(args)))


async def _run(args: argparse.Namespace, settings: Settings, who: dict[str, str]) -> int:
    from tmy.app import App
    from tmy.memory import manage
    from tmy.message import Message

    async with App(settings.with_(console=False, http_enabled=False)) as app:
        store: Any = app.store
        tz = getattr(app.engine, "tz", None)
        message = Message("", **who)
        if args.action == "del":
            if not args.id:
                print("memory del needs an entry id", file=sys.stderr)
                return 2
            removed = await manage.delete(store, args.id, message)
            if removed is None:
                print(f"no memory entry {args.id!r}", file=sys.stderr)
                return 1
            print(f"deleted {removed['id']}: {removed.get('text')}")
            return 0
        if args.action == "export":
            text = manage.dumps(await manage.export(store))
            if args.out:
                Path(args.out).write_text(text + "\n", encoding="utf-8")
            else:
                print(text)
            return 0
        if args.dialog:
            items = await manage.summaries(store, message.platform, message.user)
            print(manage.dumps(items) if args.json else manage.format_summaries(items, tz))
            return 0
        pairs = (
            await manage.all_entries(store)
            if args.all
            else await manage.visible_entries(store, message)
        )
        if args.json:
            print(manage.dumps([e for _, e in pairs]))
        else:
            print(manage.format_entries(pairs, tz))
        return 0
