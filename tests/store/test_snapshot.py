"""Store.snapshot / Store.restore and the store format marker, on every backend (real
SQLite files, a real Redis, a real Redis Cluster) and across them: the migration path
(SQLite -> Redis, Redis -> SQLite) must carry every value, TTL and board entry."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy.errors import StoreError, ValueRefused
from tmy.store import MISSING, Store, open_store
from tmy.store.base import FORMAT_KEY, STORE_FORMAT, Snapshot
from tmy.store.metered import metered
from tmy.store.overlay import OverlayStore
from tmy.store.sqlite import SQLiteStore

BOARD = "console/visits"  # the board of the rank: true variable "visits" on console

ALICE = "var/user/console/alice/visits"

VALUES: dict[str, Any] = {
    "var/global/jokes": ["a", "b", {"nested": [1, 2.5, None, True]}],
    "var/user/console/alice/visits": 12,
    "var/user/console/bob/visits": 7.5,
    "var/user/console/carl/visits": "not a number",
    "hist/console/alice": [{"role": "user", "content": "héllo 世界"}],
    "var/global/ключ ✓": {"1": "a", "empty": {}, "list": []},
    "var/global/null": None,
    "var/global/glob*[x]?": 0,
}


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_store_url"))


async def fill(store: Store) -> None:
    """VALUES, a session with a TTL, a held lease's key left out, and a board."""
    for key, value in VALUES.items():
        await store.set(key, value)
    await store.set("session/console/alice", {"on": True}, ttl=300)
    for user in ("alice", "bob", "carl"):
        await store.rank_sync(BOARD, user, f"var/user/console/{user}/visits", user.title())


def assert_same(got: Snapshot, want: Snapshot, *, slack: float = 5.0) -> None:
    """Equal entries and boards; TTLs within ``slack`` seconds (time passes)."""
    assert [(k, v) for k, v, _ in got.entries] == [(k, v) for k, v, _ in want.entries]
    for (key, _, got_ttl), (_, _, want_ttl) in zip(got.entries, want.entries, strict=True):
        if want_ttl is None:
            assert got_ttl is None, key
        else:
            assert got_ttl is not None and abs(got_ttl - want_ttl) < slack, key
    assert got.ranks == want.ranks


async def opened(url: str) -> Store:
    store = open_store(url)
    await store.open()
    return store


@pytest.fixture
async def sqlite_store(sqlite_store_url: str) -> AsyncIterator[Store]:
    store = await opened(sqlite_store_url)
    yield store
    await store.close()


# -- on each backend ------------------------------------------------------------------


async def test_snapshot_holds_every_live_key_and_board_entry_but_no_bookkeeping(
    store: Store,
) -> None:
    await fill(store)
    await store.set("session/gone", 1, ttl=0.05)
    await store.update("var/global/jokes", lambda v: (v, None))  # leaves a write record
    await asyncio.sleep(0.1)
    async with store.lock("var/global/jokes"):  # a lease held while the snapshot is taken
        snap = await store.snapshot()
    keys = [key for key, _, _ in snap.entries]
    assert keys == sorted([*VALUES, "session/console/alice"])  # not the lease, the marker, …
    assert FORMAT_KEY not in keys
    assert dict((k, v) for k, v, _ in snap.entries) == {
        **VALUES,
        "session/console/alice": {"on": True},
    }
    ttls = {key: ttl for key, _, ttl in snap.entries}
    assert 290 < ttls.pop("session/console/alice") <= 300
    assert set(ttls.values()) == {None}
    assert snap.ranks == [
        (BOARD, "alice", 12.0, "Alice"),
        (BOARD, "bob", 7.5, "Bob"),
    ]


async def test_snapshot_reads_keys_in_batches(store: Store) -> None:
    """More keys than one script / transaction batch (SCAN-based, batched on Redis)."""
    for i in range(1234):
        await store.set(f"k/{i:05d}", i, ttl=600 if i % 2 else None)
    snap = await store.snapshot()
    assert [(k, v) for k, v, _ in snap.entries] == [(f"k/{i:05d}", i) for i in range(1234)]
    assert [ttl is None for _, _, ttl in snap.entries] == [i % 2 == 0 for i in range(1234)]


async def test_restore_merge_keeps_other_keys_and_replace_deletes_them(store: Store) -> None:
    snap = Snapshot(
        entries=[("var/a", 1, None), ("var/b", [2], 120.0), (ALICE, 3, None)],
        ranks=[(BOARD, "alice", 3.0, "Alice"), ("opaque-board", "bob", 1.5, None)],
    )
    await store.set("var/a", "old")
    await store.set("var/z", "kept by a merge")
    await store.set("var/b", "x")
    await store.rank_sync(BOARD, "zed", "var/a")  # "old": not a number -> not on the board
    await store.set("var/n", 9)
    await store.rank_sync(BOARD, "nina", "var/n", "Nina")

    assert await store.restore(snap, replace=False) == 3
    assert await store.get_many(["var/a", "var/b", "var/z", "var/n"]) == [
        1,
        [2],
        "kept by a merge",
        9,
    ]
    assert await store.rank_top(BOARD, 10) == [("nina", 9, "Nina"), ("alice", 3, "Alice")]
    assert await store.rank_top("opaque-board", 10) == [("bob", 1.5, None)]

    async with store.lock("var/a") as lease:  # a lease survives a replacing restore
        assert await store.restore(snap, replace=True) == 3
        assert await store.keys("") == ["var/a", "var/b", ALICE]
        await store.commit([("var/a", "fenced", None)], fence=[lease])
    assert await store.get("var/a") == "fenced"
    assert await store.rank_top(BOARD, 10) == [("alice", 3, "Alice")]
    assert await store.rank_of(BOARD, "nina") is None
    assert await store.get(FORMAT_KEY) == {"format": STORE_FORMAT}  # the marker stays
    after = await store.snapshot()
    assert after.ranks == snap.ranks
    assert 110 < after.entries[1][2] <= 120  # type: ignore[operator]


async def test_restore_resyncs_each_board_entry_from_the_value_it_restored(
    store: Store,
) -> None:
    """A board entry that lagged its value in the snapshot (or has no value, or one that
    is not a number) is corrected by restore; a board id the engine did not make keeps
    the snapshot's score; names are the snapshot's."""
    await store.set(f"var/user/console/{'dan'}/visits", 40)  # in the store, not the snapshot
    snap = Snapshot(
        entries=[
            (ALICE, 12, None),
            ("var/user/console/bob/visits", 7.5, None),
            ("var/user/console/carl/visits", "not a number", None),
            ("var/user/console/a%2Fb/visits", 3, None),  # a user id with a slash, escaped
        ],
        ranks=[
            (BOARD, "a/b", 1.0, None),
            (BOARD, "alice", 10.0, "Alice"),  # lagged: the value is 12
            (BOARD, "bob", 7.5, "Bob"),
            (BOARD, "carl", 2.0, "Carl"),  # the value is no number: removed
            (BOARD, "dan", 1.0, "Dan"),  # the store's value (merge): 40
            (BOARD, "gone", 5.0, "Gone"),  # no value at all: removed
            ("opaque", "zoe", 2.5, "Zoe"),  # not "{platform}/{name}": as given
        ],
    )
    await store.restore(snap, replace=False)
    assert await store.rank_top(BOARD, 10) == [
        ("dan", 40, "Dan"),
        ("alice", 12, "Alice"),
        ("bob", 7.5, "Bob"),
        ("a/b", 3, None),
    ]
    assert [await store.rank_of(BOARD, m) for m in ("dan", "alice", "bob", "a/b")] == [1, 2, 3, 4]
    assert await store.rank_of(BOARD, "carl") is None
    assert await store.rank_of(BOARD, "gone") is None
    assert await store.rank_top("opaque", 5) == [("zoe", 2.5, "Zoe")]
    await store.restore(snap, replace=True)  # replacing: dan's value is gone with the rest
    assert await store.rank_top(BOARD, 10) == [
        ("alice", 12, "Alice"),
        ("bob", 7.5, "Bob"),
        ("a/b", 3, None),
    ]
    assert await store.rank_above(BOARD, 3) == 2


async def test_overlay_restore_resyncs_board_entries_in_the_overlay(sqlite_store: Store) -> None:
    overlay = OverlayStore(sqlite_store)
    snap = Snapshot(entries=[(ALICE, 12, None)], ranks=[(BOARD, "alice", 1.0, "Alice")])
    await overlay.restore(snap, replace=True)
    assert await overlay.rank_top(BOARD, 5) == [("alice", 12, "Alice")]
    assert await sqlite_store.rank_top(BOARD, 5) == []


async def test_restore_of_an_empty_snapshot_with_replace_empties_the_store(store: Store) -> None:
    await fill(store)
    assert await store.restore(Snapshot(), replace=True) == 0
    assert await store.snapshot() == Snapshot()
    assert await store.keys("") == []


async def test_restore_refuses_a_too_large_value_naming_the_key_and_writes_nothing(
    store_url: str,
) -> None:
    small = open_store(store_url, max_value_bytes=1000)
    await small.open()
    try:
        await small.set("var/kept", 1)
        snap = Snapshot(
            entries=[("var/a", 1, None), ("var/huge", "x" * 2000, None)],
            ranks=[(BOARD, "alice", 1.0, None)],
        )
        with pytest.raises(ValueRefused, match=r"at key 'var/huge'.*limits\.max_value_bytes"):
            await small.restore(snap, replace=True)
        assert await small.keys("") == ["var/kept"]  # nothing deleted, nothing written
        assert await small.rank_top(BOARD, 5) == []
    finally:
        await small.close()


@pytest.mark.parametrize(
    ("snapshot", "match"),
    [
        (Snapshot(entries=[("var/a", {1, 2}, None)]), "at key 'var/a'"),
        (Snapshot(entries=[("var/a", 1, -1.0)]), "ttl must be a positive"),
        (Snapshot(entries=[("", 1, None)]), "non-empty strings"),
        (Snapshot(ranks=[(BOARD, "alice", "12", None)]), "'12' is not a number"),
        (Snapshot(ranks=[(BOARD, "alice", float("nan"), None)]), "is not a number"),
        (Snapshot(ranks=[(BOARD, "alice", 1.0, 7)]), "name 7 is not a string"),
    ],
)
async def test_restore_checks_every_entry_first(
    store: Store, snapshot: Snapshot, match: str
) -> None:
    await store.set("var/kept", 1)
    with pytest.raises(ValueRefused, match=match):
        await store.restore(snapshot, replace=True)
    assert await store.keys("") == ["var/kept"]


async def test_snapshot_during_concurrent_increments_holds_a_value_that_existed(
    store: Store,
) -> None:
    """Each key's value in a snapshot is one its writers produced: a counter being
    incremented reads at least the increments acknowledged before the snapshot began
    and at most those begun before it returned."""
    for i in range(600):  # make the snapshot take a while
        await store.set(f"filler/{i}", "x" * 100)
    started = acked = 0
    stop = asyncio.Event()

    def bump(value: Any) -> tuple[int, int]:
        new = (0 if value is MISSING else value) + 1
        return new, new

    async def incrementer() -> None:
        nonlocal started, acked
        while not stop.is_set():
            started += 1
            await store.update("var/global/counter", bump)
            acked += 1
            await asyncio.sleep(0)

    workers = [asyncio.create_task(incrementer()) for _ in range(4)]
    try:
        while acked < 50:
            await asyncio.sleep(0.001)
        for _ in range(3):
            before = acked
            snap = await store.snapshot()
            after = started
            counter = dict((k, v) for k, v, _ in snap.entries)["var/global/counter"]
            assert before <= counter <= after
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert await store.get("var/global/counter") == acked


# -- SQLite: one point in time ----------------------------------------------------------


async def test_sqlite_snapshot_is_one_point_in_time_while_another_connection_writes(
    tmp_path: Path,
) -> None:
    """Two keys always committed together by a second store on the same file (another
    connection, as another process is) are always equal in the snapshot."""
    path = tmp_path / "pit.db"
    reader, writer = SQLiteStore(path), SQLiteStore(path)
    await reader.open()
    await writer.open()
    try:
        await writer.restore(
            Snapshot(entries=[(f"filler/{i:05d}", "y" * 200, None) for i in range(20_000)]),
            replace=False,
        )
        stop = asyncio.Event()
        commits = 0

        async def write_pairs() -> None:
            nonlocal commits
            while not stop.is_set():
                commits += 1
                await writer.commit([("pair/a", commits, None), ("pair/z", commits, None)])
                await asyncio.sleep(0)

        task = asyncio.create_task(write_pairs())
        try:
            seen = set()
            for _ in range(5):
                snap = await reader.snapshot()
                values = dict((k, v) for k, v, _ in snap.entries)
                assert values.get("pair/a") == values.get("pair/z")
                seen.add(values.get("pair/a"))
        finally:
            stop.set()
            await task
        assert len(seen) > 1  # the writer kept committing while the snapshots were read
    finally:
        await reader.close()
        await writer.close()


# -- Redis: one point in time on a single Redis, per key on a cluster --------------------


@pytest.mark.redis
async def test_redis_snapshot_is_one_point_in_time_while_another_instance_commits(
    redis_store_url: str,
) -> None:
    """Two keys committed together (one ``commit``) thousands of times by a second store
    instance (its own connections, as another process) are equal in every snapshot. The
    two keys sort 20,000 keys apart, so a per-key read (the batched path) sees them differ."""
    reader, writer = await opened(redis_store_url), await opened(redis_store_url)
    try:
        await writer.restore(
            Snapshot(entries=[(f"m/filler/{i:05d}", "y" * 200, None) for i in range(20_000)]),
            replace=False,
        )
        stop = asyncio.Event()
        commits = 0

        async def write_pairs() -> None:
            nonlocal commits
            while not stop.is_set():
                commits += 1
                await writer.commit([("a/pair", commits, None), ("z/pair", commits, None)])

        tasks = [asyncio.create_task(write_pairs()) for _ in range(4)]
        try:
            seen = set()
            while commits < 3000 or len(seen) < 3:
                snap = await reader.snapshot()
                assert snap.point_in_time
                values = dict((k, v) for k, v, _ in snap.entries)
                assert values.get("a/pair") == values.get("z/pair")
                seen.add(values.get("a/pair"))
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        assert len(seen) >= 3  # the writers kept committing while the snapshots were read
    finally:
        await reader.close()
        await writer.close()


@pytest.mark.redis
@pytest.mark.parametrize("bound", ["keys", "bytes"])
async def test_redis_snapshot_over_the_bound_is_read_per_key_and_says_so(
    redis_store_url: str, bound: str
) -> None:
    store = await opened(redis_store_url)
    try:
        await fill(store)
        whole = await store.snapshot()
        assert whole.point_in_time
        if bound == "keys":
            store.point_in_time_max_keys = len(whole.entries) + len(whole.ranks) - 1  # type: ignore[attr-defined]
        else:
            store.point_in_time_max_bytes = 100  # type: ignore[attr-defined]
        batched = await store.snapshot()
        assert not batched.point_in_time
        assert_same(batched, whole)  # the same data, read the other way
        store.point_in_time_max_keys = len(whole.entries) + len(whole.ranks)  # type: ignore[attr-defined]
        store.point_in_time_max_bytes = 2**20  # type: ignore[attr-defined]
        assert (await store.snapshot()).point_in_time
    finally:
        await store.close()


@pytest.mark.redis
async def test_a_redis_snapshot_skips_other_prefixes_and_keys_that_only_look_like_values(
    redis_url: str, redis_namespace: str
) -> None:
    sep = "&" if "?" in redis_url else "?"
    store = await opened(f"{redis_url}{sep}prefix={redis_namespace}")
    other = await opened(f"{redis_url}{sep}prefix={redis_namespace}:other")
    try:
        await store.set("a", 1)
        await other.set("b", 2)
        await other.rank_sync("console/b", "u", "b")
        raw = redis.Redis.from_url(redis_url)
        raw.set(f"{redis_namespace}:{{a}}:lock", "t")  # a lease's key
        raw.set(f"{redis_namespace}:{{a}}:turn", "t")
        snap = await store.snapshot()
        assert snap.point_in_time
        assert [(k, v) for k, v, _ in snap.entries] == [("a", 1)]
        assert snap.ranks == []
        raw.close()
    finally:
        await store.close()
        await other.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_redis_cluster_snapshot_is_per_key(cluster_store_url: str) -> None:
    store = await opened(cluster_store_url)
    try:
        await fill(store)
        snap = await store.snapshot()
        assert not snap.point_in_time
        assert len(snap.entries) == len(VALUES) + 1
    finally:
        await store.close()


async def test_sqlite_memory_store_snapshots_and_restores(tmp_path: Path) -> None:
    store = SQLiteStore(":memory:")
    await store.open()
    try:
        await fill(store)
        snap = await store.snapshot()
        assert len(snap.entries) == len(VALUES) + 1
        await store.restore(Snapshot(), replace=True)
        assert await store.restore(snap, replace=True) == len(snap.entries)
        assert_same(await store.snapshot(), snap)
    finally:
        await store.close()


# -- across backends: the migration path ------------------------------------------------

PAIRS = [
    pytest.param("sqlite", "redis", marks=pytest.mark.redis, id="sqlite-to-redis"),
    pytest.param("redis", "sqlite", marks=pytest.mark.redis, id="redis-to-sqlite"),
    pytest.param(
        "sqlite", "cluster", marks=[pytest.mark.redis, pytest.mark.slow], id="sqlite-to-cluster"
    ),
    pytest.param(
        "cluster", "sqlite", marks=[pytest.mark.redis, pytest.mark.slow], id="cluster-to-sqlite"
    ),
]


@pytest.mark.parametrize(("source", "target"), PAIRS)
async def test_round_trip_between_backends_is_equal(
    request: pytest.FixtureRequest, source: str, target: str
) -> None:
    src = await opened(request.getfixturevalue(f"{source}_store_url"))
    dst = await opened(request.getfixturevalue(f"{target}_store_url"))
    try:
        await fill(src)
        await dst.set("var/stale", "replaced away")
        snap = await src.snapshot()
        assert await dst.restore(snap, replace=True) == len(VALUES) + 1
        moved = await dst.snapshot()
        assert_same(moved, snap)
        for key, value in VALUES.items():
            assert await dst.get(key) == value
        assert await dst.keys("") == await src.keys("")
        assert await dst.rank_top(BOARD, 10) == await src.rank_top(BOARD, 10)
        assert await dst.rank_top(BOARD, 10) == [("alice", 12, "Alice"), ("bob", 7.5, "Bob")]
        assert await dst.rank_of(BOARD, "bob") == 2
        # and back again: the same snapshot
        await src.restore(Snapshot(), replace=True)
        await src.restore(moved, replace=True)
        assert_same(await src.snapshot(), snap)
    finally:
        await src.close()
        await dst.close()


# -- passthrough and dry run -------------------------------------------------------------


async def test_metered_store_passes_snapshot_and_restore_through(sqlite_store: Store) -> None:
    store = metered(sqlite_store)
    await fill(store)
    snap = await store.snapshot()
    assert_same(snap, await sqlite_store.snapshot())
    assert await store.restore(snap, replace=True) == len(snap.entries)


async def test_overlay_snapshot_lays_its_writes_over_the_real_one_and_restore_stays_in_it(
    sqlite_store: Store,
) -> None:
    await fill(sqlite_store)
    real_before = await sqlite_store.snapshot()
    overlay = OverlayStore(sqlite_store)
    await overlay.set("var/new", 1)
    await overlay.delete("var/global/null")
    await overlay.set("var/user/console/bob/visits", 20)
    await overlay.rank_sync(BOARD, "bob", "var/user/console/bob/visits")
    snap = await overlay.snapshot()
    values = dict((k, v) for k, v, _ in snap.entries)
    assert values["var/new"] == 1 and "var/global/null" not in values
    assert snap.ranks == [(BOARD, "alice", 12.0, "Alice"), (BOARD, "bob", 20.0, "Bob")]

    dry = OverlayStore(sqlite_store)  # restore --dry-run: into an overlay
    assert await dry.restore(Snapshot(entries=[("var/only", 1, None)]), replace=True) == 1
    assert await dry.keys("") == ["var/only"]
    assert await dry.get("var/global/jokes") is MISSING
    assert await dry.rank_top(BOARD, 5) == []
    assert await dry.snapshot() == Snapshot(entries=[("var/only", 1, None)])
    assert_same(await sqlite_store.snapshot(), real_before)  # nothing reached the real store


# -- the format marker -------------------------------------------------------------------


async def test_open_writes_the_format_marker_and_keys_do_not_list_it(store: Store) -> None:
    assert await store.get(FORMAT_KEY) == {"format": STORE_FORMAT}
    assert await store.keys("") == []
    assert await store.keys("tmy/") == []


async def test_a_sqlite_store_written_by_a_newer_tmy_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    store = SQLiteStore(path)
    await store.open()
    await store.set("var/a", 1)
    await store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE kv SET value = ? WHERE key = ?", ('{"format": 2}', FORMAT_KEY))
    again = SQLiteStore(path)
    with pytest.raises(StoreError) as refused:
        await again.open()
    assert str(refused.value).endswith(
        "this store was written by a newer tmy (store format 2; this tmy reads format 1): "
        "upgrade tmy"
    )
    with pytest.raises(StoreError, match="not open"):
        await again.get("var/a")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE kv SET value = ? WHERE key = ?", ('"junk"', FORMAT_KEY))
    with pytest.raises(StoreError, match="format marker at 'tmy/format' is unreadable"):
        await again.open()


@pytest.mark.redis
async def test_a_redis_store_written_by_a_newer_tmy_is_refused(
    redis_url: str, redis_store_url: str, redis_namespace: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(f"{redis_namespace}:{{{FORMAT_KEY}}}", b'{"format":3}')
    finally:
        client.close()
    store = open_store(redis_store_url)
    with pytest.raises(StoreError) as refused:
        await store.open()
    assert "this store was written by a newer tmy (store format 3; this tmy reads format 1)" in (
        str(refused.value)
    )
    with pytest.raises(StoreError, match="not open"):
        await store.get("var/a")


@pytest.mark.slow
@pytest.mark.redis
async def test_redis_snapshot_after_the_scripts_were_flushed_loads_them_again(
    redis_server: Any,
) -> None:
    """A Redis restarted (or SCRIPT FLUSHed) mid-life answers NOSCRIPT, which means
    nothing ran: the snapshot loads its scripts again and reads on."""
    server = redis_server()
    store = await opened(f"{server.url}?prefix=flushed")
    try:
        await fill(store)
        want = await store.snapshot()
        server.client().script_flush()
        assert_same(await store.snapshot(), want)
        server.client().script_flush()
        assert await store.rank_top(BOARD, 1) == [("alice", 12, "Alice")]
        server.client().script_flush()  # restore's re-sync scripts in a pipeline load too
        await store.restore(want, replace=True)
        assert_same(await store.snapshot(), want)
    finally:
        await store.close()
