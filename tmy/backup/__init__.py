"""Backup, restore and migration of everything tmy keeps, as an extension.

``python run.py backup FILE`` writes the store's :meth:`~tmy.store.base.Store.snapshot`
— every persistent variable of every scope, memory entries and embeddings,
dialogue summaries and histories, sessions, cron history and outbox, chat
switches, usage counters, leaderboards — as a versioned JSON-lines
file (:mod:`tmy.backup.fileformat`); ``python run.py restore FILE`` loads one into
any store tmy accepts (:mod:`tmy.backup.operations`), which is how a deployment
moves from the embedded SQLite file to Redis or a Redis Cluster. The daemon
writes scheduled backups (``backup: {cron, keep, path}``, :mod:`tmy.backup.scheduled`),
once per occurrence across replicas. docs/backup.md is the operator's guide.

:data:`EXTENSION` carries the two commands (:mod:`tmy.backup.commands`), the
``backup:`` config section (:mod:`tmy.backup.config`) and the serving part that
runs the schedule.
"""

from __future__ import annotations

from tmy.backup.commands import BACKUP, COMMANDS, RESTORE
from tmy.backup.config import SECTION, BackupConfig, backup_dir, config_of, parse
from tmy.backup.fileformat import FORMAT, VERSION, BackupFile, write_file
from tmy.backup.operations import Plan, Written, apply, plan, take_backup
from tmy.backup.reader import read_file
from tmy.backup.scheduled import ScheduledBackup, backups_in, prune, serving
from tmy.extension import ConfigSection, Extension

__all__ = [
    "BACKUP",
    "EXTENSION",
    "FORMAT",
    "RESTORE",
    "VERSION",
    "BackupConfig",
    "BackupFile",
    "Plan",
    "ScheduledBackup",
    "Written",
    "apply",
    "backup_dir",
    "backups_in",
    "config_of",
    "plan",
    "prune",
    "read_file",
    "take_backup",
    "write_file",
]

EXTENSION = Extension(
    name="backup",
    commands=COMMANDS,
    config=ConfigSection(SECTION, parse),
    serving=serving,
    doc="backup and restore of the whole store, scheduled backups (backup:), docs/backup.md",
)
"""``backup`` / ``restore``, the ``backup:`` section, and the daemon's scheduled backup."""
