"""The SQLite store's connection: busy-wait retries, transactions, lazy purge, open and close.

See :mod:`tmy.store.sqlite` for why calls run synchronously on the event loop
and why a retry after SQLITE_BUSY is never a second application of a write.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tmy.errors import StoreError
from tmy.store.base import FORMAT_KEY, STORE_FORMAT, check_format
from tmy.store.claims import ClaimBatcher
from tmy.store.codec import MAX_VALUE_BYTES, check_ttl, decode, encode
from tmy.store.leases import LEASE_TTL, KeyedLocks, holder_is_gone
from tmy.store.passes import PassBatcher
from tmy.store.sqlite import postings, rank_counts
from tmy.store.sqlite.checkpoints import Checkpointer

T = TypeVar("T")

log = logging.getLogger("tmy.store.sqlite")  # the name it had as one module

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL);
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires) WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, token TEXT NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS ranks (
  board TEXT NOT NULL, member TEXT NOT NULL, score REAL NOT NULL, name TEXT,
  PRIMARY KEY (board, member)
);
CREATE INDEX IF NOT EXISTS ranks_score ON ranks (board, score, member);
"""
SCHEMA += rank_counts.SCHEMA
SCHEMA += postings.SCHEMA  # the lexical index (tmy.store.textindex)
UPSERT = (
    "INSERT INTO kv (key, value, expires) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires"
)
# a claim takes an absent or expired key; a live one (or one that never expires) is left alone
CLAIM = (
    "INSERT INTO kv (key, value, expires) VALUES (?, 'true', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires "
    "WHERE kv.expires IS NOT NULL AND kv.expires <= ? RETURNING 1"
)
CLAIM_ROWS = 96  # keys per multi-row claim statement (2 parameters each)
CLAIM_STEP = 8  # past this many keys, a statement's rows are a multiple of it


def claim_rows(keys: int) -> int:
    """The rows of the statement that claims ``keys`` keys (at most CLAIM_ROWS): the count
    itself up to CLAIM_STEP, else rounded up to a multiple of it, the rest rows repeating
    the last key (a key listed again is taken by its first listing only).

    Why: each row count is a statement of its own to SQLite; preparing one costs 40–100 µs,
    more than claiming its keys, and batches come in every size. Nineteen sizes stay in the
    connection's statement cache (128 statements) beside everything else the store runs;
    a hundred did not: a daemon's claims were prepared again batch after batch."""
    if keys <= CLAIM_STEP:
        return keys
    return min(CLAIM_ROWS, -(-keys // CLAIM_STEP) * CLAIM_STEP)


@functools.lru_cache(maxsize=CLAIM_ROWS)
def claim_sql(rows: int) -> str:
    """CLAIM for ``rows`` keys in one statement, naming the keys it took."""
    values = ", ".join(["(?, 'true', ?)"] * rows)
    return (
        f"INSERT INTO kv (key, value, expires) VALUES {values} "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires "
        "WHERE kv.expires IS NOT NULL AND kv.expires <= ? RETURNING key"
    )


TAKE_LEASE = (
    "INSERT INTO locks (key, token, expires) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires = excluded.expires "
    "WHERE locks.expires <= ? OR locks.token = excluded.token"
)
# an expired lease is lost, as on Redis, even if nobody has taken it yet
RENEW_LEASE = "UPDATE locks SET expires = ? WHERE key = ? AND token = ? AND expires > ?"
GIVE_LEASE = "DELETE FROM locks WHERE key = ? AND token = ?"
_PURGE_EVERY = 60.0  # seconds between lazy purges of expired rows
CHUNK = 500  # keys per SELECT ... IN (...) in get_many


class FnFailed(Exception):
    """Carries an exception raised by an ``update`` function past the retry loop."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def is_live(row: tuple[Any, ...] | None, now: float) -> bool:
    return row is not None and (row[-1] is None or row[-1] > now)


class SQLiteConnection:
    """One SQLite file's connection under :class:`~tmy.store.sqlite.SQLiteStore`."""

    one_slot_commits = False  # one transaction commits any keys

    def __init__(
        self,
        path: str | Path,
        *,
        lock_timeout: float = 10.0,
        busy_timeout_ms: int = 20,
        lease_ttl: float = LEASE_TTL,
        max_value_bytes: int = MAX_VALUE_BYTES,
    ) -> None:
        """``lock_timeout``: how long to wait for another process's write lock;
        ``lease_ttl``: the default length of ``lock``'s leases (URL ``?lease_ttl=``);
        ``max_value_bytes``: the largest encoded value it takes (``limits.max_value_bytes``)."""
        self.path: str | Path = path if str(path) == ":memory:" else Path(path)
        self.max_value_bytes = max_value_bytes
        self.lease_ttl = check_ttl(lease_ttl, "lease_ttl")
        self.url = f"sqlite:///{self.path}"
        if lease_ttl != LEASE_TTL:
            self.url += f"?lease_ttl={lease_ttl:g}"
        self.lock_timeout = lock_timeout
        self.busy_timeout_ms = busy_timeout_ms
        self._db: sqlite3.Connection | None = None
        # the WAL's checkpoints, off the event loop (a file in WAL mode only, from open())
        self._checkpoints: Checkpointer | None = None
        self._leases = KeyedLocks()
        self._claims = ClaimBatcher(self._claim_batch, self._claim_now)  # type: ignore[attr-defined]
        self._updates: PassBatcher[Any, Any] = PassBatcher(
            self._update_batch,  # type: ignore[attr-defined]
            self._updates_now,  # type: ignore[attr-defined]
        )
        self._next_purge = 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    # -- plumbing ---------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"sqlite {self.path}: the store is not open (await store.open())")
        return self._db

    async def _run(self, op: Callable[[sqlite3.Connection], T], what: str) -> T:
        """Run ``op`` now; while another process holds the lock, retry with async sleeps."""
        deadline: float | None = None
        delay = 0.001
        while True:
            db = self._conn()
            try:
                result = op(db)
                if self._checkpoints is not None:
                    self._checkpoints.wrote()
                return result
            except FnFailed as failed:
                fn_error = failed.exc  # raised below, outside this handler: left untouched
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise StoreError(f"sqlite {self.path}: {what} failed: {exc}") from exc
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.lock_timeout
                elif now >= deadline:
                    raise StoreError(
                        f"sqlite {self.path}: {what} gave up after {self.lock_timeout:g}s: "
                        "the database stayed locked by another connection or process"
                    ) from exc
                await asyncio.sleep(min(delay, max(deadline - now, 0.0)))
                delay = min(delay * 2, 0.05)
                continue
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite {self.path}: {what} failed: {exc}") from exc
            raise fn_error

    def _run_now(self, op: Callable[[sqlite3.Connection], T], what: str) -> T | None:
        """``op`` at once, or None while another process holds the file's lock: what the
        asks of one loop pass (claims, updates) try before awaiting :meth:`_run`'s retries."""
        try:
            result = op(self._conn())
            if self._checkpoints is not None:
                self._checkpoints.wrote()
            return result
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return None
            raise StoreError(f"sqlite {self.path}: {what} failed: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite {self.path}: {what} failed: {exc}") from exc

    @staticmethod
    def _in_transaction(db: sqlite3.Connection, body: Callable[[], T]) -> T:
        """``body`` inside ``BEGIN IMMEDIATE … COMMIT``; rolled back if anything raises."""
        db.execute("BEGIN IMMEDIATE")
        try:
            result = body()
            db.execute("COMMIT")
            return result
        except BaseException:
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    log.warning("sqlite rollback failed", exc_info=True)
            raise

    def _maybe_purge(self, db: sqlite3.Connection, now: float) -> None:
        """Delete expired rows, at most once per minute, never waiting for a lock."""
        if now < self._next_purge:
            return
        self._next_purge = now + _PURGE_EVERY
        try:
            db.execute("DELETE FROM kv WHERE expires IS NOT NULL AND expires <= ?", (now,))
            db.execute("DELETE FROM locks WHERE expires <= ?", (now,))
        except sqlite3.OperationalError:
            pass  # busy: try again at the next purge time

    @staticmethod
    def _clear_stale_leases(db: sqlite3.Connection) -> None:
        """Delete expired lease rows and those of dead processes of this machine.

        Run at open: a daemon restarted after a crash finds the leases its
        previous process held (and those of any other dead local process)
        gone, instead of waiting for them to expire.
        """
        db.execute("DELETE FROM locks WHERE expires <= ?", (time.time(),))
        for key, token in db.execute("SELECT key, token FROM locks").fetchall():
            if holder_is_gone(token):
                db.execute(GIVE_LEASE, (key, token))
                log.warning("lock %r: cleared the lease of a dead holder (%s)", key, token)

    def _mark_format(self, db: sqlite3.Connection) -> None:
        """Write the format marker when absent; refuse a file a newer tmy wrote."""
        marker = encode({"format": STORE_FORMAT}).decode()
        db.execute(
            "INSERT OR IGNORE INTO kv (key, value, expires) VALUES (?, ?, NULL)",
            (FORMAT_KEY, marker),
        )
        row = db.execute("SELECT value FROM kv WHERE key = ?", (FORMAT_KEY,)).fetchone()
        check_format(decode(row[0], FORMAT_KEY), f"sqlite {self.path}")

    def _count_ranks(self, db: sqlite3.Connection) -> None:
        """Build the boards' order-statistics counts when they are out of step with the
        ``ranks`` rows: once, for a file written before they existed."""
        if not rank_counts.out_of_step(db):
            return

        def body() -> None:
            if rank_counts.out_of_step(db):  # another process may have built them meanwhile
                rank_counts.rebuild(db)
                log.info("sqlite %s: counted the leaderboards' ranks (rank_counts)", self.path)

        self._in_transaction(db, body)

    # -- lifecycle --------------------------------------------------------------

    async def open(self) -> None:
        """Create the file (and its parent directories) and the tables; idempotent."""
        if self._db is not None:
            return
        try:
            if isinstance(self.path, Path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path,
                isolation_level=None,  # we issue BEGIN / COMMIT ourselves
                check_same_thread=False,
                timeout=self.busy_timeout_ms / 1000,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"sqlite {self.path}: cannot open: {exc}") from exc
        self._db = db

        wal = False

        def setup(d: sqlite3.Connection) -> None:
            nonlocal wal
            wal = d.execute("PRAGMA journal_mode = WAL").fetchall() == [("wal",)]
            d.execute("PRAGMA synchronous = NORMAL")
            d.executescript(SCHEMA)
            self._clear_stale_leases(d)
            self._mark_format(d)
            self._count_ranks(d)

        try:
            await self._run(setup, "open")
        except BaseException:
            self._db = None
            db.close()
            raise
        if wal and isinstance(self.path, Path):  # checkpoints on a thread of their own
            checkpoints = Checkpointer(self.path, self.busy_timeout_ms)
            if checkpoints.start():  # else SQLite's own checkpoints stay on
                await self._run(lambda d: d.execute("PRAGMA wal_autocheckpoint = 0"), "open")
                self._checkpoints = checkpoints

    async def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL); idempotent."""
        db, self._db = self._db, None
        checkpoints, self._checkpoints = self._checkpoints, None
        if checkpoints is not None:
            checkpoints.stop()  # first: the store's own close is then the file's last one
        if db is not None:
            db.close()

    async def ping(self) -> None:
        """Raise StoreError unless the file answers a query."""
        await self._run(lambda d: d.execute("SELECT 1").fetchone(), "ping")
