"""The Redis store's pipelined writes (tmy/store/redis/pipelined.py): close with
writes queued, a caller cancelled while queued, NOSCRIPT inside a pipeline, the order of
one key's writes, and every reply to its own caller.

Each test starts its own ``redis-server`` (the ``redis_server`` fixture)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tmy.errors import StoreError
from tmy.store.base import MISSING
from tmy.store.redis import RedisStore
from tmy.store.redis.scripts import CAS

pytestmark = [pytest.mark.redis]


async def opened(url: str, **kwargs: Any) -> RedisStore:
    store = RedisStore(url, socket_timeout=2.0, **kwargs)
    await store.open()
    return store


def append(item: str) -> Any:
    def fn(value: Any) -> tuple[list[str], int]:
        new = ([] if value is MISSING else list(value)) + [item]
        return new, len(new)

    return fn


async def test_every_reply_goes_to_its_own_caller(redis_server: Any) -> None:
    """Deletes answer whether THEIR key existed: a reply handed to the wrong caller of a
    pipeline would show as a wrong True/False."""
    server = redis_server()
    store = await opened(server.url, prefix="own")
    try:
        await asyncio.gather(*(store.set(f"k{i}", i) for i in range(0, 200, 2)))
        removed = await asyncio.gather(*(store.delete(f"k{i}") for i in range(200)))
        assert removed == [i % 2 == 0 for i in range(200)]
        got = await store.get_many([f"u{i}" for i in range(50)])
        assert got == [MISSING] * 50
        results = await asyncio.gather(
            *(store.update(f"u{i % 50}", append(str(i))) for i in range(300))
        )
        finals = await store.get_many([f"u{i}" for i in range(50)])
        for i, result in enumerate(results):
            key = i % 50
            assert finals[key][result - 1] == str(i)  # its result names its own position
    finally:
        await store.close()


async def test_close_with_writes_queued_settles_every_caller(redis_server: Any) -> None:
    """close() while writes wait in the queue: every caller hears (returns, or StoreError),
    none waits forever, and each write that returned is in Redis."""
    server = redis_server()
    store = await opened(server.url, prefix="close")
    calls = [asyncio.create_task(store.set(f"c{i}", i)) for i in range(300)]
    for _ in range(3):
        await asyncio.sleep(0)
    await store.close()
    _done, pending = await asyncio.wait(calls, timeout=10)
    assert not pending, f"{len(pending)} writes never answered after close()"
    returned = []
    for i, call in enumerate(calls):
        exc = call.exception()
        assert exc is None or isinstance(exc, StoreError), repr(exc)
        if exc is None:
            returned.append(i)
    check = await opened(server.url, prefix="close")
    try:
        values = await check.get_many([f"c{i}" for i in returned])
        assert values == returned
    finally:
        await check.close()
    await store.open()
    try:
        await asyncio.gather(*(store.set(f"r{i}", i) for i in range(100)))
        assert await store.get_many([f"r{i}" for i in range(100)]) == list(range(100))
    finally:
        await store.close()


async def test_a_write_cancelled_while_queued_is_not_sent(redis_server: Any) -> None:
    server = redis_server()
    store = await opened(server.url, prefix="cq")
    try:
        leader = asyncio.create_task(store.set("lead", 1))
        await asyncio.sleep(0)  # the leader is on the wire
        queued = [asyncio.create_task(store.set(f"q{i}", i)) for i in range(20)]
        await asyncio.sleep(0)  # each is in the queue
        for call in queued[::2]:
            call.cancel()
        await leader
        await asyncio.gather(*queued, return_exceptions=True)
        values = await store.get_many([f"q{i}" for i in range(20)])
        assert values == [MISSING if i % 2 == 0 else i for i in range(20)]
        assert not store._put_queue and not store._putting
    finally:
        await store.close()


async def test_script_flush_under_pipelined_sets_and_updates(redis_server: Any) -> None:
    """Redis lost its scripts (SCRIPT FLUSH, as after a restart): every queued write still
    lands once."""
    server = redis_server()
    store = await opened(server.url, prefix="ns")
    admin = server.client()
    try:
        for round_ in range(3):
            admin.script_flush()
            sets = [store.set(f"s{i}", round_) for i in range(100)]
            updates = [store.update(f"n{i % 20}", append(f"{round_}.{i}")) for i in range(100)]
            await asyncio.gather(*sets, *updates)
        assert await store.get_many([f"s{i}" for i in range(100)]) == [2] * 100
        finals = await store.get_many([f"n{i}" for i in range(20)])
        assert all(len(v) == 15 for v in finals)
    finally:
        admin.close()
        await store.close()


async def test_same_key_order_kept_when_only_one_script_is_missing(redis_server: Any) -> None:
    """set(x) queued before delete-free update(x): after a restart in which CAS was loaded
    again (by another write) and PUT not yet, the pipeline [PUT x, CAS x] applies the CAS,
    then the resent PUT — x ends as the set's value though the update came after it."""
    server = redis_server()
    store = await opened(server.url, prefix="order")
    admin = server.client()
    try:
        await store.set("x", ["base"])
        await store.get("x")  # the cache knows x
        admin.script_flush()
        admin.script_load(CAS)  # CAS back (e.g. another daemon's update), PUT not yet
        # the leader: an update of another key (CAS is loaded, so no NOSCRIPT on it)
        leader = asyncio.create_task(store.update("y", append("y")))
        await asyncio.sleep(0)
        first = asyncio.create_task(store.set("x", ["set"]))
        await asyncio.sleep(0)
        second = asyncio.create_task(store.update("x", append("after-set")))
        await asyncio.gather(leader, first, second)
        # in call order: set x = ["set"], then the update appends
        assert await store.get("x") == ["set", "after-set"]
    finally:
        admin.close()
        await store.close()


async def test_cancellations_under_pipelined_updates_apply_each_return_once(
    redis_server: Any,
) -> None:
    """Increments of a few hot keys from many tasks, a third of them cancelled at random
    moments: every increment that returned is in the final value exactly once (its result
    unique), a cancelled or failed one counted at most once."""
    import random

    server = redis_server()
    store = await opened(server.url, prefix="cx")
    rng = random.Random(5)
    keys = [f"h{i}" for i in range(4)]
    returned: dict[str, list[int]] = {k: [] for k in keys}
    unsure: dict[str, int] = dict.fromkeys(keys, 0)

    def increment(value: Any) -> tuple[int, int]:
        new = (0 if value is MISSING else value) + 1
        return new, new

    async def one(key: str) -> None:
        try:
            returned[key].append(await store.update(key, increment))
        except (StoreError, asyncio.CancelledError):
            unsure[key] += 1

    try:
        for _ in range(30):
            tasks = [asyncio.create_task(one(rng.choice(keys))) for _ in range(60)]
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            for task in rng.sample(tasks, 20):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await store.set("noise", rng.random())  # a set/delete among the updates
        finals = await store.get_many(keys)
        for key, final in zip(keys, finals, strict=True):
            got = returned[key]
            assert len(set(got)) == len(got), f"{key}: a result handed out twice"
            final = 0 if final is MISSING else final
            assert len(got) <= final <= len(got) + unsure[key], (key, final, len(got))
    finally:
        await store.close()


async def test_a_caller_cancelled_while_its_noscript_write_is_resent_strands_nobody(
    redis_server: Any,
) -> None:
    server = redis_server()
    store = await opened(server.url, prefix="nsc", max_connections=1)
    admin = server.client()
    first = second = asyncio.create_task(asyncio.sleep(0))
    try:
        admin.script_flush()
        admin.script_load(CAS)  # the leader's script is there; PUT is not
        leader = asyncio.create_task(store.update("y", append("y")))
        await asyncio.sleep(0)  # the leader holds the one turn of the gate, on the wire
        first = asyncio.create_task(store.set("a", 1))
        second = asyncio.create_task(store.set("b", 2))
        await asyncio.sleep(0)  # both queued behind the leader
        holding = asyncio.create_task(store._gate.acquire())  # the next turn is ours
        await leader
        await holding
        # the pipeline [PUT a, PUT b] answers NOSCRIPT twice; a's resend waits for the gate
        for _ in range(200):
            await asyncio.sleep(0.005)
            if store._gate._waiters:  # the resend is queued for a turn
                break
        first.cancel()
        store._gate.release()
        await asyncio.gather(first, return_exceptions=True)
        done, _ = await asyncio.wait([second], timeout=3)
        assert second in done, "the write after the cancelled one never answered"
        assert second.exception() is None
        assert await store.get("b") == 2
    finally:
        for task in (first, second):
            task.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
        admin.close()
        await store.close()
