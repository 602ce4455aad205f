"""The Store contract, run against both backends (real SQLite files, a real Redis).

Backend-specific behaviour (Redis round-trips, restarts and outages; SQLite
URLs and a database locked by another process) follows the shared tests.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from tmy.errors import ConfigError, StoreError
from tmy.store import MISSING, Store, open_store
from tmy.store.redis import RedisStore
from tmy.store.sqlite import SQLiteStore

REPO = Path(__file__).resolve().parent.parent


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
    boom = ValueError("boom")

    def fail(value: Any) -> tuple[Any, None]:
        raise boom

    with pytest.raises(ValueError) as raised:
        await store.update("n", fail)
    assert raised.value is boom
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


async def test_a_second_instance_sees_the_data(store: Store) -> None:
    await store.set("persisted", {"v": "ü"})
    await store.update("count", increment)
    again = open_store(store.url)
    await again.open()
    try:
        assert await again.get_many(["persisted", "count"]) == [{"v": "ü"}, 1]
    finally:
        await again.close()


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
        with pytest.raises(StoreError):
            async with store.lock("lease", wait=0.05):
                pass
        async with store.lock("lease", ttl=30, wait=10):  # expires, then it is ours
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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
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

def command_calls(server: Any) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT, minus the bookkeeping ones."""
    stats = server.client().info("commandstats")
    calls = {name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items()}
    return {k: v for k, v in calls.items() if k not in ("config|resetstat", "info")}

