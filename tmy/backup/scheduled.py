"""The scheduled backup: ``backup.cron`` run by the daemon, once per occurrence across replicas.

The fire times come from :class:`tmy.cron.schedule.Timing` (the parser and
clock maths scheduled rules use, in the config's ``timezone``). Each
occurrence is claimed like a scheduled rule's: the store lease named after
its done mark (``backup/done/<unix time>``) is taken, the mark checked, the
backup written, and the mark committed fenced by the lease. Two daemons on one
store therefore write one file per occurrence; the second finds the mark and
skips. A failure (disk full, store down) is logged as ``backup.failed`` and
leaves no mark: a replica still waiting for the claim tries the same
occurrence itself, and in any case the next occurrence runs as usual — the
daemon never stops over a backup.

Scheduled files are named ``tmy-backup-<fire time, UTC>.jsonl.gz`` (``.jsonl``
with ``gzip: false``); manual ones (``backup`` without FILE: CLI, chat, HTTP)
``tmy-backup-manual-<UTC time to the microsecond>.jsonl.gz``. A name already
taken gets a suffix (``-2``, ``-3`` …): no backup ever replaces another. Each
kind is pruned to ``keep`` on its own after a backup of that kind: manual
backups never delete scheduled ones, nor the reverse (other files there are
never touched). A daemon that was down at a fire time does not catch up: the
next occurrence is the next backup.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

from tmy.backup.config import BackupConfig, backup_dir, config_of
from tmy.backup.operations import Written, take_backup
from tmy.cron.occurrence import daemon_id, fire_time_text
from tmy.cron.schedule import Timing, validate_schedule
from tmy.errors import LeaseLost, StoreError
from tmy.logs import get_logger
from tmy.store.base import MISSING, Store
from tmy.types import Services

log = get_logger("tmy.backup")

PREFIX = "tmy-backup-"
MANUAL_PREFIX = "tmy-backup-manual-"
FILE_NAME = re.compile(
    r"^tmy-backup-(?P<manual>manual-)?(?P<time>\d{8}T\d{6}(?:\.\d{6})?Z)"
    r"(?:-(?P<n>[1-9]\d{0,3}))?\.jsonl(?:\.gz)?$"
)
DONE_TTL = 2 * 86_400.0  # a done mark outlives any claim of its occurrence
CLAIM_WAIT = 600.0
"""How long a replica waits for another one's claim of the same occurrence (the
holder may be writing a large file) before it logs ``backup.claim_failed``."""


def file_name(moment: datetime, compress: bool) -> str:
    """``tmy-backup-20261125T040000Z.jsonl.gz``: UTC, so names sort by time across DST."""
    stamp = moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{PREFIX}{stamp}.jsonl{'.gz' if compress else ''}"


def manual_name(moment: datetime, compress: bool) -> str:
    """``tmy-backup-manual-20261125T093012.123456Z.jsonl.gz``: a backup asked for (not
    scheduled), to the microsecond, so two in one second get two names."""
    stamp = moment.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{MANUAL_PREFIX}{stamp}.jsonl{'.gz' if compress else ''}"


def backups_in(folder: Path, *, manual: bool = False) -> list[Path]:
    """The backup files tmy named in ``folder`` of one kind (scheduled, or ``manual``),
    newest first (by the time in the name, then the suffix)."""
    if not folder.is_dir():
        return []
    found = [
        ((m["time"], int(m["n"] or 1), p.name), p)
        for p in folder.iterdir()
        if (m := FILE_NAME.match(p.name)) and bool(m["manual"]) is manual
    ]
    return [p for _, p in sorted(found, key=lambda f: f[0], reverse=True)]


def prune(folder: Path, keep: int, *, manual: bool = False) -> list[Path]:
    """Delete all but the newest ``keep`` backup files of one kind in ``folder`` (0: none):
    pruning after a manual backup never touches the scheduled files, nor the reverse."""
    if keep <= 0:
        return []
    removed = []
    for path in backups_in(folder, manual=manual)[keep:]:
        with contextlib.suppress(FileNotFoundError):  # a replica sharing the folder was first
            path.unlink()
            removed.append(path)
    return removed


async def write_into_folder(
    store: Store,
    folder: Path,
    config: BackupConfig,
    moment: datetime | None = None,
    *,
    manual: bool = False,
) -> Written:
    """One backup in ``folder`` — named after the fire time ``moment``, or for a ``manual``
    one after now to the microsecond — never over an existing file, then the pruning of
    that kind."""
    moment = moment or datetime.now(UTC)
    name = manual_name(moment, config.gzip) if manual else file_name(moment, config.gzip)
    written = await take_backup(store, folder / name, compress=config.gzip, exclusive=True)
    log.info("backup.written", manual=manual, **written.as_json())
    removed = prune(folder, config.keep, manual=manual)
    if removed:
        log.info("backup.pruned", keep=config.keep, manual=manual,
                 removed=[p.name for p in removed])  # fmt: skip
    return written


class ScheduledBackup:
    """The daemon's backup job: :meth:`run` loops over the fire times, :meth:`occurrence`
    claims and writes one."""

    def __init__(self, store: Store, config: BackupConfig, folder: Path, zone: tzinfo | None):
        assert config.cron is not None
        self.store = store
        self.config = config
        self.folder = folder
        self.timing = Timing(validate_schedule({"cron": config.cron}), zone)
        self.daemon = daemon_id()

    async def run(self, timing: Timing | None = None) -> None:
        """Fire at every fire time from now on (``timing``: another clock, for tests)."""
        timing = timing or self.timing
        fire = timing.after(datetime.now(timing.tz))
        while True:
            while (delay := fire.timestamp() - time.time()) > 0:
                await asyncio.sleep(delay)
            await self.occurrence(fire)
            fire = timing.after(max(fire, datetime.now(timing.tz)))  # no catch-up after a stall

    async def occurrence(self, fire: datetime) -> Written | None:
        """Claim the occurrence at ``fire`` and write its backup, unless a replica did;
        every failure is logged, never raised (the next occurrence runs as usual)."""
        mark = f"backup/done/{int(fire.timestamp())}"
        fire_text = fire_time_text(fire)
        try:
            async with self.store.lock(mark, wait=CLAIM_WAIT) as lease:
                done = await self.store.get(mark)
                if done is not MISSING:
                    by = done.get("daemon") if isinstance(done, dict) else None
                    log.info("backup.skipped", fire_time=fire_text, daemon=by,
                             reason="written by a replica")  # fmt: skip
                    return None
                written = await write_into_folder(self.store, self.folder, self.config, fire)
                entry: dict[str, Any] = {"daemon": self.daemon, "file": written.path.name}
                await self.store.commit([(mark, entry, DONE_TTL)], fence=[lease])
                return written
        except asyncio.CancelledError:
            raise
        except LeaseLost as exc:
            log.error("backup.lease_lost", fire_time=fire_text, error=str(exc),
                      detail="the file was written; a replica may write one too")  # fmt: skip
        except (StoreError, OSError) as exc:
            log.error("backup.failed", fire_time=fire_text, error=str(exc),
                      detail="retried at the next occurrence")  # fmt: skip
        except Exception as exc:  # a backup must never take the daemon down
            log.exception("backup.failed", fire_time=fire_text, error=repr(exc))
        return None


@contextlib.asynccontextmanager
async def serving(services: Services) -> AsyncIterator[ScheduledBackup | None]:
    """The daemon's part: run :class:`ScheduledBackup` while serving when ``backup.cron`` is set."""
    settings = services.settings
    config, folder = config_of(settings), backup_dir(settings)
    if config.cron is None or folder is None:
        yield None
        return
    job = ScheduledBackup(services.store, config, folder, settings.tz)
    log.info("backup.scheduled", cron=config.cron, next=fire_time_text(job.timing.upcoming(1)[0]),
             path=str(folder), keep=config.keep)  # fmt: skip
    task = asyncio.create_task(job.run(), name="backup")
    try:
        yield job
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
