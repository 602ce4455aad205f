"""The store on a Redis Cluster: what is specific to a cluster.

The behavioural suite (test_store.py, test_concurrency.py with its 200 SHIFTs
and 500 increments, test_store_hardening.py) also runs on the cluster through
their ``store_url[cluster]`` parameter. This file checks the cluster's own
promises: every key of one variable and every script in one hash slot, reads
and listings that span the masters, the key layout shared with a single Redis,
the engine end to end with two daemons on one cluster, and a frozen master.
The cluster is the session's (conftest.py ``redis_cluster_url``): three masters
started by the tests themselves.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
from redis.asyncio.connection import SSLConnection
from redis.cluster import RedisCluster

from tests.support.redis_cluster import LocalCluster, cluster_client, free_port
from tmy.errors import ConfigError, StoreError
from tmy.store import MISSING, open_store
from tmy.store.redis import RedisClusterStore, RedisStore
from tmy.testing import Bot

pytestmark = pytest.mark.redis


def increment(value: Any) -> tuple[int, int]:
    new = (0 if value is MISSING else value) + 1
    return new, new


def shift(value: Any) -> tuple[Any, Any]:
    if not value:
        raise LookupError("empty")
    return value[1:], value[0]


@pytest.fixture
async def store(cluster_store_url: str) -> AsyncIterator[RedisClusterStore]:
    opened = open_store(cluster_store_url)
    assert isinstance(opened, RedisClusterStore)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def admin(redis_cluster_url: str) -> Iterator[RedisCluster]:
    """A synchronous cluster client, to look at the cluster from outside the store."""
    client = cluster_client(redis_cluster_url)
    try:
        yield client
    finally:
        client.close()


def master_of(admin: RedisCluster, rkey: str) -> str:
    return str(admin.get_node_from_key(rkey).name)


def spread(admin: RedisCluster, store: RedisStore, pattern: str) -> list[str]:
    """Logical keys ``pattern.format(i)``, the first found on each master, in order."""
    masters = {node.name for node in admin.get_primaries()}
    chosen: dict[str, str] = {}
    for i in range(1000):
        key = pattern.format(i)
        chosen.setdefault(master_of(admin, store._k(key)), key)
        if len(chosen) == len(masters):
            return list(chosen.values())
    raise AssertionError(f"no keys on every master: {chosen}")


# -- layout --------------------------------------------------------------------------


async def test_the_keys_of_one_variable_share_one_slot(
    store: RedisClusterStore, admin: RedisCluster
) -> None:
    key = "var/user/console/alice/visits"
    await store.set(key, 1)
    await store.update(key, increment)
    async with store.lock(key):
        names = sorted(k.decode() for k in admin.scan_iter(match=f"{store.prefix}:*"))
        names.remove(f"{store.prefix}:{{tmy/format}}")  # the format marker open() wrote
        value, lock, *records = names
    # the layout of a single Redis: a daemon moved to a cluster finds its data
    assert value == f"{store.prefix}:{{{key}}}"
    assert lock == f"{value}:lock"
    assert len(records) == 2 and all(r.startswith(f"{value}:op:") for r in records)
    # the server's own CLUSTER KEYSLOT: one slot, so every script's keys are on one node
    slots = {admin.cluster_keyslot(name) for name in names}
    assert len(slots) == 1
    assert {master_of(admin, name) for name in names} == {master_of(admin, value)}


async def test_keys_whose_hash_tag_would_be_empty_are_refused(store: RedisClusterStore) -> None:
    for attempt in (store.set("}x", 1), store.get("}x"), store.update("}x", increment)):
        with pytest.raises(StoreError, match="hash tag"):
            await attempt
    await store.set("x}", 1)  # a "}" later in the key is fine: the tag is "x"
    assert await store.get("x}") == 1


async def test_data_written_on_a_single_redis_reads_the_same_on_the_cluster(
    redis_url: str, redis_namespace: str, redis_cluster_url: str, admin: RedisCluster
) -> None:
    """Moving a deployment from redis:// to redis+cluster:// (keys copied as they
    are, e.g. DUMP/RESTORE or ``redis-cli --cluster import``) needs no conversion."""
    single = RedisStore(f"{redis_url}?prefix={redis_namespace}")
    await single.open()
    cluster = RedisClusterStore(f"{redis_cluster_url}?prefix={redis_namespace}")
    copied: list[bytes] = []
    try:
        await single.set("var/global/jokes", ["a", "b"])
        await single.set("var/user/console/bob/visits", 3)
        source = redis.Redis.from_url(redis_url)
        try:
            for name in source.scan_iter(match=f"{redis_namespace}:*"):
                if b":op:" not in name:
                    admin.restore(name, 0, source.dump(name))
                    copied.append(name)
        finally:
            source.close()
        await cluster.open()
        assert await cluster.keys("var/") == ["var/global/jokes", "var/user/console/bob/visits"]
        assert await cluster.get_many(["var/user/console/bob/visits", "var/global/jokes"]) == [
            3,
            ["a", "b"],
        ]
        assert await cluster.update("var/global/jokes", shift) == "a"
    finally:
        await single.close()
        await cluster.close()
        for name in admin.scan_iter(match=f"{redis_namespace}:*"):
            admin.delete(name)


# -- reads and listings across masters ----------------------------------------------------


async def test_get_many_and_keys_span_every_master(
    store: RedisClusterStore, admin: RedisCluster
) -> None:
    keys = spread(admin, store, "var/global/v{}")
    assert len(keys) == 3  # one on each master
    for i, key in enumerate(keys):
        await store.set(key, {"n": i})
    wanted = [keys[2], "var/global/absent", keys[0], keys[1], keys[2]]
    assert await store.get_many(wanted) == [{"n": 2}, MISSING, {"n": 0}, {"n": 1}, {"n": 2}]
    async with store.lock(keys[0]):  # leases and write records are not listed
        assert await store.keys("var/") == sorted(keys)
        assert await store.keys("var/global/v") == sorted(keys)
    assert await store.keys("nothing/") == []
    await store.ping()  # every master answers


async def test_more_concurrent_calls_than_connections_queue_instead_of_failing(
    cluster_store_url: str, admin: RedisCluster
) -> None:
    """redis-py's cluster client fails when a node's connections are all busy; the store
    queues its calls instead, like the single-Redis pool does."""
    store = RedisClusterStore(cluster_store_url, max_connections=2)
    await store.open()
    try:
        keys = spread(admin, store, "k{}")
        calls = [store.update(keys[i % 3], increment) for i in range(150)]
        calls += [store.get_many(keys) for _ in range(50)]
        await asyncio.gather(*calls)
        assert await store.get_many(keys) == [50, 50, 50]
    finally:
        await store.close()


# -- the engine on a cluster --------------------------------------------------------------

RULES = f"""
variables:
  counter: {{scope: global, default: 0}}
  pool: {{scope: global, default: {list(range(20))}}}
  visits: {{scope: user, default: 0}}
rules:
  - id: count
    triggers: [count]
    steps:
      - {{plugin: ADJUST, input: "?= counter + 1", save: counter}}
  - id: take
    triggers: [take]
    steps:
      - {{plugin: ADJUST, input: SHIFT, INPUT: pool}}
  - id: visit
    triggers: [visit]
    steps:
      - {{plugin: ADJUST, input: "?= visits + 1", save: visits}}
"""


async def test_two_daemons_on_one_cluster_share_their_variables(
    cluster_store_url: str, store: RedisClusterStore, admin: RedisCluster
) -> None:
    users = [key.split("/")[3] for key in spread(admin, store, "var/user/test/u{}/visits")]
    async with (
        Bot({"c.yaml": RULES}, store=cluster_store_url) as one,
        Bot({"c.yaml": RULES}, store=cluster_store_url) as two,
    ):
        counts = await asyncio.gather(*(bot.ask("count") for bot in (one, two) * 50))
        taken = await asyncio.gather(*(bot.ask("take") for bot in (one, two) * 10))
        visits = await asyncio.gather(
            *(bot.ask("visit", user=user) for user in users for bot in (one, two))
        )
        assert [r.error for r in (*counts, *taken, *visits)] == [None] * 126
        assert sorted(int(r.text) for r in counts) == list(range(1, 101))  # none lost
        assert sorted(int(r.text) for r in taken) == list(range(20))  # each item once
        assert await two.var("counter") == 100
        assert await one.var("pool") == []
        late = await two.ask("take")
        assert late.error is not None and "empty" in late.error
    # the daemons' keys, listed and read across every master
    user_keys = [f"var/user/test/{u}/visits" for u in users]
    assert await store.keys("var/") == sorted(["var/global/counter", "var/global/pool", *user_keys])
    assert len({master_of(admin, store._k(k)) for k in user_keys}) == 3
    assert await store.get_many([*user_keys, "var/global/counter"]) == [2, 2, 2, 100]


# -- failures ------------------------------------------------------------------------------

STALL = 2.5  # seconds a master is frozen: longer than the socket timeout, shorter than
# the 4 tries redis-py makes, far shorter than the cluster's node timeout (15 s: no failover)


@pytest.mark.slow
async def test_a_frozen_master_during_a_shift_applies_it_once(
    local_redis_cluster: LocalCluster,
) -> None:
    """The cluster client resends a timed-out script after refreshing the layout (through
    another master); the write record makes the copies Redis runs on waking apply nothing."""
    store = RedisClusterStore(
        f"{local_redis_cluster.url}?prefix=stall-{uuid.uuid4().hex[:8]}", socket_timeout=1.0
    )
    await store.open()
    port, node = local_redis_cluster.master_of(store._k("pool"))
    admin = local_redis_cluster.node(port)
    timer: threading.Timer | None = None
    try:
        await store.set("pool", [1, 2, 3, 4, 5, 6])
        assert await store.update("pool", shift) == 1
        admin.config_resetstat()
        os.kill(node.pid, signal.SIGSTOP)
        timer = threading.Timer(STALL, os.kill, (node.pid, signal.SIGCONT))
        timer.start()
        assert await store.update("pool", shift) == 2
        assert await store.get("pool") == [3, 4, 5, 6]  # nothing removed behind our back
        # the master did run more than one copy of that script: a resend was recognised
        assert admin.info("commandstats")["cmdstat_evalsha"]["calls"] >= 2
        assert await store.update("pool", shift) == 3
    finally:
        if timer is not None:
            timer.join()
        os.kill(node.pid, signal.SIGCONT)
        admin.close()
        await store.close()


async def test_an_unreachable_cluster_is_a_quick_store_error() -> None:
    port = free_port()
    store = RedisClusterStore(f"redis+cluster://127.0.0.1:{port}/", connect_timeout=1)
    async with asyncio.timeout(20):
        with pytest.raises(StoreError, match=f"redis cluster at 127.0.0.1:{port}: connect"):
            await store.open()


# -- URLs -----------------------------------------------------------------------------------


def test_cluster_urls() -> None:
    url = "redis+cluster://u:pw@10.0.0.1:7000,node-b:7001,[::1]:7002/?prefix=bot&socket_keepalive=true"
    store = open_store(url)
    assert isinstance(store, RedisClusterStore)
    assert store.prefix == "bot"
    assert store.nodes == [("10.0.0.1", 7000), ("node-b", 7001), ("::1", 7002)]
    assert store.where == "redis cluster at 10.0.0.1:7000,node-b:7001,[::1]:7002"
    again = open_store(store.url)  # the URL the store reports opens the same store
    assert isinstance(again, RedisClusterStore) and again.nodes == store.nodes
    assert "u:pw@" in store.url and again.prefix == "bot"

    tls = RedisClusterStore("rediss+cluster://h")
    assert tls.nodes == [("h", 6379)] and tls.prefix == "tmy"
    assert tls._client().connection_kwargs["connection_class"] is SSLConnection
    plain = RedisClusterStore("redis+cluster://h:7000/0")._client()
    assert plain.connection_kwargs["connection_class"] is not SSLConnection

    for bad, named in [
        ("redis+cluster://h:7000/1", "database 0"),
        ("redis+cluster://h:port/", "redis\\+cluster://"),
        ("redis+cluster://h:7000,/", "host:port"),
        ("redis+cluster://h/?prefix=", "prefix"),
        ("redis+cluster://h/?prefix=a{b}", "prefix"),
        ("redis+cluster://h/?colour=blue", "colour"),
        ("redis+cluster://h/?socket_timeout=soon", "socket_timeout"),
    ]:
        with pytest.raises(ConfigError, match=named):
            open_store(bad)
    with pytest.raises(StoreError, match="not a Redis Cluster URL"):
        RedisClusterStore("redis://h:6379/0")
    with pytest.raises(StoreError, match="not a Redis URL"):
        RedisStore("redis+cluster://h:6379/")
