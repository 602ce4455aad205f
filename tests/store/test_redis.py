"""The Redis store (tmy/store/redis): group commit, and writes that a frozen, killed or
resending ``redis-server`` never applies twice nor loses.

Each test starts its own ``redis-server`` and freezes (SIGSTOP) or kills it."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import pytest

from tmy.errors import StoreError
from tmy.store import open_store
from tmy.store.base import MISSING
from tmy.store.redis import RedisStore

# -- from test_bughunt.py (a bug hunt: each failed before its fix)


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_update_leader_cancelled_does_not_strand_riders(redis_server: Any) -> None:
    server = redis_server()
    admin = server.client()
    store = open_store(server.url)
    await store.open()
    try:
        paused = asyncio.Event()

        def leader_fn(cur: Any) -> tuple[Any, Any]:
            return (0 if cur is MISSING else cur) + 1, "leader"

        def rider_fn(cur: Any) -> tuple[Any, Any]:
            # runs in the leader's task just before it sends the riders' batch:
            # freeze Redis so that compare-and-set stays in flight
            if not paused.is_set():
                admin.client_pause(1000)
                paused.set()
            return (0 if cur is MISSING else cur) + 1, "rider"

        leader = asyncio.create_task(store.update("k", leader_fn))
        await asyncio.sleep(0)  # the leader is now committing its own batch
        rider = asyncio.create_task(store.update("k", rider_fn))
        await asyncio.wait_for(paused.wait(), 10)
        await asyncio.sleep(0.2)  # the riders' CAS is in flight, Redis is paused
        leader.cancel()  # e.g. the leader's run hit its step timeout
        await asyncio.wait({leader}, timeout=10)
        admin.client_unpause()
        # the rider must settle (with its result or an error), never hang
        done, _ = await asyncio.wait({rider}, timeout=5)
        if rider not in done:
            rider.cancel()
        assert rider in done, "the rider of the cancelled leader's batch hangs forever"
    finally:
        admin.client_unpause()
        admin.close()
        await store.close()


@pytest.mark.redis
async def test_redis_update_on_a_stale_guess_is_not_lost(
    redis_url: str, redis_namespace: str
) -> None:
    url = f"{redis_url}?prefix={redis_namespace}"
    daemon_a, daemon_b = open_store(url), open_store(url)
    await daemon_a.open()
    await daemon_b.open()
    try:
        await daemon_a.set("var/global/scores", {"ann": 5})  # A remembers this raw value
        await daemon_b.set("var/global/scores", {"ann": 7})  # another daemon changes it

        def save_ann_5(current: Any) -> tuple[Any, Any]:  # what `save: scores[ann]` does
            current["ann"] = 5
            return current, dict(current)

        seen = await daemon_a.update("var/global/scores", save_ann_5)
        assert seen == {"ann": 5}
        assert await daemon_b.get("var/global/scores") == {"ann": 5}, "A's save was lost"
    finally:
        await daemon_a.close()
        await daemon_b.close()


# -- from test_store_hardening.py (store hardening: retried writes apply once, dead holders' locks
#    free)


STALL = 1.5  # seconds Redis is frozen; longer than the client's socket timeout


SOCKET_TIMEOUT = 0.5


def shift(value: Any) -> tuple[Any, Any]:
    """SHIFT: take the first item (the engine's list mode, as a store function)."""
    if not value:
        raise LookupError("empty")
    return value[1:], value[0]


def increment(value: Any) -> tuple[int, int]:
    new = (0 if value is MISSING else value) + 1
    return new, new


def freeze(pid: int, seconds: float) -> threading.Timer:
    """SIGSTOP ``pid`` now and SIGCONT it after ``seconds`` (from a timer thread)."""
    os.kill(pid, signal.SIGSTOP)
    timer = threading.Timer(seconds, os.kill, (pid, signal.SIGCONT))
    timer.start()
    return timer


async def opened_redis(url: str, **kwargs: Any) -> RedisStore:
    store = RedisStore(url, socket_timeout=SOCKET_TIMEOUT, **kwargs)
    await store.open()
    return store


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_stall_during_a_shift_loses_no_item(redis_server: Any) -> None:
    server = redis_server()
    store = await opened_redis(server.url, prefix="stall")
    timer: threading.Timer | None = None
    try:
        await store.set("pool", [1, 2, 3, 4, 5, 6])
        assert await store.update("pool", shift) == 1

        # Redis freezes with the second SHIFT on the wire: its reply times out,
        # redis-py resends the script and Redis runs every copy once it wakes up
        timer = freeze(server.proc.pid, STALL)
        second = await store.update("pool", shift)
        assert second == 2
        assert await store.get("pool") == [3, 4, 5, 6]  # nothing removed behind our back
    finally:
        if timer is not None:
            timer.join()
        os.kill(server.proc.pid, signal.SIGCONT)
        await store.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_calls_cancelled_on_the_wire_leave_no_reply_behind(
    redis_server: Any,
) -> None:
    """A call cancelled while Redis holds its reply must not leave that reply on the
    connection (the store's lane) for the next caller to read as its own."""
    server = redis_server()
    store = await opened_redis(server.url, prefix="cancel", max_connections=4)
    timer: threading.Timer | None = None
    keys = [f"k{i}" for i in range(8)]
    try:
        await asyncio.gather(*(store.set(k, i) for i, k in enumerate(keys)))
        timer = freeze(server.proc.pid, 0.6)
        calls = [asyncio.ensure_future(store.get(k)) for k in keys]
        calls += [asyncio.ensure_future(store.update(k, increment)) for k in keys[:2]]
        await asyncio.sleep(0.2)  # their commands are on the wire, Redis is frozen
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        timer.join()  # Redis answers again, with the replies nobody waits for
        values = await store.get_many(keys)
        assert values[2:] == list(range(2, 8))
        assert values[0] in (0, 1) and values[1] in (1, 2)  # a cancelled update ran or not
        for _ in range(25):
            assert await asyncio.gather(*(store.get(k) for k in keys)) == values
    finally:
        if timer is not None:
            timer.join()
        os.kill(server.proc.pid, signal.SIGCONT)
        await store.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_stall_under_load_hands_out_every_item_exactly_once(
    redis_server: Any,
) -> None:
    """Many SHIFTs from several clients (each batching its own) across a stall."""
    server = redis_server()
    stores = [await opened_redis(server.url, prefix="load") for _ in range(4)]
    items = list(range(600))
    acknowledged: list[int] = []
    errors: list[BaseException] = []

    async def worker(store: RedisStore) -> None:
        while True:
            try:
                acknowledged.append(await store.update("pool", shift))
            except LookupError:
                return  # empty: every item is out
            except StoreError as exc:
                errors.append(exc)
            await asyncio.sleep(0.005)

    timer: threading.Timer | None = None
    try:
        await stores[0].set("pool", items)
        async with asyncio.timeout(40):
            workers = [asyncio.create_task(worker(stores[i % 4])) for i in range(24)]
            await asyncio.sleep(0.05)
            timer = freeze(server.proc.pid, STALL)
            await asyncio.gather(*workers)
        assert errors == []  # the stall is shorter than redis-py's retries: nobody failed
        assert len(acknowledged) == len(set(acknowledged))  # nobody got an item twice
        assert sorted(acknowledged) == items  # removed == acknowledged: none lost
        assert await stores[0].get("pool") == []
    finally:
        if timer is not None:
            timer.join()
        os.kill(server.proc.pid, signal.SIGCONT)
        for store in stores:
            await store.close()


@pytest.mark.redis
async def test_redis_resent_copies_of_a_write_apply_nothing(redis_server: Any) -> None:
    """What redis-py does after a lost reply, done by hand: the same script and
    arguments (same write record) sent again after another client wrote."""
    server = redis_server()
    store = await opened_redis(server.url, prefix="resend")
    other = await opened_redis(server.url, prefix="resend")
    try:
        rkey = store._k("n")
        await store.set("n", 1)

        # update: attempt 1 of a batch writes 2; a resent copy after another write
        record = store._op(rkey)
        turn = rkey + ":turn"
        args = ("1", b"1", "s", b"2", "0", 1, store._op_px, store._turn_token)
        assert await store._cas(keys=[rkey, record, turn], args=args) == 1
        await other.update("n", increment)  # 3
        assert await store._cas(keys=[rkey, record, turn], args=args) == 1  # recognised
        # a later attempt of the same batch hears which attempt was applied
        later = ("1", b"3", "s", b"4", "0", 2, store._op_px, store._turn_token)
        assert await store._cas(keys=[rkey, record, turn], args=later) == 1
        assert await store.get("n") == 3

        # set: a resent copy must not overwrite what was written after the first
        record = store._op(rkey)
        put = ("s", b"10", "0", store._op_px)
        assert await store._put(keys=[rkey, record], args=put) == 1
        await other.set("n", 11)
        assert await store._put(keys=[rkey, record], args=put) == 1
        assert await store.get("n") == 11

        # delete: a resent copy must not delete a value written after the first
        record = store._op(rkey)
        gone = ("d", b"", "0", store._op_px)
        assert await store._put(keys=[rkey, record], args=gone) == 1
        await other.set("n", 12)
        assert await store._put(keys=[rkey, record], args=gone) == 1  # what the first did
        assert await store.get("n") == 12

        # the records expire on their own (the TTL covers every resend redis-py makes)
        admin = server.client()
        try:
            ttl_ms = admin.pttl(record)
        finally:
            admin.close()
        assert 0 < ttl_ms <= store.op_ttl * 1000
    finally:
        await store.close()
        await other.close()


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_redis_kill_9_with_aof_always_loses_no_acknowledged_write(
    redis_server: Any,
) -> None:
    server = redis_server("--appendonly", "yes", "--appendfsync", "always")
    stores = [await opened_redis(server.url, prefix="aof") for _ in range(3)]
    acknowledged: list[int] = []
    failed = 0
    stop = asyncio.Event()

    async def worker(store: RedisStore) -> None:
        nonlocal failed
        while not stop.is_set():
            try:
                acknowledged.append(await store.update("n", increment))
            except StoreError:
                failed += 1  # its outcome is unknown: applied once, or not at all
            await asyncio.sleep(0.001)

    try:
        async with asyncio.timeout(60):
            workers = [asyncio.create_task(worker(stores[i % 3])) for i in range(12)]
            await asyncio.sleep(0.5)
            before = len(acknowledged)
            await asyncio.to_thread(server.restart, kill=True)  # crash; AOF replayed
            await asyncio.sleep(0.5)
            stop.set()
            await asyncio.gather(*workers)
        final = await stores[0].get("n")
        assert before > 0 and len(acknowledged) > before  # load ran before and after
        assert len(acknowledged) == len(set(acknowledged))  # none applied twice
        assert max(acknowledged) <= final
        assert len(acknowledged) <= final <= len(acknowledged) + failed
    finally:
        for store in stores:
            await store.close()


@pytest.mark.redis
async def test_redis_a_process_holding_a_hot_keys_turn_writes_before_the_others(
    redis_url: str, redis_namespace: str
) -> None:
    """A daemon that keeps losing compare-and-sets claims the key's turn; the others
    wait for it instead of starving it (and nobody gives up)."""
    url = f"{redis_url}?prefix={redis_namespace}"
    winner, loser = await opened_redis(url), await opened_redis(url)
    try:
        await winner.set("hits", 0)
        turn = loser._k("hits") + ":turn"
        client = loser._r()
        assert await client.set(turn, loser._turn_token, nx=True, px=300)  # the loser's turn
        waiting = asyncio.create_task(winner.update("hits", increment))
        await asyncio.sleep(0.05)
        assert not waiting.done(), "the other process must wait while the turn is held"
        assert await loser.update("hits", increment) == 1  # the turn holder goes first
        await client.delete(turn)
        assert await asyncio.wait_for(waiting, 10) == 2  # then the waiter, not given up
        # under real contention: two stores, 200 concurrent increments each, all applied
        results = await asyncio.gather(
            *(s.update("hits", increment) for _ in range(200) for s in (winner, loser))
        )
        assert sorted(results) == list(range(3, 403))
    finally:
        await winner.close()
        await loser.close()


@pytest.mark.redis
async def test_redis_concurrent_writes_share_one_pipeline_and_each_lands(
    redis_url: str, redis_namespace: str
) -> None:
    store = await opened_redis(f"{redis_url}?prefix={redis_namespace}")
    try:
        await asyncio.gather(*(store.set(f"k{i}", i) for i in range(300)))
        deleted = await asyncio.gather(
            *(store.delete(f"k{i}") for i in range(0, 300, 2)),
            *(store.set(f"k{i}", -i) for i in range(1, 300, 2)),
        )
        assert deleted[:150] == [True] * 150
        values = await store.get_many([f"k{i}" for i in range(300)])
        assert values == [MISSING if i % 2 == 0 else -i for i in range(300)]
        assert store._putting is False and not store._put_queue
    finally:
        await store.close()
