"""The SQLite store's snapshot with its lexical index: every key, board entry and index
document read in one read transaction (the index documents as ``tmy/ix/…`` pseudo-entries,
see :mod:`tmy.store.textindex`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from tmy.store.base import Snapshot
from tmy.store.sqlite.reading import read_rows
from tmy.store.textindex import IndexDoc, doc_entry


def read_snapshot(db: sqlite3.Connection) -> Snapshot:
    """Every live key/value row, board row and index document, in one read transaction
    (:func:`tmy.store.sqlite.reading.read_rows` plus the index)."""
    return read_rows(db, _index_entries)


def _index_entries(db: sqlite3.Connection) -> list[tuple[str, Any, float | None]]:
    docs = db.execute(
        "SELECT s.name, d.doc, d.len, d.ord, d.tf FROM ix_docs AS d JOIN ix_ns AS s ON s.id = d.ns"
    ).fetchall()
    return [
        doc_entry(ns, IndexDoc(doc, json.loads(tf), length, order))
        for ns, doc, length, order, tf in docs
    ]
