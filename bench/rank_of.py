"""SQLite ``rank_of``: the time for the LAST member of a board of 10,000 / 100,000 /
1,000,000 members, against a floor measured in the same run.

Each size gets its own SQLite file in a temporary directory: the ``ranks`` rows
(member ``m<i>``, a distinct score each, shuffled) are inserted directly, then
``SQLiteStore.open()`` builds the order-statistics counts (``rank_counts``) as it
does for a file written before they existed (its time is reported). Then, through
the store's public API on the event loop:

* ``rank_of(board, last)`` — the member with the lowest score (rank n: the worst
  case of the old count of every index row above it);
* the floor: ``rank_entry(board, last)`` — one indexed primary-key lookup of the
  same row through the same call path;
* for reference, the old statement (``count(*)`` of the index rows above the
  member's score), on a plain sqlite3 connection, a few runs.

``rank_of`` is flat when its median at 1,000,000 is within 2x of its median at
10,000 (and a small multiple of the floor), whatever the member's place.

    python bench/rank_of.py            # 10k, 100k, 1M
    python bench/rank_of.py --quick    # 10k, 100k
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import common

from tmy.store.sqlite import SQLiteStore

BOARD = "console/points"
OLD_COUNT = (
    "SELECT (SELECT count(*) FROM ranks AS above WHERE above.board = me.board "
    "AND above.score > me.score) FROM ranks AS me WHERE me.board = ? AND me.member = ?"
)


def fill(path: Path, n: int) -> None:
    """``n`` board rows written straight into a new file (no counts yet)."""
    scores = list(range(n))
    random.Random(n).shuffle(scores)
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE ranks (board TEXT NOT NULL, member TEXT NOT NULL, score REAL NOT NULL,"
            " name TEXT, PRIMARY KEY (board, member));"
            "CREATE INDEX ranks_score ON ranks (board, score, member);"
        )
        db.executemany(
            "INSERT INTO ranks VALUES (?, ?, ?, NULL)",
            ((BOARD, f"m{i}", float(s) * 1.5 - 1000) for i, s in enumerate(scores)),
        )
    return None


async def timed(call: Any, reps: int) -> list[float]:
    """Microseconds per call of ``await call()``, ``reps`` times (after a warm-up)."""
    for _ in range(20):
        await call()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        await call()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


async def one_size(tmp: Path, n: int, reps: int) -> dict[str, Any]:
    path = tmp / f"board-{n}.db"
    fill(path, n)
    with sqlite3.connect(path) as db:
        last = db.execute(
            "SELECT member FROM ranks WHERE board = ? ORDER BY score LIMIT 1", (BOARD,)
        ).fetchone()[0]
    store = SQLiteStore(path)
    t0 = time.perf_counter()
    await store.open()  # builds rank_counts once
    build_s = time.perf_counter() - t0
    try:
        assert await store.rank_of(BOARD, last) == n
        rank = await timed(lambda: store.rank_of(BOARD, last), reps)
        floor = await timed(lambda: store.rank_entry(BOARD, last), reps)
        top = await timed(lambda: store.rank_of(BOARD, "m0"), reps)
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        old_reps = 3 if n >= 1_000_000 else 10
        old = []
        for _ in range(old_reps):
            t0 = time.perf_counter_ns()
            assert db.execute(OLD_COUNT, (BOARD, last)).fetchone()[0] == n - 1
            old.append((time.perf_counter_ns() - t0) / 1000)
        nodes = db.execute("SELECT count(*) FROM rank_counts").fetchone()[0]
    path.unlink()
    return {
        "members": n,
        "counts_built_s": round(build_s, 2),
        "count_nodes": nodes,
        "rank_of_last_us": round(statistics.median(rank), 1),
        "rank_of_last_p99_us": round(common.percentile(sorted(rank), 99), 1),
        "rank_of_m0_us": round(statistics.median(top), 1),
        "floor_pk_lookup_us": round(statistics.median(floor), 1),
        "old_count_us": round(statistics.median(old), 1),
        "reps": reps,
    }


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    rows = []
    with common.temp_dir("tmy-bench-rank-of-") as tmp:
        for n in sizes:
            rows.append(asyncio.run(one_size(tmp, n, args.reps)))
            r = rows[-1]
            print(f"  {n:,} members: rank_of(last) {r['rank_of_last_us']} us", file=sys.stderr)
    base, biggest = rows[0], rows[-1]
    growth = biggest["rank_of_last_us"] / base["rank_of_last_us"]
    over_floor = biggest["rank_of_last_us"] / biggest["floor_pk_lookup_us"]
    flat = growth < 2.0
    headers = [
        "members",
        "rank_of(last) µs",
        "p99 µs",
        "rank_of(some member) µs",
        "floor: pk lookup µs",
        "old count(*) µs",
        "counts built s",
        "count nodes",
    ]
    body = [
        [
            r["members"],
            r["rank_of_last_us"],
            r["rank_of_last_p99_us"],
            r["rank_of_m0_us"],
            r["floor_pk_lookup_us"],
            r["old_count_us"],
            r["counts_built_s"],
            r["count_nodes"],
        ]
        for r in rows
    ]
    print(common.table("SQLite rank_of for the last member (median of runs)", headers, body))
    print(
        f"\n  rank_of at {biggest['members']:,} / at {base['members']:,}: {growth:.2f}x; "
        f"{over_floor:.1f}x the floor — flat: {common.verdict(flat)}"
    )
    if not args.no_write:
        payload = {"rows": rows, "growth": round(growth, 2), "flat": flat}
        path = common.write_result("rank_of", payload, quick=args.quick)
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
