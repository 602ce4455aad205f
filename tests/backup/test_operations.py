"""Backup and restore between real stores (tmy.backup.operations): SQLite and Redis both ways,
TTLs counted from the backup, values checked against the target before anything is written,
and the three modes (empty store only, merge, replace)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tmy.backup.fileformat import header_for, read_file, write_file
from tmy.backup.operations import apply, plan, take_backup
from tmy.command import CommandError
from tmy.store import Store, open_store
from tmy.store.base import MISSING, Snapshot


@contextlib.asynccontextmanager
async def opened(url: str, **kw: Any) -> AsyncIterator[Store]:
    store = open_store(url, **kw)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def fill(store: Store) -> None:
    """A little of everything tmy keeps: variables of each scope, a memory entry with its
    vector, an LLM history, a session with a TTL, a cron history, a leaderboard."""
    await store.set("var/global/jokes", ["A", "B", "C"])
    await store.set("var/chat/console/room/topic", "tea ☕")
    await store.set("var/user/console/ann/points", 12)
    await store.set("var/user/console/bob/points", 7)
    await store.rank_sync("console/points", "ann", "var/user/console/ann/points", "Ann")
    await store.rank_sync("console/points", "bob", "var/user/console/bob/points", "Bob")
    entry = {"id": "m1", "text": "my cat is called Mimi", "owner": "ann", "on": True}
    await store.set("mem/user/console/ann/m1", entry)
    await store.set("mem/vec/m1", [0.125, -0.5, 1e-7, 3.0])
    await store.set("llmhist/console/room/ann", [["hi", "hello!"], ["how are you", "fine"]])
    await store.set("session/console/room/ann", "memory-chat", ttl=600)
    await store.set("cron/hist/tick", [{"fire_time": "2026-11-25T04:00:00+00:00", "ok": 1}])
    await store.update("llm/usage/2026-11-25", lambda v: ({"tokens": 1234}, None))


def values(snapshot: Any) -> dict[str, Any]:
    return {key: value for key, value, _ in snapshot.entries}


BOTH_WAYS = [
    pytest.param(
        "sqlite_store_url", "redis_store_url", id="sqlite-to-redis", marks=pytest.mark.redis
    ),
    pytest.param(
        "redis_store_url", "sqlite_store_url", id="redis-to-sqlite", marks=pytest.mark.redis
    ),
    pytest.param("sqlite_store_url", "other_sqlite_url", id="sqlite-to-sqlite"),
    # the session's Redis Cluster (private redis-server processes: slow)
    pytest.param(
        "sqlite_store_url", "cluster_store_url", id="sqlite-to-cluster", marks=pytest.mark.slow
    ),
]


@pytest.fixture
def other_sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'other.db'}"


@pytest.mark.parametrize(("source_fixture", "target_fixture"), BOTH_WAYS)
async def test_everything_comes_back_equal_in_the_other_store(
    request: pytest.FixtureRequest, tmp_path: Path, source_fixture: str, target_fixture: str
) -> None:
    source_url = request.getfixturevalue(source_fixture)
    target_url = request.getfixturevalue(target_fixture)
    path = tmp_path / "b.jsonl.gz"
    async with opened(source_url) as source:
        await fill(source)
        written = await take_backup(source, path, compress=True)
        before = await source.snapshot()
    assert (written.entries, written.ranks) == (len(before.entries), 2)
    loaded = read_file(path)
    assert loaded.header["store"] == written.store
    async with opened(target_url) as target:
        count = await apply(target, plan(loaded, max_value_bytes=target.max_value_bytes), None)
        after = await target.snapshot()
        assert await target.rank_top("console/points", 10) == [
            ("ann", 12, "Ann"),
            ("bob", 7, "Bob"),
        ]
        assert await target.rank_of("console/points", "bob") == 2
    assert count == len(before.entries)
    assert values(after) == values(before)
    assert after.ranks == before.ranks
    ttls = {key: ttl for key, _, ttl in after.entries}
    assert ttls["var/global/jokes"] is None
    assert 0 < ttls["session/console/room/ann"] <= 600


async def test_ttls_count_from_the_backup_and_expired_keys_stay_behind(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    async with opened(f"sqlite:///{tmp_path / 'a.db'}") as source:
        await source.set("session/short", 1, ttl=60)
        await source.set("session/long", 2, ttl=600)
        await source.set("var/global/x", 3)
        await take_backup(source, path, compress=False)
    loaded = read_file(path)
    later = plan(loaded, max_value_bytes=1 << 20, now=loaded.created + timedelta(seconds=100))
    assert later.expired == 1
    kept = {key: ttl for key, _, ttl in later.entries}
    assert set(kept) == {"session/long", "var/global/x"}
    assert kept["var/global/x"] is None
    assert 490 < kept["session/long"] <= 500
    assert "  1 key expired since the backup: not restored" in later.describe("t", "merge")


async def test_a_value_too_large_for_the_target_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    entries = [("var/global/a", 1, None), ("var/global/big", "x" * 5000, None)]
    head = header_for("sqlite:///a.db", 2, 0, datetime.now(UTC))
    write_file(path, head, entries, [], compress=False)
    with pytest.raises(CommandError) as caught:
        plan(read_file(path), max_value_bytes=1000, name=str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}:3: cannot store the value at key 'var/global/big'")
    assert "limits.max_value_bytes is 1,000" in message
    assert message.endswith("nothing was written")


async def _backup_of(tmp_path: Path, **data: Any) -> Any:
    path = tmp_path / f"b{len(list(tmp_path.iterdir()))}.jsonl"
    async with opened(f"sqlite:///{tmp_path / 'source.db'}") as source:
        await source.restore(Snapshot(), replace=True)
        for key, value in data.items():
            await source.set(key.replace("__", "/"), value)
        await source.rank_sync("console/points", "ann", "var/user/console/ann/points")
        await take_backup(source, path, compress=False)
    return plan(read_file(path), max_value_bytes=1 << 20)


async def test_without_a_mode_only_an_empty_store_is_restored_into(
    store: Store, tmp_path: Path
) -> None:
    todo = await _backup_of(tmp_path, var__global__a=1)
    await store.set("var/global/mine", "keep me")
    with pytest.raises(CommandError) as caught:
        await apply(store, todo, None)
    assert "is not empty (1 key and 0 board entries)" in str(caught.value)
    assert "--merge" in str(caught.value) and "--replace" in str(caught.value)
    assert values(await store.snapshot()) == {"var/global/mine": "keep me"}


async def test_merge_overwrites_the_backups_keys_and_keeps_the_others(
    store: Store, tmp_path: Path
) -> None:
    todo = await _backup_of(tmp_path, var__global__a=1, var__user__console__ann__points=5)
    await store.set("var/global/a", 99)
    await store.set("var/global/mine", "keep me")
    await store.set("var/user/console/bob/points", 8)
    await store.rank_sync("console/points", "bob", "var/user/console/bob/points")
    assert await apply(store, todo, "merge") == 2
    assert values(await store.snapshot()) == {
        "var/global/a": 1,
        "var/global/mine": "keep me",
        "var/user/console/ann/points": 5,
        "var/user/console/bob/points": 8,
    }
    assert await store.rank_top("console/points", 5) == [("bob", 8, None), ("ann", 5, None)]


async def test_replace_deletes_everything_first_but_the_locks(store: Store, tmp_path: Path) -> None:
    todo = await _backup_of(tmp_path, var__global__a=1, var__user__console__ann__points=5)
    await store.set("var/global/mine", "gone")
    await store.set("var/user/console/bob/points", 8)
    await store.rank_sync("console/points", "bob", "var/user/console/bob/points")
    async with store.lock("job", wait=1) as lease:
        assert await apply(store, todo, "replace") == 2
        await store.commit([("var/global/after", 1, None)], fence=[lease])  # the lease held
    assert values(await store.snapshot()) == {
        "var/global/a": 1,
        "var/global/after": 1,
        "var/user/console/ann/points": 5,
    }
    assert await store.rank_top("console/points", 5) == [("ann", 5, None)]
    assert await store.get("var/global/mine") is MISSING
