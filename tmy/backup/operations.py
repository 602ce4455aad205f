"""Taking a backup of a store, and planning and applying a restore into one.

**Backup** = :meth:`Store.snapshot` written by :func:`~tmy.backup.fileformat.write_file`
(in a worker thread: a daemon keeps answering while a large file is compressed).
What the snapshot guarantees is what the file holds (docs/backup.md): on SQLite
one read transaction, a point-in-time view of every key and board; on Redis
and Redis Cluster each key's value and TTL read together (consistent per key,
not across keys).

**Restore** is two steps so that nothing is written unless everything is
right: :func:`plan` checks every line against the target (keys, TTLs, each value
through the store's own codec and ``limits.max_value_bytes``) and names the line
of the first problem; :func:`apply` then writes with :meth:`Store.restore`.
TTLs count from the backup: a key that had 600 s left when the backup was
``created`` and is restored 100 s later gets 500 s, and one whose time has run
out is not restored at all (it would have expired in the source too).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tmy import redact
from tmy.backup.fileformat import BackupFile, Entry, Rank, header_for, write_file
from tmy.command import CommandError
from tmy.errors import ValueRefused
from tmy.store.base import Snapshot, Store
from tmy.store.codec import check_key, check_ttl, encode

Mode = Literal["merge", "replace"]


def counted(n: int, one: str, many: str) -> str:
    """``1 key``, ``2 keys``: the counts every message of backup and restore prints."""
    return f"{n} {one if n == 1 else many}"


def sizes(entries: int, ranks: int) -> str:
    return f"{counted(entries, 'key', 'keys')} and {counted(ranks, 'board entry', 'board entries')}"


@dataclass(frozen=True, slots=True)
class Written:
    """A backup written: where, how much, from which store (its URL without password)."""

    path: Path
    entries: int
    ranks: int
    size: int
    seconds: float
    store: str
    created: datetime

    def describe(self) -> str:
        return (
            f"wrote {self.path}: {sizes(self.entries, self.ranks)}, "
            f"{self.size:,} bytes in {self.seconds:.2f}s from {self.store}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "entries": self.entries,
            "ranks": self.ranks,
            "bytes": self.size,
            "seconds": round(self.seconds, 3),
            "store": self.store,
            "created": self.created.isoformat(timespec="milliseconds"),
        }


async def take_backup(store: Store, path: Path, *, compress: bool) -> Written:
    """Snapshot ``store`` and write it to ``path`` atomically (gzip when ``compress``)."""
    started = time.monotonic()
    # the clock is read before the snapshot: TTLs restored from it come out a little
    # short rather than long (a session never outlives its time)
    created = datetime.now(UTC)
    snapshot = await store.snapshot()
    entries, ranks = list(snapshot.entries), list(snapshot.ranks)
    url = redact.safe_url(store.url)
    header = header_for(url, len(entries), len(ranks), created)
    size = await asyncio.to_thread(write_file, path, header, entries, ranks, compress=compress)
    return Written(path, len(entries), len(ranks), size, time.monotonic() - started, url, created)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a restore of one file would write: entries (TTLs counted down), board entries."""

    source: BackupFile
    entries: list[Entry]
    ranks: list[Rank]
    expired: int  # keys whose TTL ran out since the backup: not restored

    def groups(self) -> dict[str, int]:
        """Keys per family (``var/user``, ``mem/vec``, ``cron/hist``, ``sess`` …)."""
        counts = Counter(_family(key) for key, _, _ in self.entries)
        return dict(sorted(counts.items()))

    def describe(self, target: str, mode: str) -> list[str]:
        lines = [
            f"{sizes(len(self.entries), len(self.ranks))} "
            f"(backup of {self.source.header.get('store')} taken {self.source.header['created']} "
            f"by tmy {self.source.header.get('tmy')})",
            f"into {target} ({mode})",
        ]
        lines += [f"  {family}: {count}" for family, count in self.groups().items()]
        if self.ranks:
            boards = len({board for board, *_ in self.ranks})
            lines.append(
                f"  leaderboards: {boards} ({counted(len(self.ranks), 'entry', 'entries')})"
            )
        if self.expired:
            expired = counted(self.expired, "key", "keys")
            lines.append(f"  {expired} expired since the backup: not restored")
        return lines

    def as_json(self, target: str, mode: str, *, dry_run: bool) -> dict[str, Any]:
        return {
            "dry_run": dry_run,
            "target": target,
            "mode": mode,
            "header": self.source.header,
            "entries": len(self.entries),
            "ranks": len(self.ranks),
            "expired": self.expired,
            "groups": self.groups(),
        }


_TWO_LEVEL = frozenset(("var", "mem", "cron", "llm"))


def _family(key: str) -> str:
    parts = key.split("/", 2)
    return "/".join(parts[:2]) if parts[0] in _TWO_LEVEL and len(parts) > 2 else parts[0]


def plan(
    backup: BackupFile, *, max_value_bytes: int, now: datetime | None = None, name: str = ""
) -> Plan:
    """Check every entry as the target store will (key, TTL, value codec and size) and count
    TTLs down from the backup's time; CommandError naming ``name:line`` of the first problem."""
    elapsed = max(((now or datetime.now(UTC)) - backup.created).total_seconds(), 0.0)
    entries: list[Entry] = []
    expired = 0
    for key, value, ttl in backup.entries:
        where = f"{name}:{backup.lines.get(key, '?')}"
        try:
            check_key(key)
            encode(value, key, max_value_bytes)
            if ttl is not None:
                left = ttl - elapsed
                if left <= 0:
                    expired += 1
                    continue
                ttl = check_ttl(left, f"the ttl of {key!r}")
        except ValueRefused as exc:
            raise CommandError(f"{where}: {exc}; nothing was written") from None
        entries.append((key, value, ttl))
    return Plan(backup, entries, list(backup.ranks), expired)


async def apply(store: Store, restore: Plan, mode: Mode | None) -> int:
    """Write ``restore`` into ``store``; the number of keys written.

    ``mode`` None (neither ``--merge`` nor ``--replace``) restores only into a store
    holding nothing (CommandError otherwise, nothing written): a restore that silently
    mixed two data sets, or replaced a live one, is the mistake this default prevents.
    """
    if mode is None:
        present = await store.snapshot()
        if present.entries or present.ranks:
            raise CommandError(
                f"{redact.safe_url(store.url)} is not empty "
                f"({sizes(len(present.entries), len(present.ranks))}): restore --merge writes "
                "the backup's keys over it and keeps the others; restore --replace deletes "
                "everything in it first. Nothing was written"
            )
    snapshot = Snapshot(entries=restore.entries, ranks=restore.ranks)
    return await store.restore(snapshot, replace=mode == "replace")
