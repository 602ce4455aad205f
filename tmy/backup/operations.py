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
from tmy.backup.fileformat import (
    BackupFile,
    Entry,
    Rank,
    header_for,
    printable,
    write_file,
    write_new_file,
)
from tmy.command import CommandError
from tmy.errors import ValueRefused
from tmy.store.base import FORMAT_KEY, Snapshot, Store
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


async def take_backup(
    store: Store, path: Path, *, compress: bool, exclusive: bool = False
) -> Written:
    """Snapshot ``store`` and write it to ``path`` atomically (gzip when ``compress``);
    ``exclusive``: never over an existing file (a suffixed name instead, see
    :func:`~tmy.backup.fileformat.write_new_file`), as a folder's timestamped files are."""
    started = time.monotonic()
    # the clock is read before the snapshot: TTLs restored from it come out a little
    # short rather than long (a session never outlives its time)
    created = datetime.now(UTC)
    snapshot = await store.snapshot()
    entries, ranks = list(snapshot.entries), list(snapshot.ranks)
    url = redact.safe_url(store.url)
    header = header_for(url, len(entries), len(ranks), created, snapshot.point_in_time)
    if exclusive:
        path, size = await asyncio.to_thread(
            write_new_file, path, header, entries, ranks, compress=compress
        )
    else:
        size = await asyncio.to_thread(write_file, path, header, entries, ranks, compress=compress)
    return Written(path, len(entries), len(ranks), size, time.monotonic() - started, url, created)


KNOWN_PREFIXES = (
    "var/global/",
    "var/chat/",
    "var/user/",
    "mem/user/",
    "mem/chat/",
    "mem/global",
    "mem/e/",
    "mem/vec/",
    "mem/dialog/",
    "mem/open/",
    "llmhist/",
    "llmlast/",
    "summary/",
    "session/",
    "llm/usage/",
    "cron/hist/",
    "cron/done/",
    "cron/outbox/",
    "cron/pending",
    "cooldown/",
    "off/",
    "dedup/",
    "backup/done/",
    "tmy/ix/",
)
"""The keys tmy itself writes (variables, memory entries and vectors, dialogue summaries,
histories, sessions, usage counters, cron records, cooldowns, chat switches, OneBot
de-duplication, scheduled-backup marks) and the store's lexical index documents
(``tmy/ix/…``: not keys, put back into the index by ``restore``). A key outside them
is restored as it is, with a warning: a hand-edited file, or an extension's own keys."""

SKIPPED = {FORMAT_KEY: "the store format marker: the target keeps its own"}
"""Keys a backup may carry that restore never writes (and does not count), and why."""


def known_key(key: str) -> bool:
    return key.startswith(KNOWN_PREFIXES)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a restore of one file would write: entries (TTLs counted down), board entries."""

    source: BackupFile
    entries: list[Entry]
    ranks: list[Rank]
    expired: int  # keys whose TTL ran out since the backup: not restored
    skipped: tuple[str, ...] = ()  # keys restore never writes (SKIPPED)
    warnings: tuple[str, ...] = ()  # written anyway, but worth a look (unknown key families)

    def groups(self) -> dict[str, int]:
        """Keys per family (``var/user``, ``mem/vec``, ``cron/hist``, ``sess`` …)."""
        counts = Counter(_family(key) for key, _, _ in self.entries)
        return dict(sorted(counts.items()))

    def describe(self, target: str, mode: str) -> list[str]:
        """The plan as lines of text; header fields come from the file, so they are
        printed with control characters escaped (:func:`printable`)."""
        head = self.source.header
        lines = [
            f"{sizes(len(self.entries), len(self.ranks))} "
            f"(backup of {printable(head.get('store'))} taken {printable(head['created'])} "
            f"by tmy {printable(head.get('tmy'))})",
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
        lines += [f"  skipped {key}: {SKIPPED[key]}" for key in self.skipped]
        lines += [f"  warning: {text}" for text in self.warnings]
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
            "skipped": list(self.skipped),
            "warnings": list(self.warnings),
        }


_TWO_LEVEL = frozenset(("var", "mem", "cron", "llm"))


def _family(key: str) -> str:
    parts = key.split("/", 2)
    return "/".join(parts[:2]) if parts[0] in _TWO_LEVEL and len(parts) > 2 else parts[0]


def plan(
    backup: BackupFile, *, max_value_bytes: int, now: datetime | None = None, name: str = ""
) -> Plan:
    """Check every entry as the target store will (key, TTL, value codec and size) and count
    TTLs down from the backup's time; CommandError naming ``name:line`` of the first problem.

    Keys restore never writes (:data:`SKIPPED`) are left out and listed; keys outside
    :data:`KNOWN_PREFIXES` are kept, with a warning per family naming the first one's line.
    """
    elapsed = max(((now or datetime.now(UTC)) - backup.created).total_seconds(), 0.0)
    entries: list[Entry] = []
    expired = 0
    skipped: list[str] = []
    unknown: dict[str, tuple[int, str]] = {}  # family -> (count, its first key)
    for key, value, ttl in backup.entries:
        where = f"{name}:{backup.lines.get(key, '?')}"
        if key in SKIPPED:
            skipped.append(key)
            continue
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
        if not known_key(key):
            family = key.split("/", 1)[0]
            count, first = unknown.get(family, (0, key))
            unknown[family] = (count + 1, first)
        entries.append((key, value, ttl))
    warnings = [
        f"{counted(count, 'key', 'keys')} outside tmy's known key families "
        f"({family!r}, first {first!r} at {name}:{backup.lines.get(first, '?')}): "
        "restored as they are; a hand-edited file or an extension's own keys?"
        for family, (count, first) in sorted(unknown.items())
    ]
    return Plan(backup, entries, list(backup.ranks), expired, tuple(skipped), tuple(warnings))


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
