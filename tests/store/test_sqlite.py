"""The SQLite store (tmy/store/sqlite): its URL, lock rows left by dead processes, writes
retried after SQLITE_BUSY applied once."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import reap, spawn_holder
from tmy.errors import ConfigError
from tmy.store import MISSING, open_store
from tmy.store.sqlite import SQLiteStore

# -- from test_audit_issue2.py (issue 2 audit: each failed before its fix)


def test_the_sqlite_url_help_says_where_relative_paths_go(tmp_path: Path) -> None:
    relative = open_store("sqlite:///rel.db")
    assert relative.path == Path.cwd() / "rel.db"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as refused:
        open_store("sqlite://x.db")
    assert "config directory" not in str(refused.value)


# -- from test_store_hardening.py (store hardening: retried writes apply once, dead holders' locks
#    free)


def increment(value: Any) -> tuple[int, int]:
    new = (0 if value is MISSING else value) + 1
    return new, new


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


# -- claim_many: claims gathered by their caller, one statement per batch


def test_claim_statements_come_in_few_sizes() -> None:
    from tmy.store.sqlite.connection import CLAIM_ROWS, claim_rows

    sizes = {claim_rows(n) for n in range(1, CLAIM_ROWS + 1)}
    assert len(sizes) < 32  # all stay in the connection's statement cache
    assert all(claim_rows(n) >= n for n in range(1, CLAIM_ROWS + 1))
    assert claim_rows(CLAIM_ROWS) == CLAIM_ROWS


async def test_claim_many_answers_as_claims_one_by_one(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "claims.db")
    other = SQLiteStore(tmp_path / "claims.db")  # another daemon on the same file
    await store.open()
    await other.open()
    try:
        await store.set("c/kept", 1)  # a value that never expires is never claimed
        assert await store.claim("c/old", 0.05) is True
        await asyncio.sleep(0.1)  # expired: taken again
        for n in (1, 9, 13, 150):  # padded statements, and two statements for 150
            keys = [f"c/{n}/{i % (n - n // 4)}" for i in range(n)] + ["c/kept", "c/old"]
            answers = await store.claim_many(keys, 60)
            firsts = [keys.index(k) == i for i, k in enumerate(keys)]
            assert answers == [*firsts[:-2], False, n == 1], n
            assert await other.claim_many(keys, 60) == [False] * len(keys)
            assert await other.claim(keys[0], 60) is False
            assert await store.get(keys[0]) is not MISSING  # an ordinary key while it lasts
        assert await store.claim_many([], 60) == []
        assert await store.get("c/kept") == 1
    finally:
        await store.close()
        await other.close()


# -- WAL checkpoints on a thread of their own (tmy.store.sqlite.checkpoints)


async def test_wal_checkpoints_run_off_the_event_loop_and_end_with_the_store(
    tmp_path: Path,
) -> None:
    import threading

    store = SQLiteStore(tmp_path / "wal.db")
    await store.open()
    try:
        db = store._conn()
        assert db.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)  # not in a commit
        checkpoints = store._checkpoints
        assert checkpoints is not None
        for i in range(300):  # enough pages for SQLite's own threshold, were it on
            await store.set(f"k/{i}", "x" * 2000)
        deadline = time.monotonic() + 5
        while checkpoints.checkpoints == 0:
            assert time.monotonic() < deadline, "no background checkpoint"
            await asyncio.sleep(0.05)
        assert await store.claim_many(["dedup/w/1"], 60) == [True]
    finally:
        await store.close()
    names = [t.name for t in threading.enumerate()]
    assert not any(name.startswith("sqlite-checkpoint") for name in names)
    assert not (tmp_path / "wal.db-wal").exists()  # the last close folded the WAL in
    reopened = SQLiteStore(tmp_path / "wal.db")
    await reopened.open()
    try:
        assert await reopened.get("k/299") == "x" * 2000
    finally:
        await reopened.close()


async def test_an_in_memory_store_has_no_checkpoint_thread() -> None:
    store = SQLiteStore(":memory:")
    await store.open()
    try:
        assert store._checkpoints is None
        await store.set("k", 1)
    finally:
        await store.close()


# -- updates asked in one pass of the event loop: one transaction (tmy.store.passes)


def _transactions(store: SQLiteStore) -> list[str]:
    """The BEGIN IMMEDIATEs the store's connection runs from now on."""
    seen: list[str] = []
    store._conn().set_trace_callback(
        lambda sql: seen.append(sql) if sql.startswith("BEGIN IMMEDIATE") else None
    )
    return seen


async def test_updates_of_one_pass_share_a_transaction_each_seeing_the_last(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "updates.db")
    other = SQLiteStore(tmp_path / "updates.db")  # another daemon on the same file
    await store.open()
    await other.open()
    try:
        await store.set("hist/a", ["old"], ttl=600)
        begun = _transactions(store)
        results = await asyncio.gather(
            *(store.update("n", increment) for _ in range(20)),
            *(store.update(f"k{i}", lambda v, i=i: ([v is MISSING, i], i)) for i in range(30)),
            store.update("hist/a", lambda v: ([*v, "new"], len(v))),
        )
        assert len(begun) == 1  # fifty-one updates, one write transaction
        assert results[:20] == list(range(1, 21))  # in the order asked, each on the last
        assert results[20:50] == list(range(30)) and results[50] == 1
        assert await other.get("n") == 20
        assert await other.get_many(["k0", "k29"]) == [[True, 0], [True, 29]]
        assert await other.get("hist/a") == ["old", "new"]
        row = store._conn().execute("SELECT expires FROM kv WHERE key = 'hist/a'").fetchone()
        assert row[0] is not None  # the value's expiry kept (no ttl given)
        lone = await store.update("n", increment)  # a lone update: a transaction of its own
        assert lone == 21 and len(begun) == 2
    finally:
        await store.close()
        await other.close()


async def test_an_update_that_fails_fails_alone(tmp_path: Path) -> None:
    """Its function raising or its value too big: its caller gets the error, nothing of
    it is written, and the other updates of its pass land. A function may answer an
    exception object: that is its answer, not an error."""
    store = SQLiteStore(tmp_path / "fails.db", max_value_bytes=1000)
    await store.open()
    try:
        await store.set("bad", 1)

        def boom(value: Any) -> tuple[Any, Any]:
            raise ValueError("no")

        begun = _transactions(store)
        results = await asyncio.gather(
            store.update("a", increment),
            store.update("bad", boom),
            store.update("big", lambda v: ("x" * 2000, None)),
            store.update("odd", lambda v: (1, KeyError("an answer"))),
            store.update("a", increment),
            return_exceptions=True,
        )
        assert len(begun) == 1
        assert results[0] == 1 and results[4] == 2
        assert type(results[1]) is ValueError and str(results[1]) == "no"
        assert "too large" in str(results[2]) or "bytes" in str(results[2])
        assert type(results[3]) is KeyError and await store.get("odd") == 1
        assert await store.get_many(["a", "bad", "big"]) == [2, 1, MISSING]
    finally:
        await store.close()


async def test_an_update_whose_caller_is_cancelled_before_its_pass_is_not_applied(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "cancel.db")
    await store.open()
    try:
        kept = asyncio.ensure_future(store.update("n", increment))
        gone = asyncio.ensure_future(store.update("m", increment))
        await asyncio.sleep(0)  # both asked, their pass not come yet
        gone.cancel()
        assert await kept == 1
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert await store.get_many(["n", "m"]) == [1, MISSING]
    finally:
        await store.close()


async def test_an_update_whose_function_raises_any_exception_answers_its_pass(
    tmp_path: Path,
) -> None:
    """StopIteration (a Future refuses it: the caller gets RuntimeError, as a coroutine
    raising it would) and CancelledError reach their own caller only; every other update of
    the pass is answered and applied."""
    store = SQLiteStore(tmp_path / "raises.db")
    await store.open()
    try:

        def stop(value: Any) -> tuple[Any, Any]:
            return next(iter(())), None

        def cancel(value: Any) -> tuple[Any, Any]:
            raise asyncio.CancelledError

        tasks = [
            asyncio.ensure_future(store.update("a", increment)),
            asyncio.ensure_future(store.update("s", stop)),
            asyncio.ensure_future(store.update("c", cancel)),
            asyncio.ensure_future(store.update("a", increment)),
        ]
        _, pending = await asyncio.wait(tasks, timeout=5)
        assert not pending
        assert tasks[0].result() == 1 and tasks[3].result() == 2
        with pytest.raises(RuntimeError, match="StopIteration"):
            tasks[1].result()
        assert tasks[2].cancelled()
        assert await store.get_many(["a", "s", "c"]) == [2, MISSING, MISSING]
    finally:
        await store.close()


async def test_an_update_function_runs_in_its_callers_context(tmp_path: Path) -> None:
    """Gathered into one pass, each function still sees its own caller's context vars (a
    pure step's template reads the run's trace id and its seeded randomness there)."""
    import contextvars

    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="none")
    store = SQLiteStore(tmp_path / "context.db")
    await store.open()
    try:

        async def one(name: str) -> str:
            seen.set(name)
            return await store.update(f"k/{name}", lambda v: (1, seen.get()))

        assert await asyncio.gather(one("ann"), one("bob"), one("cy")) == ["ann", "bob", "cy"]
    finally:
        await store.close()
