"""The SQLite store's ``snapshot`` and ``restore`` (see :mod:`tmy.store.base`).

``snapshot`` is one read transaction: every live row of ``kv`` (but the format
marker) and every board entry as of one moment. On a file it runs on a
connection of its own in a worker thread — WAL lets it read its moment while
this process and others keep writing, and the event loop is not held while a
large store is read and decoded; a ``:memory:`` database (private to its connection) is
read on the store's own connection. Lease rows are never read.

``restore`` checks every entry first (:mod:`tmy.store.snapshot`), then writes
in ``BEGIN IMMEDIATE`` transactions of :data:`~tmy.store.snapshot.BATCH` rows
(other writers get their turn between them); with ``replace`` the first one
also deletes every key (but the format marker) and every board entry (and
the boards' counts: each entry written moves them, as ``rank_sync`` does). The
board entries go after every value, each one re-synced from the value it mirrors
(:func:`~tmy.store.board_keys.board_value_key`: a number sets the score, no value
or another kind removes the entry), so an entry that lagged its value in the
snapshot is corrected; an entry of a board id the engine did not make keeps its
score. A TTL
counts from the moment its batch is written.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from tmy.errors import StoreError
from tmy.store.base import FORMAT_KEY, Snapshot
from tmy.store.board_keys import board_value_key
from tmy.store.snapshot import batches, checked_ranks, encoded_entries
from tmy.store.sqlite.connection import UPSERT
from tmy.store.sqlite.ranks import RANK_PUT, SQLiteRanks, put_rank, value_score
from tmy.store.sqlite.reading import read_rows


class SQLiteSnapshots(SQLiteRanks):
    """``snapshot`` and ``restore`` on SQLite (see the module doc)."""

    @staticmethod
    def _read_snapshot(db: sqlite3.Connection) -> Snapshot:
        """What a snapshot reads (:func:`read_rows`; the index's mixin reads its documents too)."""
        return read_rows(db)

    async def snapshot(self) -> Snapshot:
        """Every live key and board entry (and index document), from one read transaction."""
        self._conn()  # refuse a closed store at once
        if isinstance(self.path, Path):
            return await asyncio.to_thread(self._read_file)
        return await self._run(self._read_snapshot, "snapshot")

    def _read_file(self) -> Snapshot:
        """:meth:`_read_snapshot` on a connection of its own (run in a worker thread)."""
        try:
            db = sqlite3.connect(self.path, timeout=self.lock_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite {self.path}: snapshot failed: {exc}") from exc
        try:
            return self._read_snapshot(db)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite {self.path}: snapshot failed: {exc}") from exc
        finally:
            db.close()

    async def restore(self, snapshot: Snapshot, *, replace: bool) -> int:
        """Write ``snapshot`` in transactions of a few hundred rows (see the module doc)."""
        rows = encoded_entries(snapshot, self.max_value_bytes)
        ranks = checked_ranks(snapshot)
        wipe = replace

        def write(
            db: sqlite3.Connection,
            chunk: list[tuple[str, bytes, float | None]],
            board_rows: list[tuple[str, str, float, str | None]],
            wipe: bool,
        ) -> None:
            def body() -> None:
                now = time.time()
                if wipe:
                    db.execute("DELETE FROM kv WHERE key != ?", (FORMAT_KEY,))
                    db.execute("DELETE FROM ranks")
                    db.execute("DELETE FROM rank_counts")
                db.executemany(
                    UPSERT,
                    [(k, raw.decode(), None if t is None else now + t) for k, raw, t in chunk],
                )
                for board, member, score, name in board_rows:
                    key = board_value_key(board, member)
                    # the entry as its (restored) value has it
                    synced = score if key is None else value_score(db, key)
                    put_rank(db, RANK_PUT, board, member, synced, name)

            self._in_transaction(db, body)

        work: list[tuple[list[Any], list[Any]]] = [(list(c), []) for c in batches(rows)]
        work += [([], list(c)) for c in batches(ranks)]
        if not work and wipe:
            work = [([], [])]
        for chunk, board_rows in work:
            await self._run(
                lambda db, c=chunk, b=board_rows, w=wipe: write(db, c, b, w),
                f"restore of {len(chunk) + len(board_rows)} entries",
            )
            wipe = False
        return len(rows)
