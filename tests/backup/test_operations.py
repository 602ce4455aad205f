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

from tmy.backup.fileformat import header_for, printable, write_file
from tmy.backup.operations import apply, known_key, plan, take_backup
from tmy.backup.reader import read_file
from tmy.command import CommandError
from tmy.cron.occurrence import OUTBOX_INDEX, OUTBOX_PREFIX
from tmy.engine.keys import conversation_key
from tmy.llm.history import KIND, LAST
from tmy.memory.entries import ENTRY_PREFIXES, GLOBAL_KEY
from tmy.message import Message
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


def _file(tmp_path: Path, entries: list[Any], **header: Any) -> Path:
    path = tmp_path / "h.jsonl"
    head = header_for("sqlite:///a.db", len(entries), 0, datetime.now(UTC))
    head.update(header)
    write_file(path, head, entries, [], compress=False)
    return path


def test_header_fields_are_described_with_control_characters_escaped(tmp_path: Path) -> None:
    """A hand-made header cannot clear the terminal or fake a line of the dry run."""
    path = _file(
        tmp_path,
        [("var/global/a", 1, None)],
        store="sqlite:///x.db\x1b[2J\nfake line: 0 keys",
        tmy="0.1.0\r\x07\u202eevil",
    )
    todo = plan(read_file(path), max_value_bytes=1 << 20, name=str(path))
    text = "\n".join(todo.describe("t", "merge"))
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "\u202e" not in text and text.count("\n") == 2  # the three lines it should have
    assert "(backup of sqlite:///x.db\\x1b[2J\\nfake line: 0 keys taken " in text
    assert "by tmy 0.1.0\\r\\x07\\u202eevil)" in text
    assert todo.as_json("t", "merge", dry_run=True)["header"]["tmy"] == "0.1.0\r\x07\u202eevil"


def test_printable_keeps_text_and_escapes_only_controls() -> None:
    assert printable("redis://***@db:6379/0 安 ✓") == "redis://***@db:6379/0 安 ✓"
    assert printable("a\tb\x00c\x7f\u2028") == "a\\tb\\x00c\\x7f\\u2028"
    assert printable(None) == "None" and printable(3) == "3"


def test_the_store_format_marker_is_skipped_and_said_so(tmp_path: Path) -> None:
    path = _file(tmp_path, [("tmy/format", {"format": 1}, None), ("var/global/a", 1, None)])
    todo = plan(read_file(path), max_value_bytes=1 << 20, name=str(path))
    assert [key for key, _, _ in todo.entries] == ["var/global/a"]
    lines = todo.describe("t", "merge")
    assert lines[0].startswith("1 key and 0 board entries (backup of ")
    assert "  skipped tmy/format: the store format marker: the target keeps its own" in lines
    assert "  tmy: 1" not in lines
    data = todo.as_json("t", "merge", dry_run=True)
    assert data["entries"] == 1 and data["skipped"] == ["tmy/format"]
    assert data["groups"] == {"var/global": 1} and data["warnings"] == []


def test_keys_outside_tmys_families_are_restored_with_a_warning(tmp_path: Path) -> None:
    entries = [
        ("hack/a", 1, None),
        ("hack/b", 2, None),
        ("var/global/a", 1, None),
        ("variables/x", 3, None),
    ]
    path = _file(tmp_path, entries)
    todo = plan(read_file(path), max_value_bytes=1 << 20, name=str(path))
    assert len(todo.entries) == 4  # warned, not refused
    assert list(todo.warnings) == [
        f"2 keys outside tmy's known key families ('hack', first 'hack/a' at {path}:2): "
        "restored as they are; a hand-edited file or an extension's own keys?",
        f"1 key outside tmy's known key families ('variables', first 'variables/x' at "
        f"{path}:5): restored as they are; a hand-edited file or an extension's own keys?",
    ]
    assert f"  warning: {todo.warnings[0]}" in todo.describe("t", "merge")
    assert todo.as_json("t", "merge", dry_run=True)["warnings"] == list(todo.warnings)


async def test_everything_tmy_keeps_is_in_a_known_family(tmp_path: Path) -> None:
    """The keys the tests' fill writes (one of every kind) and each conversation kind and
    tmy-owned key builder give no warning."""
    path = tmp_path / "b.jsonl"
    async with opened(f"sqlite:///{tmp_path / 'a.db'}") as source:
        await fill(source)
        await take_backup(source, path, compress=False)
    assert plan(read_file(path), max_value_bytes=1 << 20).warnings == ()
    message = Message(text="x", user="u", chat="c", platform="p")
    kinds = [conversation_key(kind, message) for kind in (KIND, LAST, "summary", "session")]
    built = [*kinds, OUTBOX_INDEX, OUTBOX_PREFIX + "x", GLOBAL_KEY, *ENTRY_PREFIXES]
    assert [key for key in built if not known_key(key)] == []
