"""tmy.store.joined: reads of one loop turn joined into one get_many, on SQLite and Redis.

The first caller of a turn leads the batch and reads it itself; the ones that
joined get their own values, and still do when the leader is cancelled."""

from __future__ import annotations

import asyncio

from tmy.store.base import MISSING, Store
from tmy.store.joined import ReadBatch


async def test_one_turn_of_readers_gets_each_its_own_values(store: Store) -> None:
    await store.set("r/a", 1)
    await store.set("r/b", [2])
    batch = ReadBatch()
    got = await asyncio.gather(
        batch.get_many(store, ["r/a", "r/x"]),
        batch.get_many(store, ["r/b"]),
        batch.get_many(store, ["r/a", "r/b"]),
    )
    assert got == [[1, MISSING], [[2]], [1, [2]]]


async def test_a_reader_alone_reads_at_once(store: Store) -> None:
    await store.set("r/a", "one")
    batch = ReadBatch()
    assert await batch.get_many(store, ["r/a"]) == ["one"]
    assert await batch.get_many(store, ["r/a", "r/none"]) == ["one", MISSING]


async def test_the_joined_readers_are_answered_when_the_leader_is_cancelled(
    store: Store,
) -> None:
    await store.set("r/a", "A")
    await store.set("r/b", "B")
    batch = ReadBatch()
    leader = asyncio.ensure_future(batch.get_many(store, ["r/a"]))
    follower = asyncio.ensure_future(batch.get_many(store, ["r/b", "r/a"]))
    await asyncio.sleep(0)  # the leader waits for its turn's other readers; the follower joins
    leader.cancel()
    assert await follower == ["B", "A"]
    assert leader.cancelled()
    assert await batch.get_many(store, ["r/a"]) == ["A"]  # a new batch, a new leader


async def test_a_failed_read_fails_every_reader_of_the_batch(store: Store) -> None:
    batch = ReadBatch()
    bad = "r/\ud800"  # a lone surrogate: every store refuses the key before reading
    results = await asyncio.gather(
        batch.get_many(store, ["r/a"]),
        batch.get_many(store, [bad]),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) for r in results), results
