"""``rank_of`` / ``rank_above`` equal a brute-force count on random boards (every backend),
and the SQLite order-statistics counts (tmy.store.sqlite.rank_counts) behind them: kept in
step with the rows through updates, removals and restores, built once for an older file,
and read by eight bounded index ranges."""

from __future__ import annotations

import itertools
import math
import random
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy.store import Store
from tmy.store.base import Snapshot
from tmy.store.sqlite import SQLiteStore
from tmy.store.sqlite.rank_counts import ABOVE, counts_of, score_key

BOARDS = ("console/points", "qq/points")
POOL = [
    0,
    -0.0,
    1,
    -1,
    2.5,
    -2.5,
    1e300,
    -1e300,
    2**53,
    2**53 + 2,
    -(2**60),
    5e-324,
    -5e-324,
    0.1,
    0.30000000000000004,
    7,
    7,
    7.0,
    123456789.125,
]


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_store_url"))


def key(board: str, user: str) -> str:
    return f"var/user/{board.split('/')[0]}/{user}/points"


def draw(rng: random.Random) -> Any:
    """A score: mostly from a small pool (ties, extremes, signs), sometimes random."""
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(POOL)
    if roll < 0.8:
        return rng.randint(-1000, 1000)
    return rng.uniform(-1e6, 1e6)


def brute(board: dict[str, float], member: str) -> int | None:
    if member not in board:
        return None
    return 1 + sum(1 for s in board.values() if s > board[member])


async def check(store: Store, boards: dict[str, dict[str, float]], users: list[str]) -> None:
    for board, members in boards.items():
        for user in users:
            assert await store.rank_of(board, user) == brute(members, user), (board, user)
        for score in (0, -0.0, 7, 1e300, -1e300, 5e-324, 0.5):
            want = sum(1 for s in members.values() if s > score)
            assert await store.rank_above(board, score) == want, (board, score)


async def test_rank_of_equals_a_brute_force_count_through_updates_and_removals(
    store: Store,
) -> None:
    rng = random.Random(2121)
    users = [f"u{i:03d}" for i in range(60)]
    boards: dict[str, dict[str, float]] = {board: {} for board in BOARDS}
    for step in range(400):
        board, user = rng.choice(BOARDS), rng.choice(users)
        value: Any = draw(rng) if rng.random() < 0.85 else rng.choice(["x", None, True])
        await store.set(key(board, user), value)
        await store.rank_sync(board, user, key(board, user))
        if isinstance(value, bool) or not isinstance(value, int | float):
            boards[board].pop(user, None)
        else:
            boards[board][user] = float(value)
        if step % 100 == 99:
            await check(store, boards, users)
    await check(store, boards, users)


async def test_rank_of_after_a_restore_equals_a_brute_force_count(
    store: Store, tmp_path: Path
) -> None:
    rng = random.Random(7)
    users = [f"u{i:03d}" for i in range(80)]
    ranks = []
    boards: dict[str, dict[str, float]] = {board: {} for board in BOARDS}
    entries = []
    for board in BOARDS:
        for user in users:
            if rng.random() < 0.8:
                score = float(draw(rng))
                ranks.append((board, user, score, None))
                entries.append((key(board, user), score, None))
                boards[board][user] = score
    await store.set(key(BOARDS[0], "gone"), 99)
    await store.rank_sync(BOARDS[0], "gone", key(BOARDS[0], "gone"))
    await store.restore(Snapshot(sorted(entries), sorted(ranks)), replace=True)
    await check(store, boards, [*users, "gone"])
    # merge over it: moved members move their counts
    moved = [(b, m, s + 1, n) for b, m, s, n in ranks[::3]]
    await store.restore(
        Snapshot(sorted((key(b, m), s, None) for b, m, s, _ in moved), moved), replace=False
    )
    for board, member, score, _ in moved:
        boards[board][member] = score
    await check(store, boards, users)


def test_score_key_keeps_the_order_of_floats_and_reads_minus_zero_as_zero() -> None:
    rng = random.Random(3)
    floats = [float(x) for x in POOL] + [rng.uniform(-1e9, 1e9) for _ in range(2000)]
    floats += [struct.unpack(">d", rng.randbytes(8))[0] for _ in range(2000)]
    floats = [f for f in floats if math.isfinite(f)] + [math.inf, -math.inf]
    rng.shuffle(floats)
    for a, b in itertools.pairwise(floats):
        assert (score_key(a) < score_key(b)) == (a < b), (a, b)
        assert (score_key(a) == score_key(b)) == (a == b), (a, b)
        assert -(2**63) <= score_key(a) < 2**63


def _counts_table(path: Path) -> dict[tuple[str, int, int], int]:
    with sqlite3.connect(path) as db:
        return {(b, lv, p): n for b, lv, p, n in db.execute("SELECT * FROM rank_counts")}


def _counts_from_rows(path: Path) -> dict[tuple[str, int, int], int]:
    with sqlite3.connect(path) as db:
        return dict(counts_of(db.execute("SELECT board, score FROM ranks")))


async def test_sqlite_counts_stay_equal_to_a_recount_and_keep_no_empty_nodes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "counts.db"
    store = SQLiteStore(path)
    await store.open()
    rng = random.Random(11)
    try:
        for _ in range(500):
            user = f"u{rng.randrange(40)}"
            value = draw(rng) if rng.random() < 0.8 else "gone"
            await store.set(key(BOARDS[0], user), value)
            await store.rank_sync(BOARDS[0], user, key(BOARDS[0], user))
    finally:
        await store.close()
    table = _counts_table(path)
    assert table == _counts_from_rows(path)
    assert all(n > 0 for n in table.values())


async def test_sqlite_replace_clears_the_counts(tmp_path: Path) -> None:
    path = tmp_path / "replace.db"
    store = SQLiteStore(path)
    await store.open()
    try:
        for i in range(20):
            await store.set(key(BOARDS[0], f"u{i}"), i)
            await store.rank_sync(BOARDS[0], f"u{i}", key(BOARDS[0], f"u{i}"))
        await store.restore(
            Snapshot([(key(BOARDS[1], "a"), 3, None)], [(BOARDS[1], "a", 3, None)]), replace=True
        )
        assert await store.rank_above(BOARDS[0], -100) == 0
        assert await store.rank_of(BOARDS[1], "a") == 1
    finally:
        await store.close()
    assert _counts_table(path) == _counts_from_rows(path)
    assert {b for b, _, _ in _counts_table(path)} == {BOARDS[1]}


async def test_sqlite_file_without_counts_gets_them_built_once_at_open(tmp_path: Path) -> None:
    """A file written before rank_counts existed (its ranks rows, no counts) is counted at
    open; rank_of then agrees with the rows."""
    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    await store.open()
    scores = {f"u{i}": float(i % 7 - 3) for i in range(50)}
    for user, score in scores.items():
        await store.set(key(BOARDS[0], user), score)
        await store.rank_sync(BOARDS[0], user, key(BOARDS[0], user))
    await store.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE rank_counts")  # as an older tmy left the file
    store = SQLiteStore(path)
    await store.open()
    try:
        for user in scores:
            assert await store.rank_of(BOARDS[0], user) == brute(scores, user)
    finally:
        await store.close()
    assert _counts_table(path) == _counts_from_rows(path)
    with sqlite3.connect(path) as db:  # counts an older tmy left out of step: rebuilt too
        db.execute("DELETE FROM rank_counts WHERE level = 8")
        db.execute("UPDATE rank_counts SET n = n + 1 WHERE level = 1")
    store = SQLiteStore(path)
    await store.open()
    await store.close()
    assert _counts_table(path) == _counts_from_rows(path)


async def test_sqlite_rank_of_reads_eight_bounded_primary_key_ranges(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "plan.db")
    await store.open()
    await store.close()
    with sqlite3.connect(tmp_path / "plan.db") as db:
        plan = [row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + ABOVE, ["b", 1, 0, 0] * 8)]
    searches = [line for line in plan if "rank_counts" in line]
    assert len(searches) == 8
    for line in searches:  # an index range on both ends, never a scan of the board
        assert line.startswith("SEARCH") and "PRIMARY KEY" in line, line
        assert "prefix>? AND prefix<?" in line, line
