"""The Store contract, run against every backend (real SQLite files, a real Redis,
a real Redis Cluster — cluster specifics are in test_redis_cluster.py).

Backend-specific behaviour (Redis round-trips, restarts and outages; SQLite
URLs and a database locked by another process) follows the shared tests.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Connection
from redis.crc import key_slot

from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy.errors import ConfigError, StoreError
from tmy.store import MISSING, Store, open_store
from tmy.store.redis import RedisStore
from tmy.store.redis.cache import RawCache as _RawCache
from tmy.store.redis.connection import SPARE_CONNECTIONS as _SPARE_CONNECTIONS
from tmy.store.redis.connection import TunedConnection as _Connection
from tmy.store.sqlite import SQLiteStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    """conftest's ``store_url`` plus a Redis Cluster: these tests run on all three."""
    return str(request.getfixturevalue(f"{request.param}_store_url"))


async def eventually_missing(store: Store, key: str, within: float = 10.0) -> None:
    """Poll until ``key`` reads as MISSING (a did-not-hang bound, not a timing assertion)."""
    async with asyncio.timeout(within):
        while await store.get(key) is not MISSING:
            await asyncio.sleep(0.02)


def increment(value: Any) -> tuple[int, int]:
    new = (0 if value is MISSING else value) + 1
    return new, new


# -- values ---------------------------------------------------------------------------


async def test_get_set_delete_and_missing_vs_stored_null(store: Store) -> None:
    assert await store.get("var/global/x") is MISSING
    await store.set("var/global/x", None)
    assert await store.get("var/global/x") is None
    await store.set("var/global/x", {"a": [1, 2.5, True, "s"]})
    assert await store.get("var/global/x") == {"a": [1, 2.5, True, "s"]}
    assert await store.delete("var/global/x") is True
    assert await store.delete("var/global/x") is False
    assert await store.get("var/global/x") is MISSING
    await store.set("var/global/x", 1)
    await store.set("var/global/x", MISSING)  # storing MISSING deletes
    assert await store.get("var/global/x") is MISSING


async def test_ttl_expires_and_plain_set_clears_it(store: Store) -> None:
    await store.set("session/a", {"on": True}, ttl=0.2)
    await store.set("session/b", 1, ttl=0.2)
    await store.set("session/b", 2)  # a plain set stores a value that never expires
    assert await store.get("session/a") == {"on": True}
    await eventually_missing(store, "session/a")
    assert await store.get_many(["session/a", "session/b"]) == [MISSING, 2]
    assert await store.keys("session/") == ["session/b"]
    assert await store.delete("session/a") is False


async def test_update_keeps_the_expiry_unless_given_a_ttl(store: Store) -> None:
    await store.set("session/kept", 1, ttl=0.3)
    assert await store.update("session/kept", increment) == 2
    await eventually_missing(store, "session/kept")
    assert await store.update("session/new", increment, ttl=0.2) == 1
    await eventually_missing(store, "session/new")


async def test_get_many_keeps_order_and_reports_missing(store: Store) -> None:
    await store.set("a", 1)
    await store.set("b", [2])
    assert await store.get_many(["b", "nope", "a", "b"]) == [[2], MISSING, 1, [2]]
    assert await store.get_many([]) == []
    many = [f"k/{i}" for i in range(1200)]  # more than one SQL chunk
    for key in many[::100]:
        await store.set(key, key)
    got = await store.get_many(many)
    assert got == [k if i % 100 == 0 else MISSING for i, k in enumerate(many)]


async def test_update_creates_replaces_and_deletes(store: Store) -> None:
    seen = []

    def push(value: Any) -> tuple[Any, int]:
        seen.append(value)
        items = [] if value is MISSING else value
        return [*items, len(items)], len(items)

    assert await store.update("list", push) == 0
    assert await store.update("list", push) == 1
    assert await store.get("list") == [0, 1]
    assert seen[0] is MISSING
    assert await store.update("list", lambda v: (MISSING, v)) == [0, 1]
    assert await store.get("list") is MISSING
    assert await store.update("list", lambda v: (MISSING, "nothing")) == "nothing"
    assert await store.get("list") is MISSING


async def test_update_whose_fn_raises_writes_nothing(store: Store) -> None:
    await store.set("n", 5)
    boom, cause = ValueError("boom"), KeyError("cause")

    def fail(value: Any) -> tuple[Any, None]:
        raise boom from cause

    with pytest.raises(ValueError) as raised:
        await store.update("n", fail)
    assert raised.value is boom
    assert boom.__cause__ is cause  # unchanged, not re-wrapped
    with pytest.raises(ValueError):
        await store.update("fresh", fail)
    with pytest.raises(StoreError, match="set"):
        await store.update("n", lambda v: ({v}, None))
    assert await store.get("n") == 5
    assert await store.get("fresh") is MISSING
    assert await store.update("n", increment) == 6  # the store is still usable


async def test_keys_by_prefix_sorted_with_glob_characters(store: Store) -> None:
    names = ["a*b", "a?c", "a[x]", "a\\d", "a", "ab", "b/1", "a*", "a}:lock", "a{z}"]
    for name in names:
        await store.set(name, name)
    async with store.lock("a*lock"):  # leases are not values
        assert await store.keys("a*") == ["a*", "a*b"]
        assert await store.keys("a[") == ["a[x]"]
        assert await store.keys("a\\") == ["a\\d"]
        assert await store.keys("a?") == ["a?c"]
        assert await store.keys("a}") == ["a}:lock"]
        assert await store.keys("") == sorted(names)
        assert await store.keys("zzz") == []


async def test_unicode_keys_and_values(store: Store) -> None:
    key = "var/user/微信/Zoë😀"
    value = {"ключ": "значение", "emoji": "😀🎉", "mixed": ["à", "ß", "中文"]}
    await store.set(key, value)
    assert await store.get(key) == value
    assert await store.keys("var/user/微信/") == [key]
    assert await store.update(key, lambda v: ({**v, "n": 1}, v["emoji"])) == "😀🎉"
    assert (await store.get_many([key]))[0]["n"] == 1


async def test_json_conversions(store: Store) -> None:
    await store.set("conv", {1: "one", "t": (1, (2, 3)), "u": "ü"})
    assert await store.get("conv") == {"1": "one", "t": [1, [2, 3]], "u": "ü"}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({1, 2}, "set"),
        (b"raw", "bytes"),
        (object(), "object"),
        ({"deep": [{"s": frozenset()}]}, "frozenset"),
        (datetime.datetime(2024, 1, 1), "datetime"),
        (2**70, "64-bit"),
        (math.nan, "NaN"),
        ({"x": [None, -math.inf]}, "Infinity"),
        ([MISSING], "MISSING"),
    ],
)
async def test_values_json_cannot_hold_are_refused(store: Store, value: Any, named: str) -> None:
    await store.set("keep", "old")
    with pytest.raises(StoreError, match=named):
        await store.set("keep", value)
    with pytest.raises(StoreError, match=named):
        await store.set("new", value, ttl=10)
    with pytest.raises(StoreError, match=named):
        await store.update("keep", lambda v: (value, None))
    assert await store.get_many(["keep", "new"]) == ["old", MISSING]


async def test_bad_keys_and_ttls_are_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="non-empty"):
        await store.set("", 1)
    for ttl in (0, -1, math.inf, math.nan):
        with pytest.raises(StoreError, match="ttl"):
            await store.set("k", 1, ttl=ttl)
    assert await store.get("k") is MISSING


# -- concurrency --------------------------------------------------------------------------


async def test_concurrent_updates_hand_out_every_item_once(store: Store) -> None:
    await store.set("queue", list(range(200)))

    def pop_first(items: list[int]) -> tuple[list[int], int]:
        return items[1:], items[0]

    got = await asyncio.gather(*(store.update("queue", pop_first) for _ in range(200)))
    assert sorted(got) == list(range(200))
    assert await store.get("queue") == []


async def test_concurrent_read_modify_write_under_lock(store: Store) -> None:
    await store.set("counter", 0)

    async def bump() -> None:
        async with store.lock("counter"):
            value = await store.get("counter")
            await asyncio.sleep(0)  # let every other task try to get in
            await store.set("counter", value + 1)

    await asyncio.gather(*(bump() for _ in range(500)))
    assert await store.get("counter") == 500
    assert len(store._leases) == 0  # type: ignore[attr-defined]  # idle locks are dropped


async def test_two_instances_updating_one_key(store: Store) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        both = [s.update("shared", increment) for s in (store, other) for _ in range(100)]
        assert sorted(await asyncio.gather(*both)) == list(range(1, 201))
    finally:
        await other.close()


async def test_update_runs_on_the_current_value_after_another_instance_wrote(
    store: Store,
) -> None:
    other = open_store(store.url)
    await other.open()

    def pop_first(items: Any) -> tuple[list[int], int]:
        if not isinstance(items, list):
            raise TypeError(f"not a list: {items!r}")
        return items[1:], items[0]

    try:
        await other.set("q", [1, 2])
        assert await store.update("q", pop_first) == 1  # never seen here before
        await other.set("q", "text")
        with pytest.raises(TypeError, match="text"):  # what this instance last saw was [2]
            await store.update("q", pop_first)
        await other.set("q", [5])
        assert await store.update("q", pop_first) == 5  # last seen "text" is not the truth
        assert await other.get("q") == []
    finally:
        await other.close()


async def test_a_second_instance_sees_the_data(store: Store) -> None:
    await store.set("persisted", {"v": "ü"})
    await store.update("count", increment)
    again = open_store(store.url)
    await again.open()
    try:
        assert await again.get_many(["persisted", "count"]) == [{"v": "ü"}, 1]
    finally:
        await again.close()


# -- claims ---------------------------------------------------------------------------


async def test_a_claim_is_taken_once_until_it_expires(store: Store) -> None:
    assert await store.claim("dedup/x/1", 0.3) is True
    assert await store.claim("dedup/x/1", 0.3) is False
    assert await store.claim("dedup/x/2", 0.3) is True  # another key is its own claim
    assert await store.get("dedup/x/1") is not MISSING  # an ordinary key while it lasts
    await eventually_missing(store, "dedup/x/1")
    assert await store.claim("dedup/x/1", 30) is True  # expired: taken again
    assert await store.claim("dedup/x/1", 30) is False


async def test_a_key_that_never_expires_cannot_be_claimed(store: Store) -> None:
    await store.set("dedup/kept", 1)
    assert await store.claim("dedup/kept", 30) is False
    assert await store.get("dedup/kept") == 1


async def test_claims_asked_together_answer_each_key_once_in_order(store: Store) -> None:
    keys = ["dedup/t/a", "dedup/t/b", "dedup/t/a", "dedup/t/c", "dedup/t/b", "dedup/t/a"]
    answers = await asyncio.gather(*(store.claim(k, 60) for k in keys))
    assert answers == [True, True, False, True, False, False]  # the first asker of each wins
    assert await asyncio.gather(*(store.claim(k, 60) for k in keys[:3])) == [False] * 3


async def test_a_batch_of_claims_larger_than_one_statement_answers_each_key_once(
    store: Store,
) -> None:
    """250 claims at once (SQLite takes them 100 keys to a statement): a key listed again in
    a later statement of the same batch is refused, an expired key is taken again."""
    await store.claim("dedup/big/old", 0.05)
    await asyncio.sleep(0.1)  # expired
    keys = [f"dedup/big/{i % 180}" for i in range(250)] + ["dedup/big/old"]
    answers = await asyncio.gather(*(store.claim(k, 60) for k in keys))
    assert answers == [True] * 180 + [False] * 70 + [True]
    again = await asyncio.gather(*(store.claim(k, 60) for k in keys[:5]))
    assert again == [False] * 5


async def test_bad_claim_keys_and_ttls_are_refused(store: Store) -> None:
    for ttl in (0, -1, math.nan, math.inf):
        with pytest.raises(StoreError):
            await store.claim("dedup/bad", ttl)
    with pytest.raises(StoreError):
        await store.claim("", 1)


async def test_two_instances_claiming_the_same_keys_each_win_one_exactly_once(
    store: Store,
) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        keys = [f"dedup/race/{i}" for i in range(60)]
        calls = [(s, k) for k in keys for s in (store, other, store, other)]
        results = await asyncio.gather(*(s.claim(k, 60) for s, k in calls))
        won: dict[str, int] = {}
        for (_, key), result in zip(calls, results, strict=True):
            won[key] = won.get(key, 0) + bool(result)
        assert won == dict.fromkeys(keys, 1)
    finally:
        await other.close()


async def test_lock_times_out_and_is_released_after_an_error(store: Store) -> None:
    entered = asyncio.Event()

    async def holder() -> None:
        async with store.lock("busy"):
            entered.set()
            await asyncio.sleep(0.5)

    task = asyncio.create_task(holder())
    await entered.wait()
    with pytest.raises(StoreError, match="busy"):
        async with store.lock("busy", wait=0.05):
            pass
    await task
    with pytest.raises(KeyError):
        async with store.lock("busy", wait=1):
            raise KeyError("inside")
    async with store.lock("busy", wait=1):
        pass


async def test_lease_of_a_dead_holder_expires_and_is_not_stolen_back(store: Store) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        dead = other.lock("lease", ttl=0.2)
        await dead.__aenter__()  # taken and never released, like a crashed process
        await other.close()  # ... and not renewed either: its store is gone
        with pytest.raises(StoreError):
            async with store.lock("lease", wait=0.05):
                pass
        async with store.lock("lease", ttl=30, wait=10):  # expires, then it is ours
            await other.open()  # the holder comes back: its renewal finds the lease lost
            await dead.__aexit__(None, None, None)  # the late holder must not free it
            with pytest.raises(StoreError):
                async with other.lock("lease", wait=0.05):
                    pass
    finally:
        await other.close()


CHILD = """
import asyncio, sys
from tmy.store import open_store

def increment(value):
    return value + 1, None

async def main(url, mode, n):
    store = open_store(url)
    await store.open()
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(n):
        if mode == "lock":
            async with store.lock("counter", wait=50):
                value = await store.get("counter")
                await store.set("counter", value + 1)
        else:
            await store.update("counter", increment)
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lock", "update"])
async def test_two_processes_increment_without_losing_updates(
    store: Store, store_url: str, mode: str
) -> None:
    await store.set("counter", 1000)  # the children must see what this process wrote
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, store_url, mode, "200",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        )
        for _ in range(2)
    ]  # fmt: skip
    try:
        async with asyncio.timeout(50):
            for child in children:  # both ready before either starts: they overlap
                assert await child.stdout.readline() == b"ready\n"  # type: ignore[union-attr]
            for child in children:
                child.stdin.write(b"go\n")  # type: ignore[union-attr]
                await child.stdin.drain()  # type: ignore[union-attr]
            assert [await child.wait() for child in children] == [0, 0]
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
                await child.wait()
    assert await store.get("counter") == 1400


# -- Redis ------------------------------------------------------------------------------


def command_calls(admin: Any) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT, minus the bookkeeping ones."""
    stats = admin.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items()}
    return {k: v for k, v in calls.items() if k not in ("config|resetstat", "info")}


async def opened_redis(url: str, **kwargs: Any) -> RedisStore:
    store = RedisStore(url, **kwargs)
    await store.open()
    return store


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_round_trips_per_operation(redis_server: Any) -> None:
    server = redis_server()
    store = await opened_redis(server.url, prefix="rt")
    admin = server.client()
    try:
        await store.update("n", increment)  # warm-up: loads the script, opens the connection
        await store.update("n", increment)

        admin.config_resetstat()
        for _ in range(50):
            await store.update("n", increment)
        # one EVALSHA per update; the script's own commands are counted by Redis too:
        # SET NX of the write record (a resent copy finds it), GET of the key's turn
        # (a starving daemon's claim), GET and SET of the value
        assert command_calls(admin) == {"evalsha": 50, "get": 100, "set": 100}

        admin.config_resetstat()
        await store.get("n")
        await store.set("m", [1])
        await store.set("t", 1, ttl=60)
        await store.get_many(["n", "m", "t", "absent"])
        await store.delete("t")
        # set and delete are one recorded EVALSHA each: GET record, SET/DEL, SET record
        assert command_calls(admin) == {"evalsha": 3, "get": 4, "set": 5, "mget": 1, "del": 1}

        admin.config_resetstat()
        admin.set("rt:{n}", b"1000")  # written elsewhere: the stale guess costs one retry
        assert await store.update("n", increment) == 1001
        assert command_calls(admin)["evalsha"] == 2

        admin.config_resetstat()
        async with store.lock("n"):
            pass
        assert command_calls(admin) == {"evalsha": 2, "set": 1, "get": 1, "del": 1}
    finally:
        await store.close()
        admin.close()


@pytest.fixture
async def redis_store(redis_url: str, redis_namespace: str) -> AsyncIterator[RedisStore]:
    """An opened RedisStore on the test Redis, under this test's own prefix."""
    store = await opened_redis(redis_url, prefix=redis_namespace)
    try:
        yield store
    finally:
        await store.close()


@pytest.mark.redis
async def test_redis_key_layout_is_cluster_safe(redis_store: RedisStore) -> None:
    prefix = redis_store.prefix
    await redis_store.set("var/global/x", 1)
    async with redis_store.lock("var/global/x"):
        raw = redis_store._redis
        assert raw is not None
        names = sorted(k.decode() for k in await raw.keys(f"{prefix}:*"))
    marker = f"{prefix}:{{tmy/format}}"  # written by open (the store format marker)
    assert marker in names
    names.remove(marker)
    value, lock, record = names  # the set left a write record (expiring) next to the value
    assert [value, lock] == [f"{prefix}:{{var/global/x}}", f"{prefix}:{{var/global/x}}:lock"]
    assert record.startswith(f"{prefix}:{{var/global/x}}:op:")
    assert len({key_slot(name.encode()) for name in names}) == 1


def test_redis_commands_pack_to_the_same_bytes_as_redis_py_packs_them() -> None:
    """With hiredis the store packs commands in C; the bytes on the wire are redis-py's."""
    assert _Connection.pack_command is not Connection.pack_command  # hiredis is installed
    ours, theirs = _Connection(), Connection()
    commands = [
        ("GET", "tmy:{var/global/x}"),
        ("EVALSHA", "a" * 40, 3, "k", "k:op:1", "k:turn", "1", b"\x00\xff", "s", b"v" * 70_000),
        ("SET", "café ☕", 12345678901234567890, "PX", "30000"),
        ("CONFIG GET", "maxmemory"),
    ]
    for command in commands:
        assert b"".join(ours.pack_command(*command)) == b"".join(theirs.pack_command(*command))
    assert b"".join(ours.pack_commands(commands)) == b"".join(theirs.pack_commands(commands))


@pytest.mark.redis
async def test_redis_more_concurrent_calls_than_connections_queue_instead_of_failing(
    redis_url: str, redis_namespace: str
) -> None:
    """The store's own gate, not redis-py's pool, queues calls beyond max_connections:
    every call lands and the pool never grows past the gate plus its spares."""
    store = await opened_redis(redis_url, prefix=redis_namespace, max_connections=2)
    try:
        calls = [store.update(f"n{i % 3}", increment) for i in range(150)]
        calls += [store.get_many(["n0", "n1", "n2"]) for _ in range(50)]
        calls += [store.set(f"s{i}", i) for i in range(100)]

        async def locked(i: int) -> None:
            async with store.lock(f"l{i % 4}"):
                await store.update("locked", increment)

        calls += [locked(i) for i in range(40)]
        await asyncio.gather(*calls)
        assert await store.get_many(["n0", "n1", "n2", "locked"]) == [50, 50, 50, 40]
        assert await store.get_many([f"s{i}" for i in range(100)]) == list(range(100))
        pool = store._r().connection_pool
        pooled = len(pool._available_connections) + len(pool._in_use_connections)
        assert pooled <= 2 + _SPARE_CONNECTIONS
    finally:
        await store.close()


@pytest.mark.redis
async def test_redis_calls_queued_when_the_store_closes_fail_and_leave_nothing_behind(
    redis_url: str, redis_namespace: str
) -> None:
    """Calls waiting for a turn when close() runs fail as "not open" rather than run
    on the closed store's connections, and a reopened store starts clean."""
    store = await opened_redis(redis_url, prefix=redis_namespace, max_connections=1)
    try:
        await store.set("k", 1)
        calls = [asyncio.ensure_future(store.get("k")) for _ in range(5)]
        await asyncio.sleep(0)  # the first is on the wire, the others wait for a turn
        await store.close()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(r == 1 or isinstance(r, StoreError) for r in results), results
        assert sum(isinstance(r, StoreError) for r in results) >= 4
        assert all("not open" in str(r) for r in results if isinstance(r, StoreError))
        assert store._lanes == []
        await store.open()
        assert await asyncio.gather(*(store.get("k") for _ in range(20))) == [1] * 20
        assert len(store._lanes) == 1  # one turn, one lane, on the new pool
    finally:
        await store.close()


@pytest.mark.redis
async def test_redis_values_larger_than_a_socket_buffer_are_written_and_read_back(
    redis_store: RedisStore,
) -> None:
    """Commands too big to go out in one write take redis-py's timed path; small ones
    its untimed one. Both land, and every pooled connection keeps its read timeout."""
    big = {"text": "x" * 3_000_000, "n": list(range(1000))}
    await asyncio.gather(*(redis_store.set(f"big{i}", big) for i in range(3)))
    await redis_store.set("small", 1)
    assert await redis_store.get_many(["big0", "big1", "big2", "small"]) == [big, big, big, 1]
    assert await redis_store.update("big0", lambda v: ({**v, "n": []}, len(v["n"]))) == 1000
    assert (await redis_store.get("big0"))["n"] == []
    pool = redis_store._r().connection_pool
    connections = [*pool._available_connections, *pool._in_use_connections]
    assert connections  # the store's lanes hold theirs (in use, from the pool's view)
    for connection in connections:
        assert connection.socket_timeout == redis_store.socket_timeout


@pytest.mark.redis
async def test_redis_foreign_data_is_a_store_error(redis_store: RedisStore) -> None:
    raw = redis_store._redis
    assert raw is not None
    await raw.set(f"{redis_store.prefix}:{{corrupt}}", b"{not json")
    await raw.hset(f"{redis_store.prefix}:{{hash}}", "f", "v")
    with pytest.raises(StoreError, match="corrupt"):
        await redis_store.get("corrupt")
    with pytest.raises(StoreError, match=r"redis at .*WRONGTYPE"):
        await redis_store.get("hash")
    with pytest.raises(StoreError, match=r"redis at .*WRONGTYPE"):
        await redis_store.update("hash", increment)


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_restart_is_survived_and_outage_is_a_quick_store_error(
    redis_server: Any,
) -> None:
    server = redis_server("--appendonly", "yes", "--appendfsync", "always")
    store = await opened_redis(server.url, prefix="rs")
    try:
        await store.set("kept", {"v": "ü"})
        assert await store.update("n", increment) == 1
        async with store.lock("held", ttl=60):
            pass

        server.restart(kill=True)  # a crash: only what reached the AOF survives
        assert await store.get("kept") == {"v": "ü"}  # the same instance reconnects
        assert await store.update("n", increment) == 2  # the script is loaded again
        async with store.lock("held", wait=1):
            pass

        server.stop()
        where = f"redis at 127.0.0.1:{server.port}"
        async with asyncio.timeout(20):  # the did-not-hang bound
            for attempt in (
                store.get("kept"),
                store.set("kept", 1),
                store.update("n", increment),
                store.keys(""),
                store.ping(),
            ):
                with pytest.raises(StoreError, match=where):
                    await attempt
            with pytest.raises(StoreError, match=where):
                async with store.lock("held"):
                    pass

        server.start()
        assert await store.get_many(["kept", "n"]) == [{"v": "ü"}, 2]
        assert await store.update("n", increment) == 3
    finally:
        await store.close()


@pytest.mark.redis
async def test_redis_unreachable_at_open_is_a_store_error(redis_server: Any) -> None:
    server = redis_server()
    server.stop()
    async with asyncio.timeout(20):
        with pytest.raises(StoreError, match=f"redis at 127.0.0.1:{server.port}: connect"):
            await opened_redis(server.url)


def test_redis_value_cache_is_bounded() -> None:
    by_count = _RawCache(max_keys=3)
    for key in ("k0", "k1", "k2", "k3", "k2", "k4", "k5"):  # k2 seen again moves to the back
        by_count.put(key, b"1")
    assert [k for k in ("k0", "k1", "k2", "k3", "k4", "k5") if by_count.get(k)] == [
        "k2",
        "k4",
        "k5",
    ]
    by_size = _RawCache(max_keys=100, max_bytes=320)  # at most 320 // 16 = 20 bytes a value
    by_size.put("big", b"z" * 21)
    assert by_size.get("big") is None
    for i in range(17):
        by_size.put(f"v{i}", b"x" * 20)
    assert len(by_size) == 16 and by_size.get("v0") is None and by_size.get("v16")
    by_size.put("v16", None)  # absent is the default guess: forgotten
    assert by_size.get("v16") is None and len(by_size) == 15


def test_redis_url_prefix_and_errors() -> None:
    store = open_store("redis://u:pw@example.org:6380/2?prefix=bot1&socket_keepalive=true")
    assert isinstance(store, RedisStore)
    assert store.prefix == "bot1"
    assert store.where == "redis at example.org:6380"
    assert open_store(store.url).prefix == "bot1"  # type: ignore[attr-defined]
    assert RedisStore("rediss://h/0").prefix == "tmy"
    with pytest.raises(ConfigError, match="redis://"):
        open_store("redis://h:port/0")
    with pytest.raises(ConfigError, match="prefix"):
        open_store("redis://h/0?prefix=")
    with pytest.raises(ConfigError, match="colour"):
        open_store("redis://h/0?colour=blue")
    with pytest.raises(ConfigError, match="socket_timeout"):
        open_store("redis://h/0?socket_timeout=soon")


@pytest.mark.parametrize(
    "query",
    [
        "max_connections=0",
        "max_connections=1.5",
        "max_connections=many",
        "timeout=-1",
        "socket_timeout=nan",
        "socket_connect_timeout=inf",
    ],
)
def test_redis_url_connection_options_must_be_positive(query: str) -> None:
    with pytest.raises(ConfigError, match=query.split("=")[0]):
        open_store(f"redis://h/0?{query}")
    with pytest.raises(StoreError, match="max_connections"):
        RedisStore("redis://h/0", max_connections=-1)


def test_redis_url_connection_options_size_the_store_not_only_redis_py() -> None:
    """The gate, its wait and the write records follow the URL's options."""
    store = RedisStore("redis://h/0?max_connections=3&timeout=2&socket_timeout=1.5&db=0")
    assert (store.max_connections, store.queue_timeout, store.socket_timeout) == (3, 2.0, 1.5)
    pool = store._pool()
    assert pool.max_connections == 3 + _SPARE_CONNECTIONS
    assert pool.connection_kwargs["socket_timeout"] == 1.5
    assert "timeout" not in pool.connection_kwargs  # not redis-py's: it has no such option
    plain = RedisStore("redis://h/0?socket_timeout=7")
    assert plain.queue_timeout == 7.0 and plain.op_ttl > RedisStore("redis://h/0").op_ttl


@pytest.mark.redis
async def test_redis_url_max_connections_queue_instead_of_failing(
    redis_url: str, redis_namespace: str
) -> None:
    store = await opened_redis(f"{redis_url}?prefix={redis_namespace}&max_connections=2&timeout=9")
    try:
        await asyncio.gather(*(store.update(f"n{i % 4}", increment) for i in range(400)))
        assert await store.get_many([f"n{i}" for i in range(4)]) == [100] * 4
    finally:
        await store.close()


# -- SQLite -----------------------------------------------------------------------------


def test_sqlite_urls_resolve_like_sqlalchemy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def path_of(url: str, base: Path | None = None) -> Any:
        store = open_store(url, base)
        assert isinstance(store, SQLiteStore)
        return store.path

    assert path_of("sqlite:///data/tmy.db", tmp_path) == tmp_path / "data" / "tmy.db"
    assert path_of(f"sqlite:///{tmp_path}/abs.db", Path("/elsewhere")) == tmp_path / "abs.db"
    assert path_of("sqlite:////var/lib/tmy.db") == Path("/var/lib/tmy.db")
    assert path_of("sqlite:///:memory:") == ":memory:"
    monkeypatch.chdir(tmp_path)
    assert path_of("sqlite:///rel.db") == tmp_path / "rel.db"


@pytest.mark.parametrize(
    "url",
    [
        "postgres://h/db",
        "data/tmy.db",
        "sqlite://tmy.db",
        "sqlite:///",
        "sqlite:///x.db?mode=ro",
        "",
    ],
)
def test_unknown_store_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError, match=r"sqlite:///data/tmy\.db") as raised:
        open_store(url)
    assert "redis://" in str(raised.value)


async def test_sqlite_creates_parent_directories_and_persists(tmp_path: Path) -> None:
    url = "sqlite:///deep/er/tmy.db"
    first = open_store(url, tmp_path)
    await first.open()
    await first.set("x", [1])
    await first.close()
    await first.close()  # idempotent
    assert (tmp_path / "deep" / "er" / "tmy.db").is_file()
    second = open_store(url, tmp_path)
    await second.open()
    try:
        assert await second.get("x") == [1]
    finally:
        await second.close()
    with pytest.raises(StoreError, match="not open"):
        await second.get("x")


async def test_sqlite_memory_store_works(tmp_path: Path) -> None:
    store = open_store("sqlite:///:memory:")
    await store.open()
    try:
        assert await store.update("n", increment) == 1
        async with store.lock("n"):
            assert await store.keys("") == ["n"]
    finally:
        await store.close()


HOLD_WRITE_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO kv (key, value) VALUES ('counter', '1')")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


async def hold_write_lock(path: Path, seconds: float) -> asyncio.subprocess.Process:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD_WRITE_LOCK, str(path), str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert await child.stdout.readline() == b"locked\n"  # type: ignore[union-attr]
    return child


@pytest.mark.slow
async def test_sqlite_waits_for_another_process_without_blocking_the_loop(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "locked.db")
    await store.open()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    child = await hold_write_lock(store.path, 1.0)  # type: ignore[arg-type]
    ticking = asyncio.create_task(ticker())
    try:
        async with asyncio.timeout(20):
            assert await store.update("counter", increment) == 2  # saw the child's commit
        assert ticks >= 5  # the loop kept running while we waited
        assert await child.wait() == 0
    finally:
        ticking.cancel()
        if child.returncode is None:
            child.kill()
            await child.wait()
        await store.close()


@pytest.mark.slow
async def test_sqlite_claims_wait_for_another_process_holding_the_file(tmp_path: Path) -> None:
    """A batch of claims that finds the file locked waits (off the fast path) and answers."""
    store = SQLiteStore(tmp_path / "locked.db")
    await store.open()
    child = await hold_write_lock(store.path, 0.5)  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(20):
            keys = ["dedup/l/1", "dedup/l/2", "dedup/l/1"]
            assert await asyncio.gather(*(store.claim(k, 60) for k in keys)) == [
                True,
                True,
                False,
            ]
            assert await store.claim("dedup/l/3", 60) is True
        assert await child.wait() == 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        await store.close()


@pytest.mark.slow
async def test_sqlite_gives_up_after_lock_timeout(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "locked.db", lock_timeout=0.3)
    await store.open()
    child = await hold_write_lock(store.path, 30)  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(20):
            with pytest.raises(StoreError, match="locked by another"):
                await store.set("counter", 5)
        assert await store.get("counter") is MISSING  # reads are not blocked (WAL)
    finally:
        child.kill()
        await child.wait()
        await store.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_concurrent_updates_of_one_key_share_round_trips(redis_server: Any) -> None:
    """Group commit: 64 concurrent updates of one key need far fewer than 64 CAS calls."""
    server = redis_server()
    store = await opened_redis(server.url, prefix="gc")
    admin = server.client()
    try:
        await store.update("n", increment)  # warm-up
        admin.config_resetstat()
        results = await asyncio.gather(*(store.update("n", increment) for _ in range(64)))
        assert sorted(results) == list(range(2, 66))  # every caller saw its own step
        assert await store.get("n") == 65
        assert command_calls(admin)["evalsha"] < 64
    finally:
        await store.close()


async def test_a_failing_update_in_a_batch_leaves_the_others_applied(store: Store) -> None:
    await store.set("n", 0)

    def boom(current: Any) -> tuple[Any, Any]:
        current += 1000  # changes its own copy, then fails: nothing of it may be written
        raise ValueError("no")

    outcomes = await asyncio.gather(
        *(store.update("n", boom if i % 5 == 0 else increment) for i in range(50)),
        return_exceptions=True,
    )
    failures = [o for o in outcomes if isinstance(o, ValueError)]
    assert len(failures) == 10
    assert await store.get("n") == 40


async def test_claim_many_is_claim_in_order(store: Store) -> None:
    from tmy.store.metered import metered

    many = getattr(store, "claim_many", None)
    assert many is not None
    keys = ["dedup/m/a", "dedup/m/b", "dedup/m/a", "dedup/m/c"]
    assert await many(keys, 60) == [True, True, False, True]
    assert await many(keys, 60) == [False] * 4
    assert await store.claim("dedup/m/b", 60) is False
    assert await store.get("dedup/m/c") is not MISSING
    assert await metered(store).claim_many(["dedup/m/d", "dedup/m/a"], 60) == [True, False]
