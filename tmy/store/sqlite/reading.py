"""Reading a SQLite store's rows for a snapshot: every live key and board row, in one
read transaction (its own module: the index's snapshot reads through it too, and the
connection imports the index)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from tmy.store.base import FORMAT_KEY, Snapshot
from tmy.store.codec import decode
from tmy.store.snapshot import sorted_snapshot

Entry = tuple[str, Any, float | None]


def read_rows(
    db: sqlite3.Connection, more: Callable[[sqlite3.Connection], list[Entry]] | None = None
) -> Snapshot:
    """Every live key/value row and every board row, in one read transaction, decoded;
    ``more`` reads further entries in the same transaction (the index's documents)."""
    db.execute("BEGIN")
    try:
        now = time.time()
        kv = db.execute(
            "SELECT key, value, expires FROM kv WHERE key != ? "
            "AND (expires IS NULL OR expires > ?) ORDER BY key",
            (FORMAT_KEY, now),
        ).fetchall()
        ranks = db.execute(
            "SELECT board, member, score, name FROM ranks ORDER BY board, member"
        ).fetchall()
        extra = more(db) if more is not None else []
    finally:
        db.execute("COMMIT")
    entries: list[Entry] = [
        (key, decode(raw, key), None if expires is None else expires - now)
        for key, raw, expires in kv
    ]
    if extra:
        entries += extra
        entries.sort(key=lambda e: e[0])
    return sorted_snapshot(entries, [(b, m, float(s), n) for b, m, s, n in ranks])
