"""The SQLite store's values, commits and locks: :class:`SQLiteStore`."""

from __future__ import annotations

import contextvars
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from tmy.store.base import FORMAT_KEY, MISSING
from tmy.store.codec import check_key, check_ttl, decode, encode
from tmy.store.leases import (
    Lease,
    check_fence,
    hold_lease,
    holder_is_gone,
    lost_in_store,
    new_token,
)
from tmy.store.passes import Failed
from tmy.store.sqlite.connection import (
    CHUNK,
    CLAIM,
    CLAIM_ROWS,
    GIVE_LEASE,
    RENEW_LEASE,
    TAKE_LEASE,
    UPSERT,
    FnFailed,
    claim_rows,
    claim_sql,
    is_live,
    log,
)
from tmy.store.sqlite.postings import SQLitePostings
from tmy.store.sqlite.snapshots import SQLiteSnapshots

R = TypeVar("R")
# key, fn, ttl, the caller's context
Update = tuple[str, Callable[[Any], tuple[Any, Any]], float | None, contextvars.Context]


class SQLiteStore(SQLitePostings, SQLiteSnapshots):
    """A :class:`~tmy.store.base.Store` in one SQLite file (or ``:memory:``); the lexical
    index, and snapshots carrying it, are :class:`~tmy.store.sqlite.postings.SQLitePostings`'."""

    # -- values -----------------------------------------------------------------

    async def get(self, key: str) -> Any:
        """The value at ``key``, or ``MISSING`` when absent or expired."""
        check_key(key)

        def op(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT value, expires FROM kv WHERE key = ?", (key,)).fetchone()
            return decode(row[0], key) if is_live(row, time.time()) else MISSING

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
            for i in range(0, len(keys), CHUNK):
                chunk = keys[i : i + CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT key, value, expires FROM kv WHERE key IN ({marks})"
                for row in db.execute(sql, chunk):
                    if is_live(row, now):
                        found[row[0]] = row[1]
            return found

        def op(db: sqlite3.Connection) -> dict[str, Any]:
            if len(keys) <= CHUNK:
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
        raw = encode(value, key, self.max_value_bytes).decode()
        expires_in = None if ttl is None else check_ttl(ttl)

        def op(db: sqlite3.Connection) -> None:
            now = time.time()
            expires = None if expires_in is None else now + expires_in
            db.execute(UPSERT, (key, raw, expires))
            self._maybe_purge(db, now)

        await self._run(op, f"set {key!r}")

    async def delete(self, key: str) -> bool:
        """Remove ``key``; True when a live value was removed."""
        check_key(key)

        def op(db: sqlite3.Connection) -> bool:
            now = time.time()
            rows = db.execute("DELETE FROM kv WHERE key = ? RETURNING expires", (key,)).fetchall()
            return bool(rows) and is_live(rows[0], now)

        return await self._run(op, f"delete {key!r}")

    async def update(
        self, key: str, fn: Callable[[Any], tuple[Any, R]], *, ttl: float | None = None
    ) -> R:
        """Atomically apply ``fn`` to the value at ``key`` (see :meth:`Store.update`);
        updates asked in one pass of the event loop share one transaction, each applied
        in the order asked on what the ones before it left (:mod:`tmy.store.passes`)."""
        check_key(key)
        expires_in = None if ttl is None else check_ttl(ttl)
        # fn runs in its caller's context (a copy), as it did when each update ran alone:
        # a pure step's template reads the run's trace id and seeded randomness there
        update = (key, fn, expires_in, contextvars.copy_context())
        return await self._updates.ask(update)  # type: ignore[no-any-return]

    def _update_op(self, batch: Sequence[Update]) -> Callable[[sqlite3.Connection], list[Any]]:
        """The op applying ``batch`` in one transaction: one answer per update, or its own
        :class:`Failed` (its ``fn`` raised, its value would not decode or encode: nothing
        of it written, the others' writes kept); a database error fails them all."""

        def body(db: sqlite3.Connection) -> list[Any]:
            now = time.time()
            answers: list[Any] = []
            for key, fn, expires_in, context in batch:
                row = db.execute("SELECT value, expires FROM kv WHERE key = ?", (key,)).fetchone()
                live = is_live(row, now)
                try:
                    current = decode(row[0], key) if live else MISSING  # type: ignore[index]
                    new, result = context.run(fn, current)
                    raw = None if new is MISSING else encode(new, key, self.max_value_bytes)
                except BaseException as exc:  # its caller's, as when it ran alone (any kind)
                    answers.append(Failed(exc))
                    continue
                if raw is None:
                    if row is not None:
                        db.execute("DELETE FROM kv WHERE key = ?", (key,))
                else:
                    kept = row[1] if live else None  # type: ignore[index]
                    expires = kept if expires_in is None else now + expires_in
                    db.execute(UPSERT, (key, raw.decode(), expires))
                answers.append(result)
            return answers

        def op(db: sqlite3.Connection) -> list[Any]:
            answers = self._in_transaction(db, lambda: body(db))
            self._maybe_purge(db, time.time())
            return answers

        return op

    def _updates_now(self, batch: Sequence[Update]) -> list[Any] | None:
        return self._run_now(self._update_op(batch), "update")

    async def _update_batch(self, batch: Sequence[Update]) -> list[Any]:
        return await self._run(self._update_op(batch), f"update of {len(batch)} keys")

    async def claim(self, key: str, ttl: float) -> bool:
        """Take ``key`` for ``ttl`` seconds in one statement (see :meth:`Store.claim`);
        claims asked in one pass of the event loop share one transaction
        (:mod:`tmy.store.claims`)."""
        check_key(key)
        return await self._claims.claim(key, check_ttl(ttl))

    async def claim_many(self, keys: Sequence[str], ttl: float) -> list[bool]:
        """:meth:`claim` of each of ``keys`` in order, as one transaction (one statement
        per :data:`CLAIM_ROWS` keys): for a caller that gathered its claims itself (the
        chat adapters' arrivals, :mod:`tmy.adapters.dedup`). A key listed twice is
        taken by its first listing only."""
        for key in keys:
            check_key(key)
        ttl = check_ttl(ttl)
        if not keys:
            return []
        batch = [(key, ttl) for key in keys]
        return await self._run(self._claim_op(batch), f"claim of {len(batch)} keys")

    def _claim_op(
        self, batch: Sequence[tuple[str, float]]
    ) -> Callable[[sqlite3.Connection], list[bool]]:
        def op(db: sqlite3.Connection) -> list[bool]:
            now = time.time()
            if len(batch) == 1:  # one statement is its own transaction
                key, ttl = batch[0]
                return [db.execute(CLAIM, (key, now + ttl, now)).fetchone() is not None]
            # one statement per CLAIM_ROWS keys (one transaction for them all): a key listed
            # twice is taken by its first listing only, as one statement each would have it
            taken: set[str] = set()
            for start in range(0, len(batch), CLAIM_ROWS):
                rows = batch[start : start + CLAIM_ROWS]
                args: list[Any] = []
                for key, ttl in rows:
                    args += (key, now + ttl)
                size = claim_rows(len(rows))
                args += args[-2:] * (size - len(rows))  # the last key again: a cached size
                args.append(now)
                taken.update(key for (key,) in db.execute(claim_sql(size), args))
            answers = []
            for key, _ in batch:
                answers.append(key in taken)
                taken.discard(key)
            return answers

        def in_one(db: sqlite3.Connection) -> list[bool]:
            # one statement (up to CLAIM_ROWS keys) is a transaction of its own
            return op(db) if len(batch) <= CLAIM_ROWS else self._in_transaction(db, lambda: op(db))

        return in_one

    def _claim_now(self, batch: Sequence[tuple[str, float]]) -> list[bool] | None:
        return self._run_now(self._claim_op(batch), "claim")

    async def _claim_batch(self, batch: Sequence[tuple[str, float]]) -> list[bool]:
        return await self._run(self._claim_op(batch), f"claim of {len(batch)} keys")

    async def keys(self, prefix: str) -> list[str]:
        """Every live key starting with ``prefix``, sorted (by code point)."""

        def op(db: sqlite3.Connection) -> list[str]:
            now = time.time()
            out = []
            sql = "SELECT key, expires FROM kv WHERE key >= ? ORDER BY key"
            for key, expires in db.execute(sql, (prefix,)):
                if not key.startswith(prefix):
                    break  # keys sharing the prefix are contiguous in index order
                if (expires is None or expires > now) and key != FORMAT_KEY:
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
        limit = self.max_value_bytes
        for key, value, ttl in writes:
            check_key(key)
            raw = None if value is MISSING else encode(value, key, limit).decode()
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
                    raise FnFailed(lost_in_store(lease, f"sqlite {self.path}"))
            for key, raw, expires_in in rows:
                if raw is None:
                    db.execute("DELETE FROM kv WHERE key = ?", (key,))
                else:
                    expires = None if expires_in is None else now + expires_in
                    db.execute(UPSERT, (key, raw, expires))

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
            if db.execute(TAKE_LEASE, (key, token, now + ttl, now)).rowcount == 1:
                return True
            row = db.execute("SELECT token FROM locks WHERE key = ?", (key,)).fetchone()
            if row is None or not holder_is_gone(row[0]):
                return False
            # its holder was a process of this machine that has died: clear it now
            # (compare-and-delete, so a lease taken meanwhile by another is kept)
            if db.execute(GIVE_LEASE, (key, row[0])).rowcount:
                log.warning("lock %r: cleared the lease of a dead holder (%s)", key, row[0])
            now = time.time()
            return db.execute(TAKE_LEASE, (key, token, now + ttl, now)).rowcount == 1

        def extend(db: sqlite3.Connection) -> bool:
            now = time.time()
            return db.execute(RENEW_LEASE, (now + ttl, key, token, now)).rowcount == 1

        def give_back(db: sqlite3.Connection) -> None:
            db.execute(GIVE_LEASE, (key, token))

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
