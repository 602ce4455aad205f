"""``backup [FILE] [--gzip]`` (every front end) and ``restore FILE …`` (the command line only).

Where each is reachable, and why:

* ``backup`` — CLI ``python run.py backup FILE`` writes FILE; without FILE (and
  from chat, ``.tmy backup``, or ``POST /admin/commands/backup``) it writes a
  ``tmy-backup-manual-<UTC time>…`` file into ``backup.path`` and prunes the
  manual files there to ``backup.keep`` (the scheduled ones are never touched).
  Chat and HTTP cannot name a file: an admin's message must not be able to
  write anywhere the daemon can. Reading data out is safe to offer to admins;
  a backup taken from chat is the one to have before a risky change.
* ``restore`` — the command line only. It replaces or merges everything the
  bot keeps, which no chat message should be able to do, and ``--replace``
  while a daemon serves the same store would race the daemon's own writes:
  stop the daemons, restore, start them (docs/backup.md).

On the CLI both open the store alone (no rules loaded, nothing served): they
work while the daemon runs (``backup``) and with broken rules. ``--store URL``
(the common option) backs up / restores that store instead of the configured one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator
from pathlib import Path

from tmy import redact
from tmy.backup.config import backup_dir, config_of
from tmy.backup.fileformat import wants_gzip
from tmy.backup.operations import apply, plan, sizes, take_backup
from tmy.backup.reader import read_file
from tmy.backup.scheduled import write_into_folder
from tmy.backup.target import check_restore_target
from tmy.command import ALL_FRONTS, CLI_ONLY, Arg, Command, Invocation, Result
from tmy.config import Settings
from tmy.store import open_store
from tmy.store.base import Store


def _settings(inv: Invocation) -> Settings:
    settings = inv.settings if inv.settings is not None else getattr(inv.app, "settings", None)
    assert settings is not None
    return settings


@contextlib.asynccontextmanager
async def _store(inv: Invocation, settings: Settings) -> AsyncIterator[Store]:
    """The running app's store (chat, HTTP), else the configured one opened for this command."""
    if inv.app is not None:
        yield inv.app.store
        return
    redact.add_url(settings.store)  # a password in the URL stays out of every message
    store = open_store(settings.store, max_value_bytes=settings.max_value_bytes)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


NO_FOLDER = (
    "error: no backup folder: set 'backup: {path: DIR}' in the config "
    "(on the command line: python3 run.py backup FILE)"
)


async def _backup(inv: Invocation) -> Result:
    settings = _settings(inv)
    config = config_of(settings)
    file = inv.args.get("file")
    folder = backup_dir(settings)
    if not file and folder is None:
        return Result(NO_FOLDER, {"error": NO_FOLDER}, ok=False)
    async with _store(inv, settings) as store:
        try:
            if file:
                path = Path(file)
                written = await take_backup(
                    store, path, compress=wants_gzip(path, bool(inv.args.get("gzip")))
                )
            else:
                gzip = config.gzip or bool(inv.args.get("gzip"))
                chosen = dataclasses.replace(config, gzip=gzip)
                written = await write_into_folder(store, folder, chosen, manual=True)
        except OSError as exc:  # a full disk, a folder that is a file: nothing half written
            where = exc.filename or file or folder
            text = f"cannot write the backup to {where}: {exc.strerror or exc}"
            return Result(text, {"error": text}, ok=False)
    return Result(written.describe(), written.as_json())


async def _restore(inv: Invocation) -> Result:
    settings = _settings(inv)
    path = Path(inv.args["file"])
    mode = "replace" if inv.args.get("replace") else "merge" if inv.args.get("merge") else None
    shown_mode = mode or "an empty store only"
    target = redact.safe_url(settings.store)
    redact.add_url(settings.store)
    # a target that would lose the data or is another program's: refused before anything
    check_restore_target(settings.store, target)
    # the whole file is read and checked before the target is even opened
    loaded = await asyncio.to_thread(
        functools.partial(
            read_file,
            path,
            max_value_bytes=settings.max_value_bytes,
            max_id_chars=settings.max_id_chars,
        )
    )
    todo = plan(loaded, max_value_bytes=settings.max_value_bytes, name=str(path))
    if inv.args.get("dry_run"):
        lines = ["dry run: nothing written. Would restore", *todo.describe(target, shown_mode)]
        if mode is None:
            lines.append("(refused then unless that store holds nothing: --merge or --replace)")
        return Result("\n".join(lines), todo.as_json(target, shown_mode, dry_run=True))
    async with _store(inv, settings) as store:
        written = await apply(store, todo, mode)
    lines = [f"restored {sizes(written, len(todo.ranks))} from {path}"]
    lines += todo.describe(target, shown_mode)[1:]
    data = {**todo.as_json(target, shown_mode, dry_run=False), "written": written}
    return Result("\n".join(lines), data)


BACKUP = Command(
    name="backup",
    help="write everything tmy keeps to a backup file (JSON lines, gzip optional)",
    description=(
        "Write every variable, memory entry, history, session, cron record, chat switch, "
        "usage counter and leaderboard of the store to FILE: one JSON line per key after a "
        "versioned header, gzip when FILE ends in .gz or with --gzip. Safe while the daemon "
        "runs (docs/backup.md says what is consistent on each store). Without FILE: a "
        "tmy-backup-manual-<UTC time> file in backup.path; the manual files there are "
        "pruned to backup.keep, the scheduled ones never."
    ),
    run=_backup,
    args=(
        Arg(
            "file",
            required=False,
            metavar="FILE",
            help="the file to write (default: a tmy-backup-manual-… file in backup.path)",
            fronts=CLI_ONLY,
        ),
        Arg(
            "gzip",
            flag=True,
            takes_value=False,
            help="gzip the file (a FILE ending in .gz is gzipped anyway)",
            fronts=CLI_ONLY,
        ),
    ),
    needs="settings",
    fronts=ALL_FRONTS,
    json_help="print what was written as JSON",
)

RESTORE = Command(
    name="restore",
    help="load a backup file into the store (CLI only; --dry-run first)",
    description=(
        "Load FILE (written by backup) into the configured store, or into the one --store "
        "URL names (sqlite:///path, redis://…, redis+cluster://…): the way from SQLite to "
        "Redis. The whole file is read and checked first; a newer format, a corrupt or a "
        "truncated file is refused with its line and nothing is written. Without --merge or "
        "--replace it restores only into a store that holds nothing. Stop the daemons on "
        "that store first."
    ),
    run=_restore,
    args=(
        Arg("file", metavar="FILE", help="a file written by backup (.jsonl or .jsonl.gz)"),
        Arg(
            "dry_run",
            flag=True,
            takes_value=False,
            help="read and check everything, print what would be written, write nothing",
        ),
        Arg(
            "merge",
            flag=True,
            takes_value=False,
            group="mode",
            help="write the backup's keys over the store's, keep the store's other keys",
        ),
        Arg(
            "replace",
            flag=True,
            takes_value=False,
            group="mode",
            help="delete every key and leaderboard in the store first (locks are kept)",
        ),
    ),
    needs="settings",
    fronts=CLI_ONLY,
    json_help="print the restore (or the dry run's plan) as JSON",
)

COMMANDS = (BACKUP, RESTORE)
