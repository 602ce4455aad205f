"""Fenced leases and atomic commits (tmy/store/leases.py, every backend's ``commit``).

A lease is only worth something if a holder that lost it cannot write: a
daemon paused (SIGSTOP) past its lease must find its writes refused by the
store itself, in the same transaction/script as the write. And a commit of
several writes lands all of them or none.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.processes import reap, spawn_holder
from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy.errors import ConfigError, LeaseLost, StoreError, ValueRefused
from tmy.store import MISSING, open_store
from tmy.store.base import Store
from tmy.store.leases import Lease
from tmy.store.redis import RedisClusterStore
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_store_url"))


def with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(with_option(store_url, "lease_ttl=1"))
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_lock_yields_a_lease_that_commit_is_fenced_by(store: Store) -> None:
    await store.set("k", "old")
    async with store.lock("k") as lease:
        assert isinstance(lease, Lease) and lease.key == "k" and lease.token
        assert not lease.lost
        lease.check()
        await store.commit([("k", {"n": 1}, None), ("k", {"n": 2}, 30.0)], fence=[lease])
        assert await store.get("k") == {"n": 2}  # in order: the last write of a key wins
        await store.commit([("k", MISSING, None)], fence=[lease])
        assert await store.get("k") is MISSING
        await asyncio.sleep(1.4)  # longer than the lease: renewals keep it
        assert not lease.lost
        await store.commit([("k", "renewed", None)], fence=[lease])
    assert await store.get("k") == "renewed"
    assert store.lease_ttl == 1.0  # the URL's ?lease_ttl= is lock()'s default


async def test_the_store_refuses_a_commit_fenced_by_a_lease_it_does_not_hold(store: Store) -> None:
    """The check is the store's, in the commit's own transaction/script (not only local)."""
    await store.set("k", "kept")
    async with store.lock("k") as lease:
        forged = Lease("k", "someone-else/0", 1.0)
        forged._held_from(time.monotonic())  # locally it looks fine
        with pytest.raises(LeaseLost) as caught:
            await store.commit([("k", MISSING, None), ("k", "stolen", None)], fence=[lease, forged])
        assert caught.value.key == "k" and forged.lost
        assert await store.get("k") == "kept"  # nothing written
        await store.commit([("k", "mine", None)], fence=[lease])
    async with store.lock("k") as later:
        pass
    with pytest.raises(LeaseLost):  # given back: no longer held by anyone
        await store.commit([("k", "late", None)], fence=[later])
    assert await store.get("k") == "mine"


async def test_a_lease_past_its_length_is_lost_and_its_commit_writes_nothing(
    store: Store,
) -> None:
    async with store.lock("k", ttl=0.3) as lease:
        time.sleep(0.5)  # the event loop is blocked: no renewal can run (a paused daemon)
        assert lease.lost
        with pytest.raises(LeaseLost, match="'k'"):
            lease.check()
        with pytest.raises(LeaseLost):
            await store.commit([("k", 1, None)], fence=[lease])
        await asyncio.sleep(0.5)  # the renewer, resumed, must not revive it
        assert lease.lost
    assert await store.get("k") is MISSING


async def test_a_commit_is_all_or_nothing_when_a_value_is_refused(store: Store) -> None:
    # a cluster commits within one hash slot (keys of several are refused, tested below):
    # there the two writes go to one key, the first of which must not land either
    second = "a" if isinstance(store, RedisClusterStore) else "b"
    await store.set("a", 1)
    with pytest.raises(ValueRefused):
        await store.commit([("a", 2, None), (second, {1, 2}, None)])  # a set is not JSON
    assert await store.get("a") == 1
    if second != "a":
        assert await store.get(second) is MISSING
    await store.commit([("a", 2, None), (second, [1, 2], 60.0)])
    assert await store.get_many(["a", second]) == (
        [[1, 2], [1, 2]] if second == "a" else [2, [1, 2]]
    )
    await store.commit([])  # nothing to do


@pytest.mark.redis
async def test_a_cluster_commit_across_slots_is_refused_with_a_reason(
    cluster_store_url: str,
) -> None:
    opened = open_store(cluster_store_url)
    await opened.open()
    try:
        async with opened.lock("var/user/x/1/checkins") as lease:
            await opened.commit([("var/user/x/1/checkins", 1, None)], fence=[lease])  # one slot
            with pytest.raises(StoreError, match="hash slots"):
                await opened.commit(
                    [("var/user/x/1/checkins", 2, None), ("var/user/x/1/last", "d", None)],
                    fence=[lease],
                )
        assert await opened.get_many(["var/user/x/1/checkins", "var/user/x/1/last"]) == [
            1,
            MISSING,
        ]
    finally:
        await opened.close()


def test_lease_ttl_url_option() -> None:
    assert open_store("sqlite:///:memory:?lease_ttl=0.5").lease_ttl == 0.5
    assert open_store("sqlite:///:memory:").lease_ttl == 5.0
    assert open_store("redis://127.0.0.1:1/0?lease_ttl=2").lease_ttl == 2.0
    for bad in ("sqlite:///x.db?lease_ttl=0", "sqlite:///x.db?lease=1", "redis://h/0?lease_ttl=x"):
        with pytest.raises(ConfigError, match="lease"):
            open_store(bad)


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from tmy.errors import LeaseLost
    from tmy.store import open_store

    async def main():
        store = open_store(sys.argv[1])
        await store.open()
        async with store.lock("cron/x") as lease:
            print("held", flush=True)
            sys.stdin.readline()  # the parent stops us (SIGSTOP) meanwhile
            try:
                await store.commit([("cron/x", "paused holder", None)], fence=[lease])
                print("written", flush=True)
            except LeaseLost as exc:
                print("lost", exc.key, flush=True)
        await store.close()

    asyncio.run(main())
    """
)


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_a_holder_stopped_past_its_lease_cannot_write(store_url: str) -> None:
    """SIGSTOP a real process holding a 1 s lease for ~2 s: another takes the lease and
    writes; the stopped one, resumed, has its commit refused and writes nothing."""
    url = with_option(store_url, "lease_ttl=1")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdin is not None and holder.stdout is not None
    other = open_store(url)
    await other.open()
    try:
        line = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), 30)
        assert line.strip() == "held"
        holder.send_signal(signal.SIGSTOP)
        async with other.lock("cron/x", wait=10) as lease:  # free once the 1 s lease expired
            await other.commit([("cron/x", "new holder", None)], fence=[lease])
            holder.send_signal(signal.SIGCONT)
            holder.stdin.write("go\n")
            holder.stdin.flush()
            line = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), 30)
            assert line.split() == ["lost", "cron/x"]
        assert await other.get("cron/x") == "new holder"
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait(10)
        await other.close()


async def test_a_commit_with_an_expiry_no_store_can_hold_writes_nothing(store: Store) -> None:
    """Redis refuses an expiry past 2^63 ms mid-script: it must be refused before anything."""
    second = "a" if isinstance(store, RedisClusterStore) else "b"  # one slot on a cluster
    with pytest.raises(ValueRefused, match="100 years"):
        await store.commit([("a", 1, None), (second, 2, 1e17)])
    assert await store.get("a") is MISSING


# -- from test_store_hardening.py (store hardening: retried writes apply once, dead holders' locks
#    free)


# A lock freed "within seconds" (not the old 30-60 s): a waiter gives up after this long.
FREED_WITHIN = 8.0


async def assert_held(store: Store, key: str) -> None:
    with pytest.raises(StoreError, match="still held"):
        async with store.lock(key, wait=0.3):
            pass


@pytest.mark.slow
@pytest.mark.parametrize("lease", ["default", "600"])
async def test_lock_of_a_killed_holder_frees_at_once(
    store: Store, store_url: str, lease: str
) -> None:
    """kill -9 of the holder: the lease is free at once (a dead process of this
    machine), whatever length it was taken with — the waiter gives up long before
    even the default 5 s lease would expire."""
    child = await spawn_holder(store_url, lease)
    try:
        await assert_held(store, "job")
        child.send_signal(signal.SIGKILL)
        await child.wait()
        async with store.lock("job", wait=2):
            pass
    finally:
        await reap(child)


@pytest.mark.slow
async def test_lock_of_a_frozen_holder_expires_after_one_lease(
    store: Store, store_url: str
) -> None:
    """A holder that stops renewing without dying (frozen, or on another machine)
    keeps others out while its lease lasts, and no longer (a 2 s lease here, via
    ``?lease_ttl=``; the real one is 5 s)."""
    child = await spawn_holder(with_option(store_url, "lease_ttl=2"), "default")
    try:
        os.kill(child.pid, signal.SIGSTOP)
        await assert_held(store, "job")  # frozen, not dead: its lease still stands
        async with store.lock("job", wait=FREED_WITHIN):  # then it expires
            pass
    finally:
        await reap(child)


@pytest.mark.slow  # real waits: leases renewed for seconds
async def test_a_holder_working_longer_than_its_lease_keeps_it(store: Store) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        async with store.lock("job", ttl=0.5):
            for _ in range(3):  # over two seconds: four lease lengths, renewed meanwhile
                await asyncio.sleep(0.4)
                await assert_held(other, "job")
        async with other.lock("job", wait=1):  # released at the end of the block
            pass
    finally:
        await other.close()


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
    assert max(leases) <= 6  # the 5 s lease, not step_timeout (60 s) + 5 s
