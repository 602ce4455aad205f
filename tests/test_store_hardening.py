"""Store hardening: a retried write never applies twice; a dead holder's lock frees within seconds.

Redis tests start their own ``redis-server`` and freeze it (SIGSTOP) longer than
the client's socket timeout, so redis-py resends commands Redis then runs twice,
or kill -9 it under load with ``appendfsync always``. Lock tests kill or freeze
a real holder process.

The tests taking ``store``/``store_url`` run on SQLite, Redis and a Redis Cluster.
The ``test_redis_*`` ones freeze or kill *one* private ``redis-server`` and stay
single-Redis: the write records they exercise are the same scripts on a cluster,
and test_redis_cluster.py freezes a cluster master under a SHIFT (the
cluster-specific part: redis-py refreshes the layout through another master,
then resends).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tmy
from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy.errors import StoreError
from tmy.store import MISSING, Store, open_store
from tmy.store.redis import RedisStore
from tmy.store.sqlite import SQLiteStore
from tmy.testing import Bot

FREED_WITHIN = 8.0  # "within seconds": one 5 s lease and some slack, not the old 30-60 s

TMY_ROOT = str(Path(tmy.__file__).resolve().parent.parent)  # children import the same tmy

STALL = 3.0  # seconds Redis is frozen; longer than the client's socket timeout
SOCKET_TIMEOUT = 1.0


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    """conftest's ``store_url`` plus a Redis Cluster: these tests run on all three."""
    return str(request.getfixturevalue(f"{request.param}_store_url"))


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


# -- defect 1: a Redis stall must not apply an update twice ------------------------------


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


# -- defect 8: a dead holder's lock frees within seconds ---------------------------------

LOCK_HOLDER = """
import asyncio, sys
from tmy.store import open_store

async def main(url, ttl):
    store = open_store(url)
    await store.open()
    kwargs = {} if ttl == "default" else {"ttl": float(ttl)}
    async with store.lock("job", **kwargs):
        print("held", flush=True)
        await asyncio.sleep(600)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def spawn_holder(url: str, ttl: str) -> asyncio.subprocess.Process:
    """A separate process that takes the lock ``job`` with the real store and keeps it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([TMY_ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LOCK_HOLDER, url, ttl, stdout=asyncio.subprocess.PIPE, env=env
    )
    async with asyncio.timeout(30):
        assert await child.stdout.readline() == b"held\n"  # type: ignore[union-attr]
    return child


async def reap(child: asyncio.subprocess.Process) -> None:
    if child.returncode is None:
        child.kill()
        await child.wait()


async def assert_held(store: Store, key: str) -> None:
    with pytest.raises(StoreError, match="still held"):
        async with store.lock(key, wait=0.3):
            pass


@pytest.mark.slow
@pytest.mark.parametrize("lease", ["default", "600"])
async def test_lock_of_a_killed_holder_frees_within_seconds(
    store: Store, store_url: str, lease: str
) -> None:
    """kill -9 of the holder: the lease is free at once (a dead process of this
    machine), whatever length it was taken with — not after 30-60 s."""
    child = await spawn_holder(store_url, lease)
    try:
        await assert_held(store, "job")
        child.send_signal(signal.SIGKILL)
        await child.wait()
        started = time.monotonic()
        async with store.lock("job", wait=30):
            waited = time.monotonic() - started
    finally:
        await reap(child)
    assert waited < FREED_WITHIN  # at once, in fact: a dead process of this machine


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_lock_of_a_frozen_holder_expires_after_one_lease(
    store: Store, store_url: str
) -> None:
    """A holder that stops renewing without dying (frozen, or on another machine)
    blocks others for at most one lease length."""
    child = await spawn_holder(store_url, "default")
    try:
        os.kill(child.pid, signal.SIGSTOP)
        started = time.monotonic()
        async with store.lock("job", wait=30):
            waited = time.monotonic() - started
    finally:
        await reap(child)
    assert 1.0 < waited < FREED_WITHIN  # it waited for the 5 s lease to expire, no longer


async def test_a_holder_working_longer_than_its_lease_keeps_it(store: Store) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        async with store.lock("job", ttl=0.5):
            for _ in range(5):  # two seconds: four lease lengths, renewed meanwhile
                await asyncio.sleep(0.4)
                await assert_held(other, "job")
        async with other.lock("job", wait=1):  # released at the end of the block
            pass
    finally:
        await other.close()


@pytest.mark.slow
async def test_sqlite_restart_clears_lock_rows_left_by_dead_processes(tmp_path: Path) -> None:
    path = tmp_path / "restart.db"
    url = f"sqlite:///{path}"
    child = await spawn_holder(url, "600")  # a long lease, as the old engine took
    try:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    finally:
        await reap(child)
    with sqlite3.connect(path) as db:  # a lease row nobody will ever release
        assert db.execute("SELECT count(*) FROM locks").fetchone() == (1,)
        db.execute("INSERT INTO locks VALUES ('old', 'x/y', ?)", (time.time() - 1,))

    restarted = SQLiteStore(path)
    await restarted.open()  # the daemon comes back
    try:
        with sqlite3.connect(path) as db:  # cleared at open: the dead holder's and the expired
            assert db.execute("SELECT count(*) FROM locks").fetchone() == (0,)
        async with restarted.lock("job", wait=0.3):
            pass
    finally:
        await restarted.close()


# -- SQLite: a retry after "database is locked" is the first application ---------------

WRITE_LOCK_HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


@pytest.mark.slow
async def test_sqlite_writes_retried_after_busy_apply_once(tmp_path: Path) -> None:
    """Every write below fails with SQLITE_BUSY at first and is retried by the
    store: each must count exactly once (see the SQLite module doc for why)."""
    store = SQLiteStore(tmp_path / "busy.db")
    await store.open()
    try:
        await store.set("n", 0)
        for wave in range(3):
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", WRITE_LOCK_HOLDER, str(store.path), "0.3",
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                assert await child.stdout.readline() == b"locked\n"  # type: ignore[union-attr]
                results = await asyncio.gather(
                    *(store.update("n", increment) for _ in range(20)),
                    store.set(f"s{wave}", wave),
                    store.delete("absent"),
                )
            finally:
                await reap(child)
            assert sorted(results[:20]) == list(range(20 * wave + 1, 20 * wave + 21))
            assert results[21] is False
        assert await store.get("n") == 60
        assert await store.get_many(["s0", "s1", "s2"]) == [0, 1, 2]
    finally:
        await store.close()


# -- the engine takes short leases ------------------------------------------------------

SLOW_PLUGIN = """
import asyncio
from typing import Any

from tmy.executors.registry import Option, Registry


async def slow(value: Any, cfg: dict[str, Any], ctx: Any) -> Any:
    await asyncio.sleep(cfg["seconds"])
    return value


def register(registry: Registry) -> None:
    registry.add("SLOW", slow, options={"seconds": Option(float, default=0.0, doc="pause")})
"""

COUNT_SLOWLY = """
variables:
  counter: {scope: global, default: 0}
rules:
  - id: count
    triggers: [count]
    steps:
      - {plugin: SLOW, seconds: 0.6, input: "?= counter + 1", save: counter}
"""


async def test_a_locked_step_holds_a_short_lease(tmp_path: Path) -> None:
    """The engine's lock for a read-and-save step is a short renewed lease, not
    one as long as the step timeout (which a crash would leave behind)."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow.py").write_text(SLOW_PLUGIN)
    path = tmp_path / "engine.db"
    async with Bot(
        {"c.yaml": COUNT_SLOWLY}, store=f"sqlite:///{path}", plugins=tmp_path / "plugins"
    ) as bot:
        asking = asyncio.create_task(bot.ask("count"))
        leases: list[float] = []
        while not asking.done():
            with sqlite3.connect(path) as db:
                rows = db.execute("SELECT expires FROM locks").fetchall()
            leases += [expires - time.time() for (expires,) in rows]
            await asyncio.sleep(0.05)
        assert (await asking).text == "1"
    assert leases, "the step ran without holding its variable's lock"
    assert max(leases) <= FREED_WITHIN - 2  # the 5 s lease, not step_timeout + 5 s


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
        started = time.monotonic()
        waiting = asyncio.create_task(winner.update("hits", increment))
        await asyncio.sleep(0.05)
        assert not waiting.done(), "the other process must wait while the turn is held"
        assert await loser.update("hits", increment) == 1  # the turn holder goes first
        await client.delete(turn)
        assert await waiting == 2
        assert time.monotonic() - started < 2
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
