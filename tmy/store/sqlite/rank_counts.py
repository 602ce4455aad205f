"""An order-statistics index for the SQLite boards: ``rank_of`` in O(log n).

Counting the index entries above a member's score costs one step per member
ranked above it (179 ms for the last of 1,000,000). Instead every score is
mapped to an order-preserving signed 64-bit integer (:func:`score_key`: the
IEEE-754 bits, the lower 63 flipped for negative numbers, ``-0.0`` read as
``0.0``), and a radix-256 count trie over those keys is kept in the table
``rank_counts(board, level, prefix, n)`` (PRIMARY KEY (board, level, prefix),
WITHOUT ROWID): at level L (1..8) the node ``prefix = key >> 8*(8-L)``
counts the board's members whose key starts with that prefix.

* A member whose key changes takes 1 off its old key's 8 nodes (deleting the
  ones that reach 0) and adds 1 to its new key's 8: :func:`move`, run by the
  caller inside the transaction that writes the ``ranks`` row, so the counts
  and the rows never disagree.
* The members scoring strictly above a key are, for each level, those in the
  sibling nodes with a larger last digit: :func:`count_above` sums one indexed
  range of at most 255 rows per level — 8 ranges, whatever the member's place
  and the board's size.
* :func:`rebuild` recounts every board from ``ranks`` (a file written before
  this table existed, or whose counts disagree with its rows: checked at open).
"""

from __future__ import annotations

import sqlite3
import struct
from collections import Counter
from collections.abc import Iterable

LEVELS = 8

SCHEMA = """
CREATE TABLE IF NOT EXISTS rank_counts (
  board TEXT NOT NULL, level INTEGER NOT NULL, prefix INTEGER NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY (board, level, prefix)
) WITHOUT ROWID;
"""
_ADD = (
    "INSERT INTO rank_counts (board, level, prefix, n) VALUES (?, ?, ?, 1) "
    "ON CONFLICT (board, level, prefix) DO UPDATE SET n = n + 1"
)
_TAKE = "UPDATE rank_counts SET n = n - 1 WHERE board = ? AND level = ? AND prefix = ?"
_PRUNE = "DELETE FROM rank_counts WHERE board = ? AND level = ? AND prefix = ? AND n <= 0"
_SIBLINGS = (
    "SELECT coalesce(sum(n), 0) FROM rank_counts "
    "WHERE board = ? AND level = ? AND prefix > ? AND prefix <= ?"
)
# one statement, eight indexed ranges: the members above a key
ABOVE = "SELECT " + " + ".join(f"({_SIBLINGS})" for _ in range(LEVELS))


def score_key(score: float) -> int:
    """``score`` as a signed 64-bit integer in the same order (``-0.0`` is ``0.0``)."""
    score = float(score)
    if score == 0.0:
        score = 0.0
    (bits,) = struct.unpack(">q", struct.pack(">d", score))
    return bits ^ 0x7FFF_FFFF_FFFF_FFFF if bits < 0 else bits


def prefixes(key: int) -> list[tuple[int, int]]:
    """``key``'s trie nodes: (level, prefix) for levels 1..8 (arithmetic shifts)."""
    return [(level, key >> 8 * (LEVELS - level)) for level in range(1, LEVELS + 1)]


def move(db: sqlite3.Connection, board: str, old: float | None, new: float | None) -> None:
    """A member of ``board`` went from score ``old`` to ``new`` (None: absent)."""
    old_key = None if old is None else score_key(old)
    new_key = None if new is None else score_key(new)
    if old_key == new_key:
        return
    if old_key is not None:
        nodes = [(board, level, prefix) for level, prefix in prefixes(old_key)]
        db.executemany(_TAKE, nodes)
        db.executemany(_PRUNE, nodes)
    if new_key is not None:
        db.executemany(_ADD, [(board, level, prefix) for level, prefix in prefixes(new_key)])


def count_above(db: sqlite3.Connection, board: str, score: float) -> int:
    """Members of ``board`` scoring strictly above ``score``: 8 ranges of <= 255 rows."""
    args: list[object] = []
    for level, prefix in prefixes(score_key(score)):
        top = 127 if level == 1 else prefix | 0xFF  # the last sibling: same parent
        args += [board, level, prefix, top]
    return int(db.execute(ABOVE, args).fetchone()[0])


def counts_of(rows: Iterable[tuple[str, float]]) -> Counter[tuple[str, int, int]]:
    """The trie nodes' counts for (board, score) rows."""
    counts: Counter[tuple[str, int, int]] = Counter()
    for board, score in rows:
        for level, prefix in prefixes(score_key(score)):
            counts[board, level, prefix] += 1
    return counts


def rebuild(db: sqlite3.Connection) -> None:
    """Recount every board from ``ranks`` (inside the caller's transaction)."""
    counts = counts_of(db.execute("SELECT board, score FROM ranks"))
    db.execute("DELETE FROM rank_counts")
    db.executemany(
        "INSERT INTO rank_counts (board, level, prefix, n) VALUES (?, ?, ?, ?)",
        [(b, level, prefix, n) for (b, level, prefix), n in counts.items()],
    )


def out_of_step(db: sqlite3.Connection) -> bool:
    """True when the counts' total differs from the ``ranks`` rows' (a file written
    before ``rank_counts`` existed, or by a tmy that did not keep it)."""
    rows = db.execute("SELECT count(*) FROM ranks").fetchone()[0]
    counted = db.execute("SELECT coalesce(sum(n), 0) FROM rank_counts WHERE level = 1").fetchone()[
        0
    ]
    return bool(rows != counted)
