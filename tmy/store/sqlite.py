"""The embedded store: one SQLite file, zero set-up, shared safely by several processes.

Why it is built this way:

* **Synchronous calls on the event loop.** Every statement is a few
  microseconds (WAL, ``synchronous=NORMAL``: a commit appends to the WAL and
  does not fsync), far cheaper than handing it to a thread. What could block is
  waiting for *another process* that holds the write lock, so SQLite's own busy
  wait is kept short (``busy_timeout`` 20 ms) and longer waits are retried with
  ``await asyncio.sleep`` backoff until ``lock_timeout`` (10 s) has passed; only
  then does the call fail with :class:`~tmy.errors.StoreError`. The loop is
  never blocked for more than one short busy wait.
* **update** runs ``BEGIN IMMEDIATE; SELECT; fn; write; COMMIT`` in one
  synchronous go: nothing else in this process can run in between (no
  ``await``), and ``BEGIN IMMEDIATE`` takes SQLite's write lock, so it is atomic
  across processes too. If ``fn`` raises, the transaction is rolled back and the
  exception propagates unchanged.
* **TTL** is stored as an absolute wall-clock time (``time.time()``, shared by
  all processes). Expired rows read as ``MISSING`` and are purged lazily: at
  most once a minute, as part of a write.
* ``update(ttl=None)`` keeps the key's current expiry (a counter inside a
  session keeps the session's lifetime); ``set(ttl=None)`` stores a value that
  never expires; ``set(key, MISSING)`` deletes the key.
* **Every write is applied at most once.** The only retry is ``_run``'s, and
  it re-runs an operation only after SQLITE_BUSY/SQLITE_LOCKED, which SQLite
  reports *before* changing anything: a single statement (``set``,
  ``delete``, the lease statements) that fails busy did not run, and an
  ``update`` that fails busy — at ``BEGIN IMMEDIATE``, inside, or at
  ``COMMIT`` (a COMMIT that fails busy leaves its transaction open) — is
  rolled back before the retry. Nothing that runs after a COMMIT (the lazy
  purge) lets a busy error escape to trigger a retry. So a retry is always
  the first application, never a second, and writes need no operation ids
  here (unlike Redis, whose client resends commands that may have run).
  Any other error is a StoreError, raised without retrying.
* **lock** is an in-process ``asyncio.Lock`` per key (waiters queue in order)
  plus a lease row in ``locks`` that other processes see. A lease is taken
  when absent, expired, or already ours (so taking is idempotent); another
  process's lease is polled for with short sleeps; release deletes the row
  only if the token is still ours. Leases are short (5 s by default) and
  renewed every third of that (``UPDATE … WHERE token = ?``) while the holder
  works, so a killed daemon's lease frees within seconds. Tokens name their
  holder process (:mod:`tmy.store.leases`): a lease whose holder was a process
  of this machine that has died is cleared at once — at ``open`` (with every
  expired row), and by a contender that finds it — so a restarted daemon never
  waits on the locks of its previous life.
* **commit** applies several writes in one ``BEGIN IMMEDIATE`` transaction,
  after checking in that same transaction that each fencing lease's row still
  holds its token and is unexpired (``LeaseLost`` and nothing written
  otherwise): an atomic span's writes land all together or not at all, and
  never after its lease was lost. ``?lease_ttl=`` in the URL sets the default
  lease length (tests use 1 s).

One instance belongs to one event loop (one thread); open a second instance for
another thread or process.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

from tmy.errors import StoreError
from tmy.store.base import MISSING
from tmy.store.codec import check_key, check_ttl, decode, encode
from tmy.store.leases import (
    LEASE_TTL,
    KeyedLocks,
    Lease,
    check_fence,
    hold_lease,
    holder_is_gone,
    lost_in_store,
    new_token,
)

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL);
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires) WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, token TEXT NOT NULL, expires REAL NOT NULL);
"""
_UPSERT = (
    "INSERT INTO kv (key, value, expires) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires"
)
_TAKE_LEASE = (
    "INSERT INTO locks (key, token, expires) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires = excluded.expires "
    "WHERE locks.expires <= ? OR locks.token = excluded.token"
)
# an expired lease is lost, as on Redis, even if nobody has taken it yet
_RENEW_LEASE = "UPDATE locks SET expires = ? WHERE key = ? AND token = ? AND expires > ?"
_GIVE_LEASE = "DELETE FROM locks WHERE key = ? AND token = ?"
_PURGE_EVERY = 60.0  # seconds between lazy purges of expired rows
_CHUNK = 500  # keys per SELECT ... IN (...) in get_many


class _FnFailed(Exception):
    """Carries an exception raised by an ``update`` function past the retry loop."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _live(row: tuple[Any, ...] | None, now: float) -> bool:
    return row is not None and (row[-1] is None or row[-1] > now)


class SQLiteStore:
    """A :class:`~tmy.store.base.Store` in one SQLite file (or ``:memory:``)."""

    def __init__(
        self,
        path: str | Path,
        *,
        lock_timeout: float = 10.0,
        busy_timeout_ms: int = 20,
        lease_ttl: float = LEASE_TTL,
    ) -> None:
        """``lock_timeout``: how long to wait for another process's write lock;
        ``lease_ttl``: the default length of ``lock``'s leases (URL ``?lease_ttl=``)."""
        self.path: str | Path = path if str(path) == ":memory:" else Path(path)
        self.lease_ttl = check_ttl(lease_ttl, "lease_ttl")
        self.url = f"sqlite:///{self.path}"
        if lease_ttl != LEASE_TTL:
            self.url += f"?lease_ttl={lease_ttl:g}"
        self.lock_timeout = lock_timeout
        self.busy_timeout_ms = busy_timeout_ms
        self._db: sqlite3.Connection | None = None
        self._leases = KeyedLocks()
        self._next_purge = 0.0

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

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
                return op(db)
            except _FnFailed as failed:
                fn_error = failed.exc  # raised below, outside this handler: left untouched
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
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
                db.execute(_GIVE_LEASE, (key, token))
                log.warning("lock %r: cleared the lease of a dead holder (%s)", key, token)

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

        def setup(d: sqlite3.Connection) -> None:
            d.execute("PRAGMA journal_mode = WAL").fetchall()
            d.execute("PRAGMA synchronous = NORMAL")
            d.executescript(_SCHEMA)
            self._clear_stale_leases(d)

        try:
            await self._run(setup, "open")
        except BaseException:
            self._db = None
            db.close()
            raise

    async def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL); idempotent."""
        db, self._db = self._db, None
        if db is not None:
            db.close()

    async def ping(self) -> None:
        """Raise StoreError unless the file answers a query."""
        await self._run(lambda d: d.execute("SELECT 1").fetchone(), "ping")

    # -- values -----------------------------------------------------------------

    async def get(self, key: str) -> Any:
        """The value at ``key``, or ``MISSING`` when absent or expired."""
        check_key(key)

        def op(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT value, expires FROM kv WHERE key = ?", (key,)).fetchone()
            return decode(row[0], key) if _live(row, time.time()) else MISSING

        return await self._run(op, f"get {key!r}")

    async def get_many(self, keys: Sequence[str]) -> list[Any]:
        """Values for ``keys`` in order, ``MISSING`` for absent ones, from one snapshot."""
        keys = list(keys)
        for key in keys:
            check_key(key)
        if not keys:
            return []

        def read(db: sqlite3.Connection) -> dict[str, Any]:
            now = time.time()
            found: dict[str, Any] = {}
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i : i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT key, value, expires FROM kv WHERE key IN ({marks})"
                for row in db.execute(sql, chunk):
                    if _live(row, now):
                        found[row[0]] = row[1]
            return found

        def op(db: sqlite3.Connection) -> dict[str, Any]:
            if len(keys) <= _CHUNK:
                return read(db)
            db.execute("BEGIN")  # one read snapshot across the chunks
            try:
                return read(db)
            finally:
                db.execute("COMMIT")

        found = await self._run(op, "get_many")
        return [decode(found[k], k) if k in found else MISSING for k in keys]

    async def set(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        """Replace the value at ``key``; ``ttl`` seconds of life, else none; MISSING deletes."""
        check_key(key)
        if value is MISSING:
            await self.delete(key)
            return
        raw = encode(value, key).decode()
        expires_in = None if ttl is None else check_ttl(ttl)

        def op(db: sqlite3.Connection) -> None:
            now = time.time()
            expires = None if expires_in is None else now + expires_in
            db.execute(_UPSERT, (key, raw, expires))
            self._maybe_purge(db, now)

        await self._run(op, f"set {key!r}")

    async def delete(self, key: str) -> bool:
        """Remove ``key``; True when a live value was removed."""
        check_key(key)

        def op(db: sqlite3.Connection) -> bool:
            now = time.time()
            rows = db.execute("DELETE FROM kv WHERE key = ? RETURNING expires", (key,)).fetchall()
            return bool(rows) and _live(rows[0], now)

        return await self._run(op, f"delete {key!r}")

    async def update(
        self, key: str, fn: Callable[[Any], tuple[Any, R]], *, ttl: float | None = None
    ) -> R:
        """Atomically apply ``fn`` to the value at ``key`` (see :meth:`Store.update`)."""
        check_key(key)
        expires_in = None if ttl is None else check_ttl(ttl)

        def body(db: sqlite3.Connection) -> R:
            now = time.time()
            row = db.execute("SELECT value, expires FROM kv WHERE key = ?", (key,)).fetchone()
            live = _live(row, now)
            current = decode(row[0], key) if live else MISSING
            try:
                new, result = fn(current)
            except BaseException as exc:
                raise _FnFailed(exc) from None
            if new is MISSING:
                if row is not None:
                    db.execute("DELETE FROM kv WHERE key = ?", (key,))
            else:
                raw = encode(new, key).decode()
                kept = row[1] if live else None  # type: ignore[index]
                expires = kept if expires_in is None else now + expires_in
                db.execute(_UPSERT, (key, raw, expires))
            return result

        def op(db: sqlite3.Connection) -> R:
            result = self._in_transaction(db, lambda: body(db))
            self._maybe_purge(db, time.time())
            return result

        return await self._run(op, f"update {key!r}")

    async def keys(self, prefix: str) -> list[str]:
        """Every live key starting with ``prefix``, sorted (by code point)."""

        def op(db: sqlite3.Connection) -> list[str]:
            now = time.time()
            out = []
            sql = "SELECT key, expires FROM kv WHERE key >= ? ORDER BY key"
            for key, expires in db.execute(sql, (prefix,)):
                if not key.startswith(prefix):
                    break  # keys sharing the prefix are contiguous in index order
                if expires is None or expires > now:
                    out.append(key)
            return out

        return await self._run(op, f"keys {prefix!r}")

    async def commit(
        self, writes: Sequence[tuple[str, Any, float | None]], *, fence: Sequence[Lease] = ()
    ) -> None:
        """Apply ``writes`` in ONE transaction, only if every ``fence`` lease still holds.

        ``writes`` are ``(key, value, ttl)`` (``MISSING`` deletes; ``ttl`` None:
        no expiry). Inside ``BEGIN IMMEDIATE`` each fence lease's row must still
        hold its token and not be expired; otherwise the transaction is rolled
        back (nothing written) and :class:`~tmy.errors.LeaseLost` names the key.
        """
        leases = check_fence(fence)
        rows: list[tuple[str, str | None, float | None]] = []
        for key, value, ttl in writes:
            check_key(key)
            raw = None if value is MISSING else encode(value, key).decode()
            rows.append((key, raw, None if ttl is None else check_ttl(ttl)))
        if not rows and not leases:
            return

        def body(db: sqlite3.Connection) -> None:
            now = time.time()
            for lease in leases:
                row = db.execute(
                    "SELECT token, expires FROM locks WHERE key = ?", (lease.key,)
                ).fetchone()
                if row is None or row[0] != lease.token or row[1] <= now:
                    raise _FnFailed(lost_in_store(lease, f"sqlite {self.path}"))
            for key, raw, expires_in in rows:
                if raw is None:
                    db.execute("DELETE FROM kv WHERE key = ?", (key,))
                else:
                    expires = None if expires_in is None else now + expires_in
                    db.execute(_UPSERT, (key, raw, expires))

        def op(db: sqlite3.Connection) -> None:
            self._in_transaction(db, lambda: body(db))
            self._maybe_purge(db, time.time())

        await self._run(op, f"commit of {len(rows)} writes")

    # -- locks ------------------------------------------------------------------

    def lock(
        self, key: str, *, ttl: float | None = None, wait: float = 30.0
    ) -> AbstractAsyncContextManager[Lease]:
        """Hold the lease ``key`` across all processes on this file (see :meth:`Store.lock`).

        ``ttl`` defaults to the store's ``lease_ttl``.
        """
        check_key(key)
        ttl = self.lease_ttl if ttl is None else check_ttl(ttl, "lock ttl")
        token = new_token()

        def try_take(db: sqlite3.Connection) -> bool:
            now = time.time()
            if db.execute(_TAKE_LEASE, (key, token, now + ttl, now)).rowcount == 1:
                return True
            row = db.execute("SELECT token FROM locks WHERE key = ?", (key,)).fetchone()
            if row is None or not holder_is_gone(row[0]):
                return False
            # its holder was a process of this machine that has died: clear it now
            # (compare-and-delete, so a lease taken meanwhile by another is kept)
            if db.execute(_GIVE_LEASE, (key, row[0])).rowcount:
                log.warning("lock %r: cleared the lease of a dead holder (%s)", key, row[0])
            now = time.time()
            return db.execute(_TAKE_LEASE, (key, token, now + ttl, now)).rowcount == 1

        def extend(db: sqlite3.Connection) -> bool:
            now = time.time()
            return db.execute(_RENEW_LEASE, (now + ttl, key, token, now)).rowcount == 1

        def give_back(db: sqlite3.Connection) -> None:
            db.execute(_GIVE_LEASE, (key, token))

        async def take() -> float | None:
            return None if await self._run(try_take, f"lock {key!r}") else math.inf

        async def renew() -> bool:
            return await self._run(extend, f"renew lock {key!r}")

        async def give() -> None:
            await self._run(give_back, f"unlock {key!r}")

        return hold_lease(
            self._leases,
            key,
            where=f"sqlite {self.path}",
            ttl=ttl,
            wait=wait,
            take=take,
            give=give,
            renew=renew,
            token=token,
        )
