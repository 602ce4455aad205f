"""Leaderboard boards (Store.rank_sync / rank_top / rank_of) on every backend (real SQLite
files, a real Redis, a real Redis Cluster), the metered passthrough and the overlay that
``explain`` runs on (its board changes never reach the real store)."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy import metrics
from tmy.errors import StoreError
from tmy.store import MISSING, Store
from tmy.store.metered import metered
from tmy.store.overlay import OverlayStore
from tmy.store.sqlite import SQLiteStore

BOARD = "console/points"


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_store_url"))


def key(user: str) -> str:
    return f"var/user/console/{user}/points"


async def put(store: Store, user: str, value: Any, name: str | None = None) -> float | None:
    """Write ``user``'s value, then sync the board, as the engine does after a write."""
    await store.set(key(user), value)
    return await store.rank_sync(BOARD, user, key(user), name)


async def test_top_orders_by_score_then_member_descending_and_ranks_share_ties(
    store: Store,
) -> None:
    scores = {"ann": 10, "bob": 30, "cat": 20, "dan": 20, "eve": 5, "fay": 20, "gus": 1.5}
    for user, score in scores.items():
        assert await put(store, user, score, user.upper()) == score
    assert await store.rank_top(BOARD, 10) == [
        ("bob", 30, "BOB"),
        ("fay", 20, "FAY"),  # ties: member descending (Redis ZREVRANGE order)
        ("dan", 20, "DAN"),
        ("cat", 20, "CAT"),
        ("ann", 10, "ANN"),
        ("eve", 5, "EVE"),
        ("gus", 1.5, "GUS"),
    ]
    assert await store.rank_top(BOARD, 2) == [("bob", 30, "BOB"), ("fay", 20, "FAY")]
    assert await store.rank_top(BOARD, 0) == []
    ranks = {user: await store.rank_of(BOARD, user) for user in scores}
    assert ranks == {"bob": 1, "cat": 2, "dan": 2, "fay": 2, "ann": 5, "eve": 6, "gus": 7}
    assert await store.rank_of(BOARD, "nobody") is None
    assert await store.rank_of("console/other", "bob") is None
    assert await store.rank_top("console/other", 5) == []
    top = await store.rank_top(BOARD, 10)
    assert [type(score) for _, score, _ in top] == [int] * 6 + [float]  # 12, not 12.0
    assert await store.rank_above(BOARD, 20) == 1
    assert await store.rank_above(BOARD, 19.5) == 4
    assert await store.rank_entry(BOARD, "dan") == (20, "DAN")
    assert await store.rank_entry(BOARD, "nobody") is None


async def test_negative_large_and_float_scores_order_numerically(store: Store) -> None:
    for user, score in {"a": -3, "b": 2**40, "c": 0.25, "d": -0.5, "e": 1e300}.items():
        await put(store, user, score)
    top = await store.rank_top(BOARD, 5)
    assert [(m, s) for m, s, _ in top] == [
        ("e", 1e300),
        ("b", 2**40),
        ("c", 0.25),
        ("d", -0.5),
        ("a", -3),
    ]
    assert await store.rank_of(BOARD, "a") == 5


async def test_a_value_that_is_not_a_number_or_gone_removes_the_member(store: Store) -> None:
    await put(store, "zed", 1, "Zed")
    for value in ("12", True, False, None, [1], {"n": 1}):
        await put(store, "ann", 5, "Ann")
        assert await store.rank_of(BOARD, "ann") == 1
        assert await put(store, "ann", value) is None, value
        assert await store.rank_of(BOARD, "ann") is None, value
        assert await store.rank_top(BOARD, 5) == [("zed", 1, "Zed")]
    await put(store, "ann", 5, "Ann")
    await store.delete(key("ann"))
    assert await store.rank_sync(BOARD, "ann", key("ann")) is None
    assert await store.rank_of(BOARD, "ann") is None
    await store.set(key("ann"), 7, ttl=0.05)
    assert await store.rank_sync(BOARD, "ann", key("ann")) == 7
    while await store.get(key("ann")) is not MISSING:  # expires (a did-not-hang loop)
        await asyncio.sleep(0.02)
    assert await store.rank_sync(BOARD, "ann", key("ann")) is None
    assert await store.rank_top(BOARD, 5) == [("zed", 1, "Zed")]


async def test_names_are_kept_unless_a_new_one_is_given(store: Store) -> None:
    await put(store, "ann", 1, "Ann")
    await put(store, "ann", 2)  # no name: the old one is kept
    assert await store.rank_top(BOARD, 1) == [("ann", 2, "Ann")]
    await put(store, "ann", 3, "Annie")
    assert await store.rank_top(BOARD, 1) == [("ann", 3, "Annie")]
    await put(store, "bob", 1)
    assert await store.rank_top(BOARD, 2) == [("ann", 3, "Annie"), ("bob", 1, None)]
    await put(store, "ann", "gone")  # removed with its name
    await put(store, "ann", 4)
    assert await store.rank_entry(BOARD, "ann") == (4, None)


async def test_out_of_order_syncs_leave_the_board_equal_to_the_current_value(
    store: Store,
) -> None:
    await store.set(key("ann"), 1)
    await store.set(key("ann"), 2)
    # the sync of the second write arrives first, the first write's sync after it:
    assert await store.rank_sync(BOARD, "ann", key("ann"), "Ann") == 2
    assert await store.rank_sync(BOARD, "ann", key("ann"), "Ann") == 2  # re-reads, not "1"
    assert await store.rank_top(BOARD, 1) == [("ann", 2, "Ann")]


async def test_concurrent_writers_and_delayed_syncs_converge(store: Store) -> None:
    """Many writers increment a few users' points; each write's sync is delayed a
    random moment (so syncs land out of order). Afterwards every board entry equals
    the value, and the order is the values' order."""
    users = ["ann", "bob", "cat", "dan"]
    rng = random.Random(7)
    delays = [rng.random() * 0.01 for _ in range(200)]

    def bump(value: Any) -> tuple[int, int]:
        new = (0 if value is MISSING else value) + 1
        return new, new

    async def writer(i: int) -> None:
        user = users[i % len(users)]
        await store.update(key(user), bump)
        await asyncio.sleep(delays[i])
        await store.rank_sync(BOARD, user, key(user), user.title())

    await asyncio.gather(*(writer(i) for i in range(len(delays))))
    values = dict(zip(users, await store.get_many([key(u) for u in users]), strict=True))
    assert values == {"ann": 50, "bob": 50, "cat": 50, "dan": 50}
    top = await store.rank_top(BOARD, 10)
    assert [(m, s) for m, s, _ in top] == [("dan", 50), ("cat", 50), ("bob", 50), ("ann", 50)]


async def test_two_instances_syncing_one_board_converge(store_url: str, store: Store) -> None:
    from tmy.store import open_store

    other = open_store(store_url)
    await other.open()
    try:

        async def writes(instance: Store, values: list[int]) -> None:
            for value in values:
                await instance.set(key("ann"), value)
                await instance.rank_sync(BOARD, "ann", key("ann"))

        await asyncio.gather(
            writes(store, list(range(0, 60, 2))), writes(other, list(range(1, 60, 2)))
        )
        final = await store.get(key("ann"))
        assert await store.rank_entry(BOARD, "ann") == (final, None)
        assert await other.rank_top(BOARD, 1) == [("ann", final, None)]
    finally:
        await other.close()


async def test_boards_are_refused_bad_ids_and_members(store: Store) -> None:
    with pytest.raises(StoreError, match="non-empty strings"):
        await store.rank_top("", 3)
    with pytest.raises(StoreError, match="members are strings"):
        await store.rank_of(BOARD, 5)  # type: ignore[arg-type]


# -- SQLite specifics ---------------------------------------------------------------------


async def test_sqlite_top_walks_the_score_index(tmp_path: Path) -> None:
    """rank_top reads the (board, score, member) index backwards, no sort (rank_of reads
    the counts instead: tests/store/test_rank_counts.py)."""
    store = SQLiteStore(tmp_path / "plan.db")
    await store.open()
    await store.close()
    with sqlite3.connect(tmp_path / "plan.db") as db:
        top = " ".join(
            row[-1]
            for row in db.execute(
                "EXPLAIN QUERY PLAN SELECT member, score, name FROM ranks WHERE board = ? "
                "ORDER BY score DESC, member DESC LIMIT ?",
                ("b", 3),
            )
        )
    assert "ranks_score" in top and "TEMP B-TREE" not in top  # no sort: an index walk


# -- metered and overlay -------------------------------------------------------------------


async def test_metered_store_passes_boards_through_and_times_them(store: Store) -> None:
    wrapped = metered(store)
    before = _count("rank_top")
    await wrapped.set(key("ann"), 3)
    assert await wrapped.rank_sync(BOARD, "ann", key("ann"), "Ann") == 3
    assert await wrapped.rank_top(BOARD, 3) == [("ann", 3, "Ann")]
    assert await wrapped.rank_of(BOARD, "ann") == 1
    assert _count("rank_top") == before + 1
    assert _count("rank_sync") >= 1 and _count("rank_of") >= 1


def _count(op: str) -> float:
    """How many ``op`` calls ``tmy_store_op_seconds`` has observed (as /metrics shows it)."""
    value = metrics.REGISTRY.get_sample_value("tmy_store_op_seconds_count", {"op": op})
    return value or 0.0


async def test_overlay_layers_its_board_over_the_real_one_and_never_writes_it(
    store: Store,
) -> None:
    for user, score in {"ann": 10, "bob": 20, "cat": 30, "dan": 5}.items():
        await put(store, user, score, user.title())
    real_top = await store.rank_top(BOARD, 10)
    overlay = OverlayStore(store)
    await overlay.set(key("dan"), 25)  # dan climbs to second
    assert await overlay.rank_sync(BOARD, "dan", key("dan")) == 25  # name kept from the real
    await overlay.set(key("cat"), "gone")  # cat leaves the board
    assert await overlay.rank_sync(BOARD, "cat", key("cat")) is None
    await overlay.set(key("eve"), 20)  # a newcomer ties bob
    assert await overlay.rank_sync(BOARD, "eve", key("eve"), "Eve") == 20

    assert await overlay.rank_top(BOARD, 10) == [
        ("dan", 25, "Dan"),
        ("eve", 20, "Eve"),
        ("bob", 20, "Bob"),
        ("ann", 10, "Ann"),
    ]
    assert await overlay.rank_top(BOARD, 1) == [("dan", 25, "Dan")]
    ranks = {u: await overlay.rank_of(BOARD, u) for u in ("dan", "eve", "bob", "ann", "cat")}
    assert ranks == {"dan": 1, "eve": 2, "bob": 2, "ann": 4, "cat": None}
    assert await overlay.rank_above(BOARD, 15) == 3
    assert overlay.board_syncs() == [
        (BOARD, "dan", key("dan"), None),
        (BOARD, "cat", key("cat"), None),
        (BOARD, "eve", key("eve"), "Eve"),
    ]
    # the real store saw none of it
    assert await store.rank_top(BOARD, 10) == real_top
    assert await store.rank_of(BOARD, "cat") == 1
    assert await store.rank_of(BOARD, "eve") is None
    assert await store.get(key("dan")) == 5
    overlay.discard()
    assert await overlay.rank_top(BOARD, 10) == real_top
