"""Finding the chunks that answer a question: BM25 over the index, vectors fused by rank.

**Lexical.** The query's terms (memory's tokeniser: words and CJK n-grams,
:func:`tmy.memory.search.query_terms`) are looked up in every searched base's
index namespace at once (``index_search_many``: one read transaction on
SQLite, one round trip on Redis); the candidates are scored together, as one
collection, by :func:`tmy.memory.scoring.relevance` — BM25 normalised into a
**relevance** from 0 to 1 (the share of the query's weight a chunk matches).

**Hybrid** (a base with ``embeddings:``). The query is embedded once per
embedding model; the vectors of the :data:`LEXICAL_CANDIDATES` best lexical
candidates — and, while the searched bases' vectors hold at most
:data:`DENSE_SCAN_FLOATS` numbers in all (chunks × the query vector's
dimensions), of every chunk, so a question sharing no word with its answer
still finds it — are read and compared by cosine similarity. Chunks under the
model's ``min_similarity`` are not ranked by vector. The two rankings are fused
by reciprocal rank fusion (k = 60).

**The score** a passage is ranked by, and ``min_score`` compares with:

* lexical: the relevance (0 to 1);
* hybrid: the fused RRF score scaled to 0 to 1 — ``(1/(60 + lexical rank) +
  1/(60 + vector rank)) × 61 / 2``: 1 for the first of both rankings, about
  0.5 for the first of one ranking only.

``why`` carries the parts: ``relevance``, ``bm25``, ``lexical_rank``, the
``matched`` terms, and with vectors ``vector`` (the cosine), ``vector_rank``
and ``rrf``. Only the chosen chunks are read from the store; together they hold at most
:data:`MAX_PASSAGE_CHARS` characters (the rest of ``top`` is dropped).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tmy.errors import TmyError
from tmy.knowledge import layout
from tmy.knowledge.embedding import Embedder, normalised, similarity, unpack
from tmy.llm.knowledge import Passage
from tmy.logs import get_logger
from tmy.memory import scoring
from tmy.memory.search import query_terms
from tmy.store.base import Store

log = get_logger("tmy.knowledge")

RRF_K = 60
LEXICAL_CANDIDATES = 50
"""The best lexical candidates that are ranked by vector too (and fused)."""
DENSE_SCAN_FLOATS = 250_000
"""With embeddings, bases whose vectors hold at most this many numbers in all (each base's
chunks × its query vector's dimensions) have every chunk compared by vector; past it, only
the lexical candidates are. A budget of floats, not chunks, because decoding and multiplying
them in Python is the cost: ~10 ms per 250,000 on a 2-core VM, plus reading them (955
chunks of 1,536 dimensions took 79 ms p50 a search). So 1,536-dimension vectors are
scanned up to ~160 chunks, 64-dimension ones up to ~3,900."""
SEARCH_BUDGET = 1_000
"""Postings the index reads per term (``index_search``'s budget): chunks are longer than
memory entries, so their common words are commoner."""
MATCHED_SHOWN = 8
QUERY_EMBED_CHARS = 2_000
"""The question's characters that are embedded: a 20,000-character message would cost (and,
past an embeddings model's input limit of ~8,000 tokens, fail) every hybrid search."""
MAX_PASSAGE_CHARS = 40_000
"""The passages a search returns hold at most this many characters together (the first is
always returned; a chunk is at most 20,000): ``top: 50`` of 20,000-character chunks must not
put a million characters into the request's tail (and the history that keeps it)."""


@dataclass(slots=True)
class Candidate:
    """One chunk in the running: its base and index id, and how it ranks."""

    base: str
    doc: str
    relevance: float = 0.0
    bm25: float = 0.0
    lexical_rank: int | None = None
    vector: float | None = None
    vector_rank: int | None = None
    score: float = 0.0
    matched: tuple[str, ...] = ()
    notes: dict[str, Any] = field(default_factory=dict)

    def why(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "relevance": round(self.relevance, 4),
            "bm25": round(self.bm25, 4),
            "lexical_rank": self.lexical_rank,
        }
        if self.matched:
            out["matched"] = list(self.matched[:MATCHED_SHOWN])
        if self.vector is not None:
            out["vector"] = round(self.vector, 4)
        if self.vector_rank is not None or self.vector is not None:
            out["vector_rank"] = self.vector_rank
            out["rrf"] = round(scoring.rrf([self.lexical_rank, self.vector_rank], RRF_K), 6)
        out.update(self.notes)
        return out


Key = tuple[str, str]


async def _lexical(
    store: Store, bases: Sequence[str], query: str
) -> tuple[dict[Key, Candidate], dict[str, int], dict[str, float], Any]:
    """Candidates by (base, index id) with their relevance, each base's chunk count, the
    query terms, and what scores them (for the matched terms of the chosen few)."""
    terms = query_terms(query)
    names = list(terms)
    hits = await store.index_search_many(
        [layout.namespace(b) for b in bases], names, budget=SEARCH_BUDGET
    )
    n = total = 0
    df = dict.fromkeys(names, 0)
    docs: dict[Key, tuple[int, Mapping[str, int]]] = {}
    sizes: dict[str, int] = {}
    for base, hit in zip(bases, hits, strict=True):
        sizes[base] = hit.stats.n
        n, total = n + hit.stats.n, total + hit.stats.total
        for t in names:
            df[t] += hit.stats.df.get(t, 0)
        for doc, counts in hit.docs.items():
            docs[base, doc] = counts
    found: dict[Key, Candidate] = {}
    if terms and docs:
        matches = scoring.relevance(terms, docs, n, total, df, detail=0)
        ranked = sorted((k for k in matches if matches[k].relevance > 0),
                        key=lambda k: (-matches[k].relevance, -matches[k].bm25, k))  # fmt: skip
        for rank, key in enumerate(ranked, 1):
            m = matches[key]
            found[key] = Candidate(key[0], key[1], m.relevance, m.bm25, rank, score=m.relevance)
    return found, sizes, terms, (docs, n, total, df)


async def _dense_pool(
    store: Store,
    found: dict[Key, Candidate],
    sizes: Mapping[str, int],
    dims: Mapping[str, int],
) -> list[Key]:
    """The chunks to compare by vector: the best lexical ones, and every chunk of the bases
    ``dims`` (base → its query vector's dimensions) when they hold few enough numbers."""
    best = sorted(found.values(), key=lambda c: c.lexical_rank or 0)[:LEXICAL_CANDIDATES]
    pool = [(c.base, c.doc) for c in best]
    if sum(sizes[b] * dims[b] for b in dims) <= DENSE_SCAN_FLOATS:
        seen = set(pool)
        for base in dims:
            for doc, _ in await store.index_lowest(layout.namespace(base), sizes[base]):
                if (base, doc) not in seen:
                    seen.add((base, doc))
                    pool.append((base, doc))
    return pool


async def _vectors(
    store: Store,
    query: str,
    found: dict[Key, Candidate],
    sizes: Mapping[str, int],
    embedders: Mapping[str, Embedder],
) -> None:
    """Rank the pool by cosine with the query (one query vector per embedding model) and fuse."""
    bases = [b for b in sizes if b in embedders and sizes[b]]
    if not bases:
        return
    queries: dict[str, array[float]] = {}  # embedded first: the dense scan's cost is in floats
    for base in bases:
        embedder = embedders[base]
        if embedder.identity not in queries:
            (vector,) = await embedder.embed([query[:QUERY_EMBED_CHARS]])
            queries[embedder.identity] = normalised(vector)
    dims = {b: len(queries[embedders[b].identity]) for b in bases}
    pool = await _dense_pool(store, found, sizes, dims)
    keys = []
    for base, doc in pool:
        parsed = layout.parse_index_id(doc)
        if parsed is not None:
            keys.append(((base, doc), layout.vector_key(base, *parsed)))
    values = await store.get_many([k for _, k in keys]) if keys else []
    similar: list[tuple[float, Key]] = []
    for (key, _), value in zip(keys, values, strict=True):
        vector = unpack(value)
        if vector is None:
            continue
        embedder = embedders[key[0]]
        cos = similarity(queries[embedder.identity], vector)
        if key in found:
            found[key].vector = cos
        if cos >= embedder.min_similarity:
            similar.append((cos, key))
    similar.sort(key=lambda s: (-s[0], s[1]))
    for rank, (cos, key) in enumerate(similar, 1):
        cand = found.setdefault(key, Candidate(key[0], key[1]))
        cand.vector, cand.vector_rank = cos, rank
    for cand in found.values():
        fused = scoring.rrf([cand.lexical_rank, cand.vector_rank], RRF_K)
        cand.score = fused * (RRF_K + 1) / 2


async def search(
    store: Store,
    bases: Sequence[str],
    query: str,
    *,
    top: int = 4,
    min_score: float | None = None,
    embedders: Mapping[str, Embedder] | None = None,
) -> list[Passage]:
    """The ``top`` best chunks of ``bases`` for ``query`` (none under ``min_score``), best
    first. ``embedders``: base name → :class:`~tmy.knowledge.ingest.Embedder` of the bases
    searched by vector too (hybrid). A failing embedder leaves the search lexical (``why``
    says so); a store failure raises StoreError."""
    bases = list(dict.fromkeys(bases))
    found, sizes, terms, scored = await _lexical(store, bases, query)
    note: dict[str, Any] = {}
    if embedders:
        try:
            await _vectors(store, query, found, sizes, embedders)
        except TmyError as exc:
            log.warning("knowledge.embedding_failed", bases=bases, error=str(exc))
            note = {"vector_error": str(exc)}
    floor = -1.0 if min_score is None else min_score
    ranked = sorted(
        (c for c in found.values() if c.score > 0 and c.score >= floor),
        key=lambda c: (-c.score, c.lexical_rank or 10**9, c.base, c.doc),
    )
    return await _read(store, ranked, top, terms, scored, note)


async def _read(
    store: Store,
    ranked: list[Candidate],
    top: int,
    terms: dict[str, float],
    scored: Any,
    note: dict[str, Any],
) -> list[Passage]:
    """The passages of the best ``top`` of ``ranked`` whose chunks are still there, within
    :data:`MAX_PASSAGE_CHARS`."""
    out: list[Passage] = []
    at = chars = 0
    while len(out) < top and at < len(ranked):
        batch = ranked[at : at + (top - len(out)) + 2]
        at += len(batch)
        keys = []
        for c in batch:
            doc, n = layout.parse_index_id(c.doc) or (c.doc, -1)
            keys.append(layout.chunk_key(c.base, doc, n))
        values = await store.get_many(keys)
        docs, n_docs, total, df = scored
        sub = {(c.base, c.doc): docs[c.base, c.doc] for c in batch if (c.base, c.doc) in docs}
        matched = scoring.relevance(terms, sub, n_docs, total, df) if sub and terms else {}
        for c, value in zip(batch, values, strict=True):
            if not isinstance(value, dict) or "text" not in value or len(out) >= top:
                continue
            size = len(str(value["text"]))
            if out and chars + size > MAX_PASSAGE_CHARS:
                return out  # the budget is spent: the next ones are worse anyway
            chars += size
            if (c.base, c.doc) in matched:
                c.matched = matched[c.base, c.doc].matched
            c.notes.update(note)
            source, position = str(value.get("source", "")), str(value.get("position", ""))
            text = str(value["text"])
            out.append(Passage(c.base, source, position, text, round(c.score, 6), c.why()))
    return out
