"""The lexical index (:mod:`tmy.store.textindex`) in SQLite tables.

Tables (a namespace is a row of ``ix_ns``; the others carry its integer id)::

    ix_ns   (id, name, n, total, seq)              documents, total length, put counter
    ix_docs (ns, doc, len, ord, seq, tf)           a document: length, order, when put, its
                                                   term counts as JSON (to remove its postings)
    ix_post (ns, term, doc, tf, seq)               a posting; PRIMARY KEY (ns, term, doc)
    ix_df   (ns, term, df)                         documents holding each term

Indexes: ``ix_docs (ns, ord)`` (lowest order first) and ``ix_post (ns, term,
seq)`` (a term's newest postings). Every write is one ``BEGIN IMMEDIATE``
transaction; a search reads inside one read transaction (one moment). A
namespace's row is never deleted (its id is cached per connection, the cache dropped
whenever a write fails: the row may have come from the rolled-back transaction);
``index_drop`` empties it.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from tmy.errors import StoreError
from tmy.store.base import Snapshot
from tmy.store.sqlite.postings_snapshot import read_snapshot
from tmy.store.textindex import (
    POSTINGS_BUDGET,
    IndexDoc,
    IndexHits,
    IndexStats,
    batched,
    capped,
    check_doc,
    check_ns,
    plan,
    split_entries,
)

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS ix_ns (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
  n INTEGER NOT NULL DEFAULT 0, total INTEGER NOT NULL DEFAULT 0, seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS ix_docs (
  ns INTEGER NOT NULL, doc TEXT NOT NULL, len INTEGER NOT NULL, ord REAL NOT NULL,
  seq INTEGER NOT NULL, tf TEXT NOT NULL, PRIMARY KEY (ns, doc)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ix_docs_ord ON ix_docs (ns, ord);
CREATE TABLE IF NOT EXISTS ix_post (
  ns INTEGER NOT NULL, term TEXT NOT NULL, doc TEXT NOT NULL, tf INTEGER NOT NULL,
  seq INTEGER NOT NULL, PRIMARY KEY (ns, term, doc)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ix_post_seq ON ix_post (ns, term, seq, tf);
CREATE TABLE IF NOT EXISTS ix_df (
  ns INTEGER NOT NULL, term TEXT NOT NULL, df INTEGER NOT NULL, PRIMARY KEY (ns, term)
) WITHOUT ROWID;
"""
_IN = "(SELECT value FROM json_each(?))"
_DF_ADD = (
    "INSERT INTO ix_df (ns, term, df) VALUES (?, ?, ?) "
    "ON CONFLICT (ns, term) DO UPDATE SET df = df + excluded.df"
)
_NEWEST = "SELECT doc, tf FROM ix_post WHERE ns = ? AND term = ? ORDER BY seq DESC LIMIT ?"
_BOTH = (
    "SELECT a.doc, a.tf, b.tf FROM (SELECT doc, tf, seq FROM ix_post WHERE ns = ?1 AND term = ?2 "
    "ORDER BY seq DESC LIMIT ?4) AS a JOIN ix_post AS b ON b.ns = ?1 AND b.term = ?3 "
    "AND b.doc = a.doc ORDER BY a.seq DESC LIMIT ?5"
)
SCAN_FACTOR = 32  # an intersection scans at most this × budget of the rarer term's postings


def _drop_doc(db: sqlite3.Connection, ns: int, doc: str) -> int | None:
    """Remove one document and its postings; its length, or None when absent."""
    row = db.execute("SELECT len, tf FROM ix_docs WHERE ns = ? AND doc = ?", (ns, doc)).fetchone()
    if row is None:
        return None
    terms = list(json.loads(row[1]))
    db.executemany(
        "DELETE FROM ix_post WHERE ns = ? AND term = ? AND doc = ?", [(ns, t, doc) for t in terms]
    )
    db.executemany(
        "UPDATE ix_df SET df = df - 1 WHERE ns = ? AND term = ?", [(ns, t) for t in terms]
    )
    # the document's own terms only (by the primary key): a "df <= 0" scan of the namespace
    # cost every removal or replacement O(its whole vocabulary)
    db.executemany(
        "DELETE FROM ix_df WHERE ns = ? AND term = ? AND df <= 0", [(ns, t) for t in terms]
    )
    db.execute("DELETE FROM ix_docs WHERE ns = ? AND doc = ?", (ns, doc))
    return int(row[0])


def put_docs(db: sqlite3.Connection, ns: int, docs: Sequence[IndexDoc]) -> None:
    """Add or replace ``docs`` (inside the caller's write transaction; a document given twice:
    the last one). The postings of all of them go in one ``executemany`` sorted by (term,
    doc) — neighbouring B-tree pages, not one random page per posting — and each term's
    document count is added once, summed over the batch."""
    docs = list({doc.doc: doc for doc in docs}.values())
    n, total, seq = db.execute("SELECT n, total, seq FROM ix_ns WHERE id = ?", (ns,)).fetchone()
    postings: list[tuple[int, str, str, int, int]] = []
    df: Counter[str] = Counter()
    for doc in docs:
        old = _drop_doc(db, ns, doc.doc)
        if old is not None:
            n, total = n - 1, total - old
        seq += 1
        tf = {t: capped(c) for t, c in doc.tf.items()}
        db.execute(
            "INSERT INTO ix_docs (ns, doc, len, ord, seq, tf) VALUES (?, ?, ?, ?, ?, ?)",
            (ns, doc.doc, doc.size, doc.order, seq, json.dumps(tf, ensure_ascii=False)),
        )
        postings.extend((ns, t, doc.doc, c, seq) for t, c in tf.items())
        df.update(tf.keys())
        n, total = n + 1, total + doc.size
    postings.sort(key=lambda p: (p[1], p[2]))
    db.executemany("INSERT INTO ix_post (ns, term, doc, tf, seq) VALUES (?, ?, ?, ?, ?)", postings)
    db.executemany(_DF_ADD, [(ns, t, c) for t, c in sorted(df.items())])
    db.execute("UPDATE ix_ns SET n = ?, total = ?, seq = ? WHERE id = ?", (n, total, seq, ns))


def _stats(db: sqlite3.Connection, ns: int, terms: Sequence[str]) -> IndexStats:
    n, total = db.execute("SELECT n, total FROM ix_ns WHERE id = ?", (ns,)).fetchone()
    df = {t: 0 for t in terms}
    if terms and n:  # an empty namespace: no term lookup
        q = f"SELECT term, df FROM ix_df WHERE ns = ? AND term IN {_IN}"
        df.update(db.execute(q, (ns, json.dumps(list(terms)))).fetchall())
    return IndexStats(int(n), int(total), df)


def _search(db: sqlite3.Connection, ns: int, terms: Sequence[str], budget: int) -> IndexHits:
    stats = _stats(db, ns, terms)
    todo = plan(stats.df, budget)
    found: dict[str, dict[str, int]] = {}
    for term in todo.read:
        for doc, tf in db.execute(_NEWEST, (ns, term, budget)):
            found.setdefault(doc, {})[term] = tf
    if len(todo.cut) == 1:
        (term,) = todo.cut
        for doc, tf in db.execute(_NEWEST, (ns, term, budget)):
            found.setdefault(doc, {})[term] = tf
    elif todo.cut:
        a, b = todo.cut
        for doc, tfa, tfb in db.execute(_BOTH, (ns, a, b, budget * SCAN_FACTOR, budget)):
            found[doc] = {a: tfa, b: tfb}
    if not found:
        return IndexHits(stats, {}, not todo.cut)
    ids = json.dumps(list(found))
    for term in todo.probe:
        q = f"SELECT doc, tf FROM ix_post WHERE ns = ? AND term = ? AND doc IN {_IN}"
        for doc, tf in db.execute(q, (ns, term, ids)):
            found[doc][term] = tf
    lengths = db.execute(f"SELECT doc, len FROM ix_docs WHERE ns = ? AND doc IN {_IN}", (ns, ids))
    docs = {doc: (length, found[doc]) for doc, length in lengths}
    return IndexHits(stats, docs, not todo.cut)


class SQLitePostings:
    """The ``index_*`` methods of :class:`~tmy.store.sqlite.SQLiteStore` (see the module doc),
    and its ``snapshot`` / ``restore`` with the index documents (before the plain ones)."""

    _run: Callable[..., Any]
    _in_transaction: Callable[..., Any]
    _conn: Callable[..., Any]
    _ns_ids: dict[str, int]
    path: Any
    lock_timeout: float

    @staticmethod
    def _read_snapshot(db: sqlite3.Connection) -> Snapshot:
        """A snapshot reads the index documents too (see SQLiteSnapshots.snapshot)."""
        return read_snapshot(db)

    async def restore(self, snapshot: Snapshot, *, replace: bool) -> int:
        """The plain entries as before (``super().restore``), then the index documents,
        in transactions of 500 (with ``replace`` every namespace is emptied first)."""
        plain, docs = split_entries(snapshot.entries)  # checked before anything is written
        real = Snapshot(plain, snapshot.ranks, snapshot.point_in_time)
        count: int = await super().restore(real, replace=replace)  # type: ignore[misc]
        if replace:
            await self._write("restore of the index", wipe)
        for ns, items in docs.items():
            for chunk in batched(items):
                await self._write(
                    f"restore of index {ns!r}", lambda db, n=ns, c=chunk: restore_docs(db, n, c)
                )
                count += len(chunk)
        self.__dict__.pop("_ns_ids", None)
        return count

    def _ns_id(self, db: sqlite3.Connection, ns: str, *, create: bool) -> int | None:
        cache = self.__dict__.setdefault("_ns_ids", {})
        if ns in cache:
            return cache[ns]
        check_ns(ns)
        if create:
            db.execute("INSERT OR IGNORE INTO ix_ns (name) VALUES (?)", (ns,))
        row = db.execute("SELECT id FROM ix_ns WHERE name = ?", (ns,)).fetchone()
        if row is None:
            return None
        cache[ns] = int(row[0])
        return cache[ns]

    async def _write(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(db)`` in one write transaction. When it fails, the namespace ids cached
        meanwhile go: a namespace row inserted by a rolled-back transaction does not exist,
        and SQLite hands its rowid to the next new namespace (two namespaces would share
        their documents). An error that is not SQLite's (OverflowError binding a value) is a
        StoreError like the others."""

        def op(db: sqlite3.Connection) -> T:
            try:
                return self._in_transaction(db, lambda: fn(db))
            except BaseException as exc:
                self.__dict__.pop("_ns_ids", None)
                if isinstance(exc, (sqlite3.Error, StoreError)) or not isinstance(exc, Exception):
                    raise
                raise StoreError(f"sqlite {self.path}: {what} failed: {exc!r}") from exc

        return await self._run(op, what)

    async def _read(
        self, what: str, ns: str, fn: Callable[[sqlite3.Connection, int], T], empty: T
    ) -> T:
        """``fn(db, ns id)`` in one read transaction; ``empty`` for a namespace never written
        (no transaction: namespace rows are never deleted)."""

        def op(db: sqlite3.Connection) -> T:
            ns_id = self._ns_id(db, ns, create=False)
            if ns_id is None:
                return empty
            db.execute("BEGIN")
            try:
                return fn(db, ns_id)
            finally:
                db.execute("COMMIT")

        return await self._run(op, what)

    async def index_put(self, ns: str, docs: Sequence[IndexDoc]) -> None:
        """Add or replace ``docs`` in ``ns``: one transaction."""
        docs = [check_doc(d) for d in docs]
        if not docs:
            return

        def fn(db: sqlite3.Connection) -> None:
            ns_id = self._ns_id(db, ns, create=True)
            assert ns_id is not None
            put_docs(db, ns_id, docs)

        await self._write(f"index_put {ns!r}", fn)

    async def index_remove(self, ns: str, docs: Sequence[str]) -> int:
        """Remove ``docs`` from ``ns``; how many were there."""

        def fn(db: sqlite3.Connection) -> int:
            ns_id = self._ns_id(db, ns, create=False)
            if ns_id is None:
                return 0
            gone, length = 0, 0
            for doc in dict.fromkeys(docs):
                old = _drop_doc(db, ns_id, doc)
                if old is not None:
                    gone, length = gone + 1, length + old
            if gone:
                db.execute(
                    "UPDATE ix_ns SET n = n - ?, total = total - ? WHERE id = ?",
                    (gone, length, ns_id),
                )
            return gone

        return await self._write(f"index_remove {ns!r}", fn) if docs else 0

    async def index_order(self, ns: str, orders: Mapping[str, float]) -> None:
        """Set the order of the documents of ``orders`` that exist."""

        def fn(db: sqlite3.Connection) -> None:
            ns_id = self._ns_id(db, ns, create=False)
            if ns_id is not None:
                rows = [(float(o), ns_id, d) for d, o in orders.items()]
                db.executemany("UPDATE ix_docs SET ord = ? WHERE ns = ? AND doc = ?", rows)

        if orders:
            await self._write(f"index_order {ns!r}", fn)

    async def index_stats(self, ns: str, terms: Sequence[str] = ()) -> IndexStats:
        """Documents, total length and the document count of each of ``terms``."""
        terms = list(dict.fromkeys(terms))
        empty = IndexStats(0, 0, dict.fromkeys(terms, 0))
        return await self._read(
            f"index_stats {ns!r}", ns, lambda db, ns_id: _stats(db, ns_id, terms), empty
        )

    async def index_search(
        self, ns: str, terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> IndexHits:
        """Candidates for ``terms`` (see :mod:`tmy.store.textindex`), in one read transaction."""
        terms = list(dict.fromkeys(terms))
        budget = max(1, int(budget))
        empty = IndexHits(IndexStats(0, 0, dict.fromkeys(terms, 0)))
        return await self._read(
            f"index_search {ns!r}", ns, lambda db, ns_id: _search(db, ns_id, terms, budget), empty
        )

    async def index_search_many(
        self, namespaces: Sequence[str], terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> list[IndexHits]:
        """:meth:`index_search` of each namespace, in one read transaction."""
        terms = list(dict.fromkeys(terms))
        budget = max(1, int(budget))

        def op(db: sqlite3.Connection) -> list[IndexHits]:
            ids = [self._ns_id(db, ns, create=False) for ns in namespaces]
            empty = IndexHits(IndexStats(0, 0, dict.fromkeys(terms, 0)))
            if all(i is None for i in ids):
                return [empty for _ in ids]
            db.execute("BEGIN")
            try:
                return [empty if i is None else _search(db, i, terms, budget) for i in ids]
            finally:
                db.execute("COMMIT")

        return await self._run(op, f"index_search of {len(namespaces)} namespaces")

    async def index_lowest(
        self, ns: str, n: int, *, term: str | None = None
    ) -> list[tuple[str, float]]:
        """The ``n`` documents of lowest order (holding ``term``, if given), lowest first."""

        def fn(db: sqlite3.Connection, ns_id: int) -> list[tuple[str, float]]:
            if n <= 0:
                return []
            if term is None:
                q = "SELECT doc, ord FROM ix_docs WHERE ns = ? ORDER BY ord, doc LIMIT ?"
                return db.execute(q, (ns_id, n)).fetchall()
            q = (
                "SELECT d.doc, d.ord FROM ix_post AS p JOIN ix_docs AS d ON d.ns = p.ns "
                "AND d.doc = p.doc WHERE p.ns = ? AND p.term = ? ORDER BY d.ord, d.doc LIMIT ?"
            )
            return db.execute(q, (ns_id, term, n)).fetchall()

        return [(d, float(o)) for d, o in await self._read(f"index_lowest {ns!r}", ns, fn, [])]

    async def index_drop(self, ns: str) -> int:
        """Remove every document of ``ns``; how many there were."""

        def fn(db: sqlite3.Connection) -> int:
            ns_id = self._ns_id(db, ns, create=False)
            if ns_id is None:
                return 0
            (n,) = db.execute("SELECT n FROM ix_ns WHERE id = ?", (ns_id,)).fetchone()
            for table in ("ix_docs", "ix_post", "ix_df"):
                db.execute(f"DELETE FROM {table} WHERE ns = ?", (ns_id,))
            db.execute("UPDATE ix_ns SET n = 0, total = 0 WHERE id = ?", (ns_id,))
            return int(n)

        return await self._write(f"index_drop {ns!r}", fn)


def wipe(db: sqlite3.Connection) -> None:
    """Empty every namespace (a replacing restore; inside its transaction)."""
    for table in ("ix_docs", "ix_post", "ix_df"):
        db.execute(f"DELETE FROM {table}")
    db.execute("UPDATE ix_ns SET n = 0, total = 0")


def restore_docs(db: sqlite3.Connection, ns: str, docs: Sequence[IndexDoc]) -> None:
    """Put ``docs`` into ``ns`` (a restore's batch; inside its transaction)."""
    db.execute("INSERT OR IGNORE INTO ix_ns (name) VALUES (?)", (ns,))
    (ns_id,) = db.execute("SELECT id FROM ix_ns WHERE name = ?", (ns,)).fetchone()
    put_docs(db, ns_id, docs)
