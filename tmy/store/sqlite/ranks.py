"""The SQLite store's leaderboard boards (see :mod:`tmy.store.base`).

One table, ``ranks(board, member, score, name)``, keyed by (board, member),
with an index on (board, score, member): ``rank_top`` walks that index
backwards from the board's highest score (O(log N + n)), ties ordered by member
descending (byte order, as Redis's ZREVRANGE); ``rank_of`` finds the member
by its key and sums the order-statistics counts of
:mod:`~tmy.store.sqlite.rank_counts` above its score: 8 indexed ranges of at
most 255 rows, O(log N) whatever its place. ``rank_sync`` reads the value and
updates the board row and its counts in one ``BEGIN IMMEDIATE`` transaction,
so it agrees with the value as it was at that moment, whatever order
concurrent syncs arrive in.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from tmy.store.base import MISSING, rank_score, score_out
from tmy.store.codec import check_board, check_key, decode
from tmy.store.sqlite import rank_counts
from tmy.store.sqlite.connection import SQLiteConnection, is_live

RANK_UPSERT = (
    "INSERT INTO ranks (board, member, score, name) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (board, member) DO UPDATE SET score = excluded.score, "
    "name = coalesce(excluded.name, ranks.name)"
)
RANK_PUT = (  # restore: the name exactly as given (None clears it)
    "INSERT INTO ranks (board, member, score, name) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (board, member) DO UPDATE SET score = excluded.score, name = excluded.name"
)
RANK_DROP = "DELETE FROM ranks WHERE board = ? AND member = ?"
RANK_SCORE = "SELECT score FROM ranks WHERE board = ? AND member = ?"


def value_score(db: sqlite3.Connection, key: str) -> float | None:
    """The board score the live value at ``key`` gives (None: absent or not a number)."""
    row = db.execute("SELECT value, expires FROM kv WHERE key = ?", (key,)).fetchone()
    return rank_score(decode(row[0], key) if is_live(row, time.time()) else MISSING)


def put_rank(
    db: sqlite3.Connection, sql: str, board: str, member: str, score: float | None, name: Any
) -> None:
    """Set (``sql``: an upsert) or drop (``score`` None) one board row and move its
    counts with it, inside the caller's transaction."""
    row = db.execute(RANK_SCORE, (board, member)).fetchone()
    old = None if row is None else float(row[0])
    if score is None:
        if row is not None:
            db.execute(RANK_DROP, (board, member))
    else:
        db.execute(sql, (board, member, score, name))
    rank_counts.move(db, board, old, score)


class SQLiteRanks(SQLiteConnection):
    """Boards on SQLite (see the module doc)."""

    async def rank_sync(
        self, board: str, member: str, key: str, name: str | None = None
    ) -> float | None:
        """Make ``board`` agree with the value at ``key`` in one transaction."""
        check_board(board, member)
        check_key(key)

        def body(db: sqlite3.Connection) -> float | None:
            score = value_score(db, key)
            put_rank(db, RANK_UPSERT, board, member, score, name)
            return None if score is None else score_out(score)

        def op(db: sqlite3.Connection) -> float | None:
            return self._in_transaction(db, lambda: body(db))

        return await self._run(op, f"rank_sync {board!r} {member!r}")

    async def rank_top(self, board: str, n: int) -> list[tuple[str, float, str | None]]:
        """The ``n`` highest entries, from the (board, score, member) index."""
        check_board(board)
        if n <= 0:
            return []
        sql = (
            "SELECT member, score, name FROM ranks WHERE board = ? "
            "ORDER BY score DESC, member DESC LIMIT ?"
        )

        def op(db: sqlite3.Connection) -> list[Any]:
            return db.execute(sql, (board, n)).fetchall()

        rows = await self._run(op, f"rank_top {board!r}")
        return [(member, score_out(score), name) for member, score, name in rows]

    async def rank_of(self, board: str, member: str) -> int | None:
        """1 + the members scoring strictly higher (the counts above its score); None
        when absent. One read transaction: the row and the counts of one moment."""
        check_board(board, member)

        def op(db: sqlite3.Connection) -> int | None:
            db.execute("BEGIN")
            try:
                row = db.execute(RANK_SCORE, (board, member)).fetchone()
                return None if row is None else rank_counts.count_above(db, board, row[0]) + 1
            finally:
                db.execute("COMMIT")

        return await self._run(op, f"rank_of {board!r} {member!r}")

    async def rank_entry(self, board: str, member: str) -> tuple[float, str | None] | None:
        """``member``'s (score, name), or None."""
        check_board(board, member)

        def op(db: sqlite3.Connection) -> Any:
            sql = "SELECT score, name FROM ranks WHERE board = ? AND member = ?"
            return db.execute(sql, (board, member)).fetchone()

        row = await self._run(op, f"rank_entry {board!r} {member!r}")
        return None if row is None else (score_out(row[0]), row[1])

    async def rank_above(self, board: str, score: float) -> int:
        """Members of ``board`` scoring strictly above ``score`` (the counts: O(log N))."""
        check_board(board)

        def op(db: sqlite3.Connection) -> int:
            return rank_counts.count_above(db, board, float(score))

        return await self._run(op, f"rank_above {board!r}")
