"""The lexical index (:mod:`tmy.store.textindex`) in Redis hashes and sorted sets.

A namespace ``ns`` is the hash tag of all its keys, so they share one slot (a
cluster runs each script on one node)::

    {prefix}:ix:{ns}:m          hash: n, total, seq (documents, total length, put counter)
    {prefix}:ix:{ns}:d          hash: doc → its term counts as JSON (to remove its postings)
    {prefix}:ix:{ns}:l          hash: doc → length
    {prefix}:ix:{ns}:o          sorted set: doc → order (lowest first: the cap's victims)
    {prefix}:ix:{ns}:t:<term>   sorted set: doc → seq × 1024 + count (newest last)
    {prefix}:ix:{ns}:op:<id>    a write's record (see :mod:`tmy.store.redis`)

A posting's score packs when its document was put (``seq``) with the term's
count, so one sorted set gives both a term's newest postings (``ZREVRANGE``)
and a candidate's count (``ZMSCORE``); its size is the term's document
frequency (``ZCARD``). Every write is one script that records its operation id
first, so a copy redis-py resends applies nothing twice and answers what the
first did. A search is one script (:data:`SEARCH`), which follows
:func:`tmy.store.textindex.plan` step for step — for every namespace of a recall
at once on one Redis (one command, one round trip), one namespace per call on a
cluster; its reply is numbers (document positions and counts), not text to parse.
Needs Redis ≥ 6.2 (``ZMSCORE``; the store as a whole needs 7.0, checked at ``open()``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from tmy.store.base import Snapshot
from tmy.store.redis.postings_lua import SCRIPTS
from tmy.store.redis.snapshots import glob_escape
from tmy.store.textindex import (
    POSTINGS_BUDGET,
    IndexDoc,
    IndexHits,
    IndexStats,
    capped,
    check_doc,
    check_ns,
    doc_entry,
    split_entries,
)

SCAN_FACTOR = 32  # as tmy.store.sqlite.postings: an intersection scans 32 × budget postings

CHUNK = 200  # documents per put script (a restore's batch is split into these)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def parse_hits(reply: list[Any], terms: Sequence[str]) -> IndexHits:
    """One namespace's part of the SEARCH script's reply as :class:`IndexHits`: the
    documents, their lengths, and per term the (document position, count) pairs."""
    n, total, dfs, cut, names, lengths, columns = reply
    stats = IndexStats(int(n), int(total), {t: int(d) for t, d in zip(terms, dfs, strict=True)})
    tfs: list[dict[str, int]] = [{} for _ in names]
    for term, column in zip(terms, columns, strict=True):
        pairs = iter(column)
        for position, count in zip(pairs, pairs, strict=True):
            tfs[position - 1][term] = count
    docs = {
        _text(doc): (int(length) if length is not None else 0, tf)
        for doc, length, tf in zip(names, lengths, tfs, strict=True)
    }
    return IndexHits(stats, docs, not int(cut))


class RedisPostings:
    """The ``index_*`` methods of :class:`~tmy.store.redis.RedisStore` (see the module doc)."""

    prefix: str
    _op_px: str
    _op: Callable[[str], str]
    _io: Any
    _r: Any

    def _ix(self, ns: str) -> str:
        return f"{self.prefix}:ix:{{{check_ns(ns)}}}"

    def _ix_keys(self, ns: str) -> tuple[str, list[str]]:
        """(term key head, [meta, docs, lengths, order])."""
        base = self._ix(ns)
        return f"{base}:t:", [f"{base}:m", f"{base}:d", f"{base}:l", f"{base}:o"]

    def _ix_record(self, ns: str) -> str:
        """A new write record key, named like ordinary writes' (:meth:`_op`): this store's
        random base and counter. ``id(self)`` and a per-process counter repeated in another
        process (or a restart) at the same address, whose write was then taken for a resend
        of this one's and not applied."""
        return self._op(self._ix(ns))

    def _ix_script(self, name: str) -> Any:
        """The script ``name``, registered with the open client (no I/O: redis-py loads it
        at its first NOSCRIPT reply)."""
        scripts = self.__dict__.setdefault("_ix_scripts", {})
        client = self._r()
        if scripts.get("client") is not client:  # registered per open client
            scripts.clear()
            scripts["client"] = client
            scripts.update({k: client.register_script(v) for k, v in SCRIPTS.items()})
        return scripts[name]

    async def _ix_call(self, name: str, what: str, keys: list[str], args: list[Any]) -> Any:
        script = self._ix_script(name)
        async with self._io(what) as redis:
            return await script(keys=keys, args=args, client=redis)

    async def index_put(self, ns: str, docs: Sequence[IndexDoc]) -> None:
        """Add or replace ``docs`` in ``ns``: one recorded script (per 200 documents)."""
        docs = [check_doc(d) for d in docs]
        head, keys = self._ix_keys(ns)
        for start in range(0, len(docs), CHUNK):
            args: list[Any] = [self._op_px, head]
            for d in docs[start : start + CHUNK]:
                tf = {t: capped(c) for t, c in d.tf.items()}
                args += [d.doc, d.size, repr(float(d.order)), orjson.dumps(tf)]
            record = self._ix_record(ns)
            await self._ix_call("put", f"index_put {ns!r}", [*keys, record], args)

    async def index_remove(self, ns: str, docs: Sequence[str]) -> int:
        """Remove ``docs`` from ``ns`` (one recorded script); how many were there."""
        if not docs:
            return 0
        head, keys = self._ix_keys(ns)
        args = [self._op_px, head, *dict.fromkeys(docs)]
        record = self._ix_record(ns)
        return int(await self._ix_call("remove", f"index_remove {ns!r}", [*keys, record], args))

    async def index_order(self, ns: str, orders: Mapping[str, float]) -> None:
        """Set the order of the documents of ``orders`` that exist (one recorded script)."""
        if not orders:
            return
        _, keys = self._ix_keys(ns)
        args: list[Any] = [self._op_px]
        for doc, order in orders.items():
            args += [doc, repr(float(order))]
        await self._ix_call("order", f"index_order {ns!r}", [keys[3], self._ix_record(ns)], args)

    async def index_stats(self, ns: str, terms: Sequence[str] = ()) -> IndexStats:
        """Documents, total length and each term's document count (one script)."""
        terms = list(dict.fromkeys(terms))
        head, keys = self._ix_keys(ns)
        reply = await self._ix_call("stats", f"index_stats {ns!r}", [keys[0]], [head, *terms])
        n, total, *dfs = reply
        return IndexStats(int(n), int(total), {t: int(d) for t, d in zip(terms, dfs, strict=True)})

    async def index_search(
        self, ns: str, terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> IndexHits:
        """Candidates for ``terms`` (see :mod:`tmy.store.textindex`): one script."""
        (hits,) = await self._ix_search([ns], terms, budget, f"index_search {ns!r}")
        return hits

    async def index_search_many(
        self, namespaces: Sequence[str], terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> list[IndexHits]:
        """:meth:`index_search` of each namespace: one script for them all on one Redis (one
        round trip, one command); one script each on a cluster (their slots differ)."""
        if not namespaces:
            return []
        if not self._PIPELINED_WRITES:  # type: ignore[attr-defined]
            one = [self.index_search(n, terms, budget=budget) for n in namespaces]
            return list(await asyncio.gather(*one))
        what = f"index_search of {len(namespaces)} namespaces"
        return await self._ix_search(namespaces, terms, budget, what)

    async def _ix_search(
        self, namespaces: Sequence[str], terms: Sequence[str], budget: int, what: str
    ) -> list[IndexHits]:
        """The SEARCH script over ``namespaces`` (all in one slot, or on one Redis)."""
        terms = list(dict.fromkeys(terms))
        budget = max(1, int(budget))
        keys: list[str] = []
        heads: list[str] = []
        for ns in namespaces:
            head, (meta, _, lengths, _) = self._ix_keys(ns)
            keys += [meta, lengths]
            heads.append(head)
        args = [budget, budget * SCAN_FACTOR, len(namespaces), *heads, *terms]
        replies = await self._ix_call("search", what, keys, args)
        return [parse_hits(r, terms) for r in replies]

    async def index_lowest(
        self, ns: str, n: int, *, term: str | None = None
    ) -> list[tuple[str, float]]:
        """The ``n`` documents of lowest order (holding ``term``, if given), lowest first."""
        if n <= 0:
            return []
        head, keys = self._ix_keys(ns)
        args = [head, n, term or ""]
        flat = await self._ix_call("lowest", f"index_lowest {ns!r}", [keys[3]], args)
        return [(_text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]

    async def index_drop(self, ns: str) -> int:
        """Remove every document of ``ns`` (one script); how many there were."""
        head, keys = self._ix_keys(ns)
        return int(await self._ix_call("drop", f"index_drop {ns!r}", keys, [head]))

    # -- snapshots -------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """The values and boards as before (``super().snapshot``), then every index document
        (read per namespace after them: not one moment with the values)."""
        snap: Snapshot = await super().snapshot()  # type: ignore[misc]
        docs = await self.index_entries()
        if not docs:
            return snap
        entries = sorted([*snap.entries, *docs], key=lambda e: e[0])
        return Snapshot(entries, snap.ranks, False)

    async def restore(self, snapshot: Snapshot, *, replace: bool) -> int:
        """The plain entries as before, then the index documents (200 per script); with
        ``replace`` every namespace is dropped first."""
        plain, docs = split_entries(snapshot.entries)  # checked before anything is written
        real = Snapshot(plain, snapshot.ranks, snapshot.point_in_time)
        count: int = await super().restore(real, replace=replace)  # type: ignore[misc]
        if replace:
            await self.index_wipe()
        for ns, items in docs.items():
            await self.index_put(ns, items)
            count += len(items)
        return count

    async def _ix_namespaces(self) -> list[str]:
        """Every namespace with documents (SCAN of the document hashes)."""
        head = f"{self.prefix}:ix:{{"
        found = await self._scan(f"{glob_escape(head)}*}}:d", "index scan")  # type: ignore[attr-defined]
        names = [_text(k)[len(head) : -3] for k in found]
        return sorted(n for n in names if n)

    async def index_entries(self) -> list[tuple[str, Any, None]]:
        """Every document as a snapshot pseudo-entry (per namespace: one HGETALL each of
        its documents and lengths, one ZRANGE of its orders)."""
        out: list[tuple[str, Any, None]] = []
        for ns in await self._ix_namespaces():
            _, keys = self._ix_keys(ns)
            async with self._io(f"snapshot of index {ns!r}") as redis:
                pipe = redis.pipeline(transaction=True)
                pipe.hgetall(keys[1])
                pipe.hgetall(keys[2])
                pipe.zrange(keys[3], 0, -1, withscores=True)
                tfs, lens, orders = await pipe.execute()
            order = {_text(d): float(o) for d, o in orders}
            for raw_doc, raw_tf in tfs.items():
                doc = _text(raw_doc)
                length = int(lens.get(raw_doc, 0))
                indexed = IndexDoc(doc, orjson.loads(raw_tf), length, order.get(doc, 0.0))
                out.append(doc_entry(ns, indexed))
        return out

    async def index_wipe(self) -> None:
        """Drop every namespace (a replacing restore)."""
        for ns in await self._ix_namespaces():
            await self.index_drop(ns)
