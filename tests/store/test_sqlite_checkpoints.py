"""The SQLite store's checkpoint thread (tmy/store/sqlite/checkpoints.py): it ends
on close, none for an in-memory store, two stores on one file, reopen, durability settings
unchanged, and a snapshot/restore while checkpoints run."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tmy.store.sqlite import SQLiteStore


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sqlite-checkpoint")]


async def test_the_thread_ends_on_close_and_reopen_starts_one(tmp_path: Path) -> None:
    before = len(checkpoint_threads())
    store = SQLiteStore(tmp_path / "a.db")
    for _ in range(3):
        await store.open()
        await store.open()  # idempotent: still one thread
        assert len(checkpoint_threads()) == before + 1
        await store.set("k", 1)
        await store.close()
        await store.close()
        assert len(checkpoint_threads()) == before
    assert not (tmp_path / "a.db-wal").exists() or (tmp_path / "a.db-wal").stat().st_size == 0


async def test_an_in_memory_store_has_no_thread() -> None:
    before = len(checkpoint_threads())
    store = SQLiteStore(":memory:")
    await store.open()
    try:
        assert len(checkpoint_threads()) == before
        await store.set("k", 1)
        assert await store.get("k") == 1
    finally:
        await store.close()


async def test_synchronous_normal_and_wal_unchanged(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "d.db")
    await store.open()
    try:
        db = store._conn()
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL, as before the thread
    finally:
        await store.close()


async def test_sqlites_own_checkpoints_are_off_only_while_the_thread_runs(
    tmp_path: Path,
) -> None:
    """With the thread's connection open, the store's turns SQLite's checkpoints off (the
    thread checkpoints); an in-memory store keeps SQLite's own setting."""
    store = SQLiteStore(tmp_path / "d.db")
    await store.open()
    try:
        assert store._checkpoints is not None
        assert store._conn().execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    finally:
        await store.close()
    memory = SQLiteStore(":memory:")
    await memory.open()
    try:
        assert memory._checkpoints is None
        assert memory._conn().execute("PRAGMA wal_autocheckpoint").fetchone() == (1000,)
    finally:
        await memory.close()


async def test_two_stores_on_one_file_under_writes_and_snapshots(tmp_path: Path) -> None:
    """Checkpoints of two stores' threads while both write, snapshot and restore: every
    write there, the WAL stays bounded, the file passes an integrity check."""
    path = tmp_path / "two.db"
    a, b = SQLiteStore(path), SQLiteStore(path)
    await a.open()
    await b.open()
    try:
        for round_ in range(30):
            await asyncio.gather(
                *(a.set(f"a{i}", "x" * 2000) for i in range(40)),
                *(b.set(f"b{i}", round_) for i in range(40)),
            )
            if round_ % 10 == 5:
                snap = await a.snapshot()
                await b.restore(snap, replace=True)
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # a checkpoint after the last writes
        assert a._checkpoints is not None and a._checkpoints.checkpoints > 0
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size < 64 * 1024 * 1024
        assert await b.get_many([f"b{i}" for i in range(40)]) == [29] * 40
    finally:
        await a.close()
        await b.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()


@pytest.mark.slow
def test_writes_survive_a_killed_process(tmp_path: Path) -> None:
    """A process killed (SIGKILL) right after its writes returned: they are in the file."""
    path = tmp_path / "k.db"
    code = f"""
import asyncio, os, signal
from tmy.store.sqlite import SQLiteStore
async def main():
    store = SQLiteStore({str(path)!r})
    await store.open()
    for i in range(3000):
        await store.set(f"k{{i}}", i)
    print("written", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "written" in run.stdout, run.stderr

    async def check() -> None:
        store = SQLiteStore(path)
        await store.open()
        try:
            assert await store.get_many([f"k{i}" for i in range(3000)]) == list(range(3000))
        finally:
            await store.close()

    asyncio.run(check())
