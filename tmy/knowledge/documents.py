"""A base's documents in the store: write their chunks, remove one, drop a base, list them.

Where each piece lives is :mod:`tmy.knowledge.layout`. A document's chunks are
replaced in place: the new chunk keys (and vectors) are written, then the
index documents (each chunk's text tokenised once, here, by memory's tokeniser
:func:`tmy.memory.scoring.counts`: BM25 over words and CJK n-grams), then the
chunks past the new count are removed; the document record is written last, so
a crash midway leaves a record whose fingerprint does not match and the next
ingestion writes the document again.

An ingestion of many files writes the index documents of several documents in
one ``index_put`` (a :class:`Batch` of up to :data:`INDEX_BATCH` chunks): on
SQLite each ``index_put`` is a transaction touching pages all over the postings
B-tree, so one per document made ingesting 97× as slow as writing the chunks.
The order holds per batch: every document's chunks, then the batch's index
documents, then the tails removed, then the batch's records — a record only
says "ingested" once its index documents are written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tmy.knowledge import layout
from tmy.knowledge.chunking import Chunk
from tmy.knowledge.embedding import pack
from tmy.memory import scoring
from tmy.store.base import MISSING, Store
from tmy.store.textindex import IndexDoc, batched

WRITE_BATCH = 64
"""Keys deleted at once: one gather of this many ``delete`` calls."""
COMMIT_BATCH = 256
"""Keys written by one ``commit`` (a chunk with its vector is two)."""
INDEX_BATCH = 128
"""Chunks of several documents whose index documents one ``index_put`` writes (a
:class:`Batch` is written once it holds this many; a larger document goes alone, in
``index_put`` calls of :func:`tmy.store.textindex.batched`'s 500). 10,005 chunks of ~6
per document took 36 s on SQLite one document per call, 21.6 s at 128, 19 s at 256: not
more, because one SQLite ``index_put`` holds the writer — and the event loop, which runs
it — ~1.6 ms per chunk (0.2 s at 128)."""


async def write_all(store: Store, writes: Sequence[tuple[str, Any, float | None]]) -> None:
    """Write ``writes`` (key, value or MISSING, ttl) in batches: one ``commit`` (one
    transaction / script) per batch, or — on a Redis Cluster, where a commit holds one
    hash slot — one ``set`` / ``delete`` each, gathered."""
    for start in range(0, len(writes), COMMIT_BATCH):
        batch = writes[start : start + COMMIT_BATCH]
        if not store.one_slot_commits:
            await store.commit(batch)
            continue
        await asyncio.gather(
            *(store.delete(k) if v is MISSING else store.set(k, v) for k, v, _ in batch)
        )


async def _each(calls: Sequence[Any]) -> None:
    for start in range(0, len(calls), WRITE_BATCH):
        await asyncio.gather(*calls[start : start + WRITE_BATCH])


async def write_values(
    store: Store,
    base: str,
    doc: str,
    source: str,
    chunks: Sequence[Chunk],
    vectors: Sequence[Sequence[float]] | None,
    old_count: int,
) -> None:
    """Write ``doc``'s chunk keys (and vectors when given; else remove the ``old_count``
    vectors of an older version): the first step of replacing its chunks."""
    writes: list[tuple[str, Any, float | None]] = []
    for n, chunk in enumerate(chunks):
        value = {
            "source": source,
            "position": chunk.position,
            "text": chunk.text,
            "hash": layout.text_hash(chunk.text),
            "doc": doc,
            "n": n,
        }
        writes.append((layout.chunk_key(base, doc, n), value, None))
        if vectors is not None:
            writes.append((layout.vector_key(base, doc, n), pack(vectors[n]), None))
    if vectors is None:  # vectors of an older version of the document are no longer true
        writes += [(layout.vector_key(base, doc, n), MISSING, None) for n in range(old_count)]
    await write_all(store, writes)


@dataclass(slots=True)
class Staged:
    """A document of a :class:`Batch`: its chunk keys written, the rest to come."""

    doc: str
    index: list[IndexDoc]  # its chunks' index documents
    tail: range  # chunk numbers past its new end (removed once the index is written)
    record: dict[str, Any]  # its record, written last
    replaced: bool  # it had a record before (else it is added)


class Batch:
    """Several documents' chunks replaced with one ``index_put`` (see the module docstring).

    :meth:`add` writes a document's chunk keys and vectors at once and holds its index
    documents and record; once the batch holds :data:`INDEX_BATCH` chunks (and at the end:
    :meth:`flush`) their index documents are put together, the tails removed and the
    records written. A crash before that leaves the documents' records as they were
    (stale, or the reservation :class:`~tmy.knowledge.ingest` writes first), so the next
    ingestion writes them again; ``index_put`` replaces, so nothing is doubled."""

    def __init__(self, store: Store, base: str, limit: int = INDEX_BATCH) -> None:
        self.store, self.base, self.limit = store, base, limit
        self.staged: list[Staged] = []
        self.size = 0

    async def add(
        self,
        record: dict[str, Any],
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]] | None,
        old_count: int,
        replaced: bool,
    ) -> list[Staged]:
        """Stage the document of ``record`` (its ``id``, ``source``); the documents
        written by this call (this one and those before it, when the batch is full)."""
        doc, source = str(record["id"]), str(record["source"])
        await write_values(self.store, self.base, doc, source, chunks, vectors, old_count)
        index = await asyncio.to_thread(_index_docs, doc, chunks)  # seconds for a big CJK file
        self.staged.append(Staged(doc, index, range(len(chunks), old_count), record, replaced))
        self.size += len(index)
        return await self.flush() if self.size >= self.limit else []

    async def flush(self) -> list[Staged]:
        """Write the staged documents' index documents, tails and records; those documents."""
        staged, self.staged, self.size = self.staged, [], 0
        if not staged:
            return []
        docs = [d for s in staged for d in s.index]
        for batch in batched(docs):
            await self.store.index_put(layout.namespace(self.base), batch)
        for s in staged:
            if s.tail:
                await _remove_chunks(self.store, self.base, s.doc, s.tail)
        records = [(layout.doc_key(self.base, s.doc), s.record, None) for s in staged]
        await write_all(self.store, records)
        return staged


def _index_docs(doc: str, chunks: Sequence[Chunk]) -> list[IndexDoc]:
    """The chunks' index documents: each text tokenised (a worker thread runs this: 2,000
    chunks of Chinese text take seconds the event loop must not lose)."""
    return [IndexDoc(layout.index_id(doc, n), scoring.counts(c.text)) for n, c in enumerate(chunks)]


async def _remove_chunks(store: Store, base: str, doc: str, numbers: Sequence[int]) -> None:
    ids = [layout.index_id(doc, n) for n in numbers]
    for start in range(0, len(ids), 500):
        await store.index_remove(layout.namespace(base), ids[start : start + 500])
    deletes = [store.delete(layout.chunk_key(base, doc, n)) for n in numbers]
    deletes += [store.delete(layout.vector_key(base, doc, n)) for n in numbers]
    await _each(deletes)


def extent(record: Mapping[str, Any] | None) -> int:
    """How many chunk slots a document may occupy: its chunks, or the ``reserved`` count a
    write that grew it noted first (a crash in the middle leaves no chunk unaccounted for)."""
    if not record:
        return 0
    return max(int(record.get("chunks") or 0), int(record.get("reserved") or 0))


async def remove_document(store: Store, base: str, record: Mapping[str, Any]) -> None:
    """Remove a document: its chunks from the index and the store, then its record."""
    await _remove_chunks(store, base, str(record["id"]), range(extent(record)))
    await store.delete(layout.doc_key(base, str(record["id"])))


async def documents(store: Store, base: str) -> dict[str, dict[str, Any]]:
    """The base's document records by id."""
    keys = await store.keys(layout.doc_prefix(base))
    values = await store.get_many(keys) if keys else []
    out = {}
    for key, value in zip(keys, values, strict=True):
        if isinstance(value, dict) and value.get("id") == key.rpartition("/")[2]:
            out[value["id"]] = value
    return out


async def note_base(store: Store, base: str) -> None:
    """Name ``base`` in the list of bases (once: a base already named costs one read)."""
    found = await store.get(layout.BASES_KEY)
    if isinstance(found, dict) and base in found:
        return

    def add(current: Any) -> tuple[Any, None]:
        found = current if isinstance(current, dict) else {}
        if base not in found:
            found[base] = {"created": time.time()}
        return found, None

    await store.update(layout.BASES_KEY, add)


async def base_names(store: Store) -> list[str]:
    """Every base that holds (or held, until dropped) documents, sorted."""
    found = await store.get(layout.BASES_KEY)
    return sorted(found) if isinstance(found, dict) else []


async def drop_base(store: Store, base: str) -> int:
    """Remove the whole base: its index namespace, every key, its name; the documents gone."""
    gone = len(await documents(store, base))
    await store.index_drop(layout.namespace(base))
    keys = await store.keys(layout.base_prefix(base))
    await _each([store.delete(key) for key in keys])

    def remove(current: Any) -> tuple[Any, None]:
        if not isinstance(current, dict) or base not in current:
            return current, None
        current.pop(base)
        return (current or MISSING), None

    await store.update(layout.BASES_KEY, remove)
    return gone
