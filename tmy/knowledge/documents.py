"""A base's documents in the store: write one's chunks, remove one, drop a base, list them.

Where each piece lives is :mod:`tmy.knowledge.layout`. A document's chunks are
replaced in place: the new chunk keys (and vectors) are written, then the
index documents (each chunk's text tokenised once, here, by memory's tokeniser
:func:`tmy.memory.scoring.counts`: BM25 over words and CJK n-grams), then the
chunks past the new count are removed; the document record is written last, so
a crash midway leaves a record whose fingerprint does not match and the next
ingestion writes the document again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
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


async def write_chunks(
    store: Store,
    base: str,
    doc: str,
    source: str,
    chunks: Sequence[Chunk],
    vectors: Sequence[Sequence[float]] | None,
    old_count: int,
) -> None:
    """Make ``doc``'s chunks ``chunks`` (with ``vectors`` when given), where it had
    ``old_count``: keys, vectors and index documents written, the ones past the end removed."""
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
    ns = layout.namespace(base)
    docs = await asyncio.to_thread(_index_docs, doc, chunks)  # seconds for a big CJK file
    for batch in batched(docs):
        await store.index_put(ns, batch)
    if old_count > len(chunks):
        await _remove_chunks(store, base, doc, range(len(chunks), old_count))


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
