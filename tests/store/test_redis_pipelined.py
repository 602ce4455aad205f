"""Compare-and-sets of different keys share pipelines (tmy/store/redis/pipelined.py), and a
frozen, killed or script-flushed ``redis-server`` still neither loses an update of a
pipeline nor applies one twice.

Each test starts its own ``redis-server``. Round-trips are counted by the server itself
(``total_reads_processed`` of INFO stats: a pipeline arrives as one read, or a few)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections import Counter
from typing import Any

import pytest

from tmy.errors import StoreError
from tmy.store.base import MISSING
from tmy.store.redis import RedisStore

SOCKET_TIMEOUT = 0.5
STALL = 1.5  # seconds Redis is frozen; longer than the socket timeout, shorter than the retries
KEYS = 120


def increment(value: Any) -> tuple[int, int]:
    new = (0 if value is MISSING else value) + 1
    return new, new


def reads(server: Any) -> int:
    admin = server.client()
    try:
        return int(admin.info("stats")["total_reads_processed"])
    finally:
        admin.close()


async def opened(url: str) -> RedisStore:
    store = RedisStore(url, socket_timeout=SOCKET_TIMEOUT)
    await store.open()
    return store


class Load:
    """Workers incrementing many keys through several stores; every acknowledgement kept."""

    def __init__(self, stores: list[RedisStore], keys: int = KEYS) -> None:
        self.stores = stores
        self.keys = [f"c{i}" for i in range(keys)]
        self.acks: dict[str, list[int]] = {k: [] for k in self.keys}
        self.failed: Counter[str] = Counter()
        self.errors: list[BaseException] = []
        self.stop = asyncio.Event()

    async def worker(self, store: RedisStore, offset: int) -> None:
        n = offset
        while not self.stop.is_set():
            key = self.keys[n % len(self.keys)]
            n += 7
            try:
                self.acks[key].append(await store.update(key, increment))
            except StoreError as exc:
                self.failed[key] += 1  # its outcome is unknown: applied once, or not at all
                self.errors.append(exc)
            await asyncio.sleep(0)

    def start(self, per_store: int = 40) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(self.worker(store, i * 13 + j))
            for i, store in enumerate(self.stores)
            for j in range(per_store)
        ]

    async def check(self, store: RedisStore, *, exact: bool) -> None:
        finals = await store.get_many(self.keys)
        for key, final in zip(self.keys, finals, strict=True):
            acks = self.acks[key]
            final = 0 if final is MISSING else final
            assert len(acks) == len(set(acks)), f"{key}: an update applied twice"
            if exact:
                assert sorted(acks) == list(range(1, final + 1)), f"{key}: an update lost"
            else:
                assert max(acks, default=0) <= final, f"{key}: an acknowledged update lost"
                assert len(acks) <= final <= len(acks) + self.failed[key], key


@pytest.mark.redis
@pytest.mark.slow
async def test_updates_of_many_keys_at_once_share_pipelines(redis_server: Any) -> None:
    server = redis_server()
    store = await opened(server.url)
    try:
        keys = [f"k{i}" for i in range(300)]
        await asyncio.gather(*(store.update(k, increment) for k in keys))  # each key guessed
        before = reads(server)
        results = await asyncio.gather(*(store.update(k, increment) for k in keys))
        used = reads(server) - before - 1  # (the INFO of reads() itself is one)
        assert results == [2] * 300
        assert await store.get_many(keys) == [2] * 300
        # one compare-and-set alone, then the rest in a pipeline or a few: far below 300
        assert used <= 30, f"{used} reads for 300 updates: they were not pipelined"
        assert store._putting is False and not store._put_queue
    finally:
        await store.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_stall_under_pipelined_updates_loses_none_and_applies_none_twice(
    redis_server: Any,
) -> None:
    server = redis_server()
    stores = [await opened(server.url) for _ in range(3)]
    load = Load(stores)
    timer: threading.Timer | None = None
    try:
        async with asyncio.timeout(60):
            workers = load.start()
            await asyncio.sleep(0.3)
            os.kill(server.proc.pid, signal.SIGSTOP)  # replies stop mid-pipeline: resent
            timer = threading.Timer(STALL, os.kill, (server.proc.pid, signal.SIGCONT))
            timer.start()
            await asyncio.sleep(STALL + 0.5)
            load.stop.set()
            await asyncio.gather(*workers)
        assert load.errors == []  # the stall is shorter than redis-py's retries
        assert sum(map(len, load.acks.values())) > KEYS
        await load.check(stores[0], exact=True)
    finally:
        if timer is not None:
            timer.join()
        os.kill(server.proc.pid, signal.SIGCONT)
        for store in stores:
            await store.close()


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_kill_9_under_pipelined_updates_loses_no_acknowledged_one(
    redis_server: Any,
) -> None:
    server = redis_server("--appendonly", "yes", "--appendfsync", "always")
    stores = [await opened(server.url) for _ in range(3)]
    load = Load(stores)
    try:
        async with asyncio.timeout(60):
            workers = load.start()
            await asyncio.sleep(0.5)
            before = sum(map(len, load.acks.values()))
            await asyncio.to_thread(server.restart, kill=True)  # crash; AOF replayed
            await asyncio.sleep(0.5)
            load.stop.set()
            await asyncio.gather(*workers)
        assert before > 0 and sum(map(len, load.acks.values())) > before
        await load.check(stores[0], exact=False)
    finally:
        for store in stores:
            await store.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_scripts_flushed_under_pipelined_writes_are_loaded_and_applied_once(
    redis_server: Any,
) -> None:
    """A pipeline whose scripts Redis no longer has (NOSCRIPT, as after a restart without
    them) sends those writes again alone, which loads the script: each applied once."""
    server = redis_server()
    admin = server.client()
    stores = [await opened(server.url) for _ in range(2)]
    load = Load(stores)
    try:
        async with asyncio.timeout(60):
            workers = load.start()
            for _ in range(5):
                await asyncio.sleep(0.1)
                admin.script_flush()
            writes = [stores[0].set(f"s{i}", i) for i in range(100)]
            admin.script_flush()
            await asyncio.gather(*writes)
            load.stop.set()
            await asyncio.gather(*workers)
        assert load.errors == []
        await load.check(stores[1], exact=True)
        assert await stores[1].get_many([f"s{i}" for i in range(100)]) == list(range(100))
    finally:
        admin.close()
        for store in stores:
            await store.close()
