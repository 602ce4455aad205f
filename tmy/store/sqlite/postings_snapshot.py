"""The SQLite store's snapshot with its lexical index: every key, board entry and index
document read in one read transaction (the index documents as ``tmy/ix/…`` pseudo-entries,
see :mod:`tmy.store.textindex`)."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from tmy.store.base import FORMAT_KEY, Snapshot
from tmy.store.codec import decode
from tmy.store.snapshot import sorted_snapshot
from tmy.store.textindex import IndexDoc, doc_entry


def read_snapshot(db: sqlite3.Connection) -> Snapshot:
    """Every live key/value row, board row and index document, in one read transaction
    (:func:`tmy.store.sqlite.snapshots._read` plus the index)."""
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
        docs = db.execute(
            "SELECT s.name, d.doc, d.len, d.ord, d.tf FROM ix_docs AS d "
            "JOIN ix_ns AS s ON s.id = d.ns"
        ).fetchall()
    finally:
        db.execute("COMMIT")
    entries: list[tuple[str, Any, float | None]] = [
        (key, decode(raw, key), None if expires is None else expires - now)
        for key, raw, expires in kv
    ]
    entries += [
        doc_entry(ns, IndexDoc(doc, json.loads(tf), length, order))
        for ns, doc, length, order, tf in docs
    ]
    entries.sort(key=lambda e: e[0])
    return sorted_snapshot(entries, [(b, m, float(s), n) for b, m, s, n in ranks])
