"""The arrivals' de-duplication (tmy/adapters/dedup.py ``Arrivals``) and the
stores' ``claim_many``: two daemons sharing a SQLite file or a Redis, chat order, replays,
a failing store, close() during a claim, batches past CLAIM_ROWS with keys listed twice."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from tmy.adapters.dedup import Arrivals, Deliveries
from tmy.store.redis import RedisStore
from tmy.store.sqlite import SQLiteStore
from tmy.store.sqlite.connection import CLAIM_ROWS


class Daemon:
    """One daemon's arrivals: what it accepted and refused, per chat, in order."""

    def __init__(self, store: Any) -> None:
        self.accepted: dict[str, list[str]] = {}
        self.refused: list[str] = []
        self.arrivals: Arrivals[str, str] = Arrivals(
            Deliveries(store, "onebot"),
            lambda chat, item: self.accepted.setdefault(chat, []).append(item),
            lambda chat, item: self.refused.append(item),
        )


async def feed_two(a: Daemon, b: Daemon, ids: int, passes: int) -> None:
    """Both daemons get every message (in their own shuffled passes); chat = id % 7."""
    rng = random.Random(7)
    for daemon in (a, b):
        order = list(range(ids))
        for start in range(0, ids, ids // passes):
            chunk = order[start : start + ids // passes]
            for i in chunk:
                daemon.arrivals.put("9", str(i), f"c{i % 7}", str(i))
            if rng.random() < 0.7:
                await asyncio.sleep(0)
    for _ in range(200):
        await asyncio.sleep(0.01)
        handed = sum(len(v) for d in (a, b) for v in d.accepted.values())
        if handed + len(a.refused) + len(b.refused) == 2 * ids:
            break


def check_exact(a: Daemon, b: Daemon, ids: int) -> None:
    runs: dict[str, int] = {}
    for daemon in (a, b):
        for chat, items in daemon.accepted.items():
            assert items == sorted(items, key=int), f"{chat}: order lost"
            for item in items:
                runs[item] = runs.get(item, 0) + 1
    assert runs == {str(i): 1 for i in range(ids)}


async def test_two_daemons_on_one_sqlite_file_run_each_message_once(tmp_path: Path) -> None:
    stores = [SQLiteStore(tmp_path / "s.db"), SQLiteStore(tmp_path / "s.db")]
    for store in stores:
        await store.open()
    try:
        a, b = Daemon(stores[0]), Daemon(stores[1])
        task = asyncio.create_task(feed_two(b, a, 600, 13))
        await feed_two(a, b, 600, 7)
        await task
        check_exact(a, b, 600)
    finally:
        for store in stores:
            await store.close()


@pytest.mark.redis
async def test_two_daemons_on_one_redis_run_each_message_once(redis_server: Any) -> None:
    server = redis_server()
    stores = [RedisStore(server.url, prefix="dd"), RedisStore(server.url, prefix="dd")]
    for store in stores:
        await store.open()
    try:
        a, b = Daemon(stores[0]), Daemon(stores[1])
        task = asyncio.create_task(feed_two(b, a, 600, 13))
        await feed_two(a, b, 600, 7)
        await task
        check_exact(a, b, 600)
    finally:
        for store in stores:
            await store.close()


async def test_sqlite_claim_many_past_claim_rows_with_keys_listed_twice(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    await store.open()
    other = SQLiteStore(tmp_path / "c.db")
    await other.open()
    try:
        assert await other.claim("k5", 600) is True  # another daemon holds k5
        assert await other.claim("short", 0.001) is True  # and an expired claim
        await asyncio.sleep(0.01)
        keys = [f"k{i}" for i in range(3 * CLAIM_ROWS + 5)]
        keys[CLAIM_ROWS] = "k1"  # listed again in the next statement
        keys[CLAIM_ROWS - 1] = "k2"  # and twice in the same statement (k2 at index 2)
        keys[-1] = "short"
        keys.append("short")  # the expired key twice, both in the last statement
        answers = await store.claim_many(keys, 600)
        seen: set[str] = set()
        expected = []
        for key in keys:
            expected.append(key not in seen and key != "k5")
            seen.add(key)
        assert answers == expected
        # all of them taken now, for both daemons
        again = await other.claim_many(sorted(set(keys)), 600)
        assert again == [False] * len(set(keys))
    finally:
        await store.close()
        await other.close()


async def test_sqlite_claim_many_of_one_statement_is_atomic_across_connections(
    tmp_path: Path,
) -> None:
    """Two daemons' claim_many of the same keys in autocommit: each key to exactly one."""
    a, b = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "a.db")
    await a.open()
    await b.open()
    try:
        for round_ in range(20):
            keys = [f"r{round_}/{i}" for i in range(CLAIM_ROWS)]
            mine, theirs = await asyncio.gather(
                a.claim_many(keys, 600), b.claim_many(list(reversed(keys)), 600)
            )
            theirs.reverse()
            assert [x != y for x, y in zip(mine, theirs, strict=True)] == [True] * len(keys)
    finally:
        await a.close()
        await b.close()


async def test_a_failing_store_runs_every_message_in_order(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "f.db")
    await store.open()
    daemon = Daemon(store)
    await store.close()  # every claim now fails with StoreError
    for i in range(50):
        daemon.arrivals.put("9", str(i), "c", str(i))
    daemon.arrivals.put("9", "3", "c", "replay")  # this daemon took 3: refused at once
    await asyncio.sleep(0.05)
    assert daemon.accepted == {"c": [str(i) for i in range(50)]}
    assert daemon.refused == ["replay"]


@pytest.mark.redis
async def test_close_during_a_claim_then_put_again(redis_server: Any) -> None:
    server = redis_server()
    store = RedisStore(server.url, prefix="cl")
    await store.open()
    try:
        daemon = Daemon(store)
        for i in range(30):
            daemon.arrivals.put("9", str(i), "c", str(i))
        await asyncio.sleep(0)  # the claims are on the wire
        await daemon.arrivals.close()
        handed = sum(len(v) for v in daemon.accepted.values())
        await asyncio.sleep(0.05)
        assert sum(len(v) for v in daemon.accepted.values()) == handed  # nothing after close
        daemon.arrivals.put("9", "100", "c", "100")
        daemon.arrivals.put("9", "101", "c", "101")
        await asyncio.sleep(0.05)
        assert daemon.accepted["c"][-2:] == ["100", "101"]
        assert daemon.arrivals._task is None
    finally:
        await store.close()


@pytest.mark.redis
async def test_put_while_close_awaits_the_cancelled_claim_keeps_one_claims_task(
    redis_server: Any,
) -> None:
    """A message put while close() waits for the cancelled claims task starts a new task;
    the old task's ending must not forget it (two claims tasks would hand batches on out
    of order)."""
    server = redis_server()
    store = RedisStore(server.url, prefix="cl2")
    await store.open()
    try:
        daemon = Daemon(store)
        daemon.arrivals.put("9", "1", "c", "1")
        await asyncio.sleep(0)
        closing = asyncio.create_task(daemon.arrivals.close())
        await asyncio.sleep(0)  # close() cancelled the task and waits for it
        daemon.arrivals.put("9", "2", "c", "2")
        new_task = daemon.arrivals._task
        await closing
        assert new_task is not None
        assert daemon.arrivals._task is new_task or new_task.done()
        await asyncio.sleep(0.05)
        assert daemon.accepted.get("c") == ["2"]
    finally:
        await store.close()
