"""The retrieval benchmark's measurements (``bench/retrieval.py`` runs and prints them).

:func:`recall_part` asks the questions of a small corpus of both bases (lexical and
hybrid) and of the brute-force floor; :func:`scale_part` ingests a corpus of at least
``--chunks`` chunks into one store and times ingestion and searches against their floors.
Every passage is checked to be a stored chunk of a corpus file (:class:`Failed` else).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common
import retrieval_data as data

from tmy.knowledge import knowledge_of, parse
from tmy.knowledge.bases import KnowledgeBases
from tmy.knowledge.chunking import chunk_sections
from tmy.knowledge.config import ChunkConfig
from tmy.knowledge.readers import read_sections
from tmy.llm.knowledge import KnowledgeSpec, Passage
from tmy.memory import scoring
from tmy.memory.search import query_terms
from tmy.store.base import Store
from tmy.testing import Bot

RULES = {"r.yaml": "rules: []"}
TOP = 4
EMB = {"model": "emb", "id": "hashgram", "min_similarity": 0.2}


class Failed(Exception):
    """A check failed: the run exits 1."""


def write_corpus(folder: Path, docs: Sequence[data.Document]) -> int:
    """The documents as files under ``folder``; the bytes written."""
    size = 0
    for doc in docs:
        path = folder / doc.path
        path.parent.mkdir(parents=True, exist_ok=True)
        size += path.write_text(doc.text, encoding="utf-8")
    return size


def corpus_for(chunks: int) -> tuple[list[data.Document], int]:
    """The first documents whose chunks (as ingestion cuts them) reach ``chunks``."""
    cfg, used, docs, total = ChunkConfig(), set(), [], 0
    while total < chunks:
        doc = data.document(len(docs), used)
        docs.append(doc)
        total += len(chunk_sections(read_sections(doc.path, doc.text.encode()), cfg))
    return docs, total


def bot(store: str, folder: Path, port: int, hybrid: str | None = None) -> Bot:
    """The app with base ``lex`` over ``folder`` (and ``hybrid``, the same with embeddings)."""
    raw: dict[str, Any] = {"lex": {"paths": [str(folder)], "watch": False}}
    if hybrid:
        raw[hybrid] = {"paths": [str(folder)], "watch": False, "embeddings": EMB}
    llm = {"models": {"emb": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "emb"}}}
    return Bot(RULES, store=store, llm=llm, sections={"knowledge": parse(raw)})


async def chunks_of(store: Store, base: str) -> dict[str, dict[str, Any]]:
    """Every chunk of ``base``: key → value (source, position, text…)."""
    keys = await store.keys(f"kb/{base}/c/")
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(keys), 500):
        batch = keys[start : start + 500]
        out.update(zip(batch, await store.get_many(batch), strict=True))
    return out


async def ingest(kb: KnowledgeBases, base: str, files: int) -> tuple[float, int]:
    """Ingest ``base``; (seconds, chunks written). Every file must be added."""
    t0 = time.perf_counter()
    report = await kb.ingest(base)
    took = time.perf_counter() - t0
    if report.skipped or len(report.added) != files:
        raise Failed(f"{base}: {len(report.added)} of {files} added, skipped {report.skipped}")
    return took, report.chunks


def covered(qs: Sequence[data.Question], chunks: dict[str, dict[str, Any]]) -> None:
    """Every question's fact is whole in some chunk of its document."""
    by_source: dict[str, list[str]] = {}
    for value in chunks.values():
        by_source.setdefault(value["source"], []).append(value["text"])
    for q in qs:
        if not any(q.fact in text for text in by_source.get(q.path, [])):
            raise Failed(f"{q.path}: no chunk holds {q.fact!r} (the chunking cut it)")


def rank_of(q: data.Question, found: Sequence[tuple[str, str]]) -> int | None:
    """The 1-based rank of the first (source, text) that answers ``q``, or None."""
    for rank, (source, text) in enumerate(found, 1):
        if source == q.path and q.fact in text:
            return rank
    return None


def checked(passages: list[Passage], texts: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The passages as (source, text), each a stored chunk, at most TOP of them."""
    if len(passages) > TOP:
        raise Failed(f"{len(passages)} passages for top {TOP}")
    out = [(p.source, p.text) for p in passages]
    for item in out:
        if item not in texts:
            raise Failed(f"a passage that is no stored chunk: {item[0]} {item[1][:60]!r}")
    return out


class BruteForce:
    """The floor: Okapi BM25 over every chunk in memory, no index — memory's tokeniser and
    scoring, ranked by the raw score (tmy ranks by the relevance, which saturates at 1)."""

    def __init__(self, chunks: dict[str, dict[str, Any]]) -> None:
        self.items = [(v["source"], v["text"]) for v in chunks.values()]
        self.counts = [scoring.counts(text) for _, text in self.items]
        self.lengths = [sum(c.values()) for c in self.counts]
        self.total = sum(self.lengths)

    def search(self, query: str) -> list[tuple[str, str]]:
        terms = query_terms(query)
        df = {t: sum(1 for c in self.counts if t in c) for t in terms}
        docs = {i: (n, c) for i, (n, c) in enumerate(zip(self.lengths, self.counts, strict=True))}
        scored = scoring.relevance(terms, docs, len(docs), self.total, df)
        best = sorted((i for i in scored if scored[i].bm25 > 0),
                      key=lambda i: -scored[i].bm25)[:TOP]  # fmt: skip
        return [self.items[i] for i in best]


def summary(ranks: Sequence[int | None], qs: Sequence[data.Question]) -> dict[str, Any]:
    """Recall@4 (answered/asked), by language and by wording; recall@1; MRR; the misses."""
    pairs = list(zip(ranks, qs, strict=True))

    def share(keep: Any) -> str:
        chosen = [r for r, q in pairs if keep(q)]
        return f"{sum(r is not None for r in chosen)}/{len(chosen)}"

    return {
        "recall_at_4": share(lambda q: True),
        "recall_at_1": f"{sum(r == 1 for r in ranks)}/{len(qs)}",
        "mrr": round(sum(1 / r for r in ranks if r) / len(qs), 3),
        "by_language": {lang: share(lambda q, x=lang: q.lang == x) for lang in ("en", "zh")},
        "by_wording": {w: share(lambda q, x=w: q.wording == x) for w in data.WORDINGS},
        "missed": [q.text for r, q in pairs if r is None],
    }


async def recall_part(tmp: Path, port: int, n_docs: int, n_q: int, run: int) -> dict[str, Any]:
    """Both bases and the floor asked every question, the corpus in folder ``recall-<run>``
    (a chunk's id hashes its file's path, and ties in rank are broken by id: another
    folder, another order among equals)."""
    docs = data.corpus(n_docs)
    qs = data.questions(docs, n_q)
    data.check(docs, qs)
    folder = tmp / f"recall-{run}"
    size = write_corpus(folder, docs)
    async with bot(f"sqlite:///{tmp / f'recall-{run}.db'}", folder, port, hybrid="hyb") as app:
        services = app.engine.services
        kb = knowledge_of(services)
        lex_s, n_chunks = await ingest(kb, "lex", len(docs))
        hyb_s, _ = await ingest(kb, "hyb", len(docs))
        chunks = await chunks_of(services.store, "lex")
        covered(qs, chunks)
        texts = {(v["source"], v["text"]) for v in chunks.values()}
        out: dict[str, Any] = {
            "documents": len(docs),
            "bytes": size,
            "chunks": n_chunks,
            "questions": len(qs),
            "ingest_s": {"lexical": round(lex_s, 2), "hybrid": round(hyb_s, 2)},
        }
        for mode, base in (("lexical", "lex"), ("hybrid", "hyb")):
            spec = KnowledgeSpec((base,), top=TOP)
            ranks = []
            for q in qs:
                found = checked(await kb.search(services, spec, q.text), texts)
                ranks.append(rank_of(q, found))
            out[mode] = summary(ranks, qs)
        floor = BruteForce(chunks)
        out["brute_force_bm25"] = summary([rank_of(q, floor.search(q.text)) for q in qs], qs)
    return out


def latency(samples: Sequence[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "p50_ms": round(common.percentile(s, 50) * 1000, 3),
        "p99_ms": round(common.percentile(s, 99) * 1000, 3),
        "mean_ms": round(statistics.fmean(s) * 1000, 3),
    }


async def timed_searches(
    kb: KnowledgeBases, services: Any, base: str, qs: Sequence[data.Question], repeat: int,
    texts: set[tuple[str, str]],
) -> tuple[list[float], list[list[tuple[str, str]]]]:  # fmt: skip
    """Wall seconds of each search (``repeat`` rounds, after one warm-up search) and the
    passages of the first round."""
    spec = KnowledgeSpec((base,), top=TOP)
    await kb.search(services, spec, qs[0].text)
    samples, first = [], []
    for round_ in range(repeat):
        for q in qs:
            t0 = time.perf_counter()
            passages = await kb.search(services, spec, q.text)
            samples.append(time.perf_counter() - t0)
            if round_ == 0:
                first.append(checked(passages, texts))
    return samples, first


async def floor_writes(store: Store, chunks: dict[str, dict[str, Any]]) -> float:
    """Seconds to write the same chunk values with plain ``store.set``, 64 at a time."""
    items = [(f"benchfloor/{k}", v) for k, v in chunks.items()]
    t0 = time.perf_counter()
    for start in range(0, len(items), 64):
        await asyncio.gather(*(store.set(k, v) for k, v in items[start : start + 64]))
    return time.perf_counter() - t0


async def floor_reads(
    store: Store, found: Sequence[Sequence[tuple[str, str]]], key_of: dict[tuple[str, str], str],
    repeat: int,
) -> list[float]:  # fmt: skip
    """Wall seconds of ``get_many`` of each question's found chunk keys (4 each)."""
    samples = []
    for _ in range(repeat):
        for passages in found:
            keys = [key_of[p] for p in passages]
            t0 = time.perf_counter()
            values = await store.get_many(keys)
            samples.append(time.perf_counter() - t0)
            if not all(isinstance(v, dict) and "text" in v for v in values):
                raise Failed(f"get_many({keys}) did not give the chunks back")
    return samples


async def scale_part(
    kind: str, url: str, folder: Path, docs: Sequence[data.Document], port: int,
    repeat: int, hybrid: bool, brute: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    qs = data.questions(list(docs))
    async with bot(url, folder, port, hybrid="hyb" if hybrid else None) as app:
        services = app.engine.services
        store = services.store
        kb = knowledge_of(services)
        ingest_s, n_chunks = await ingest(kb, "lex", len(docs))
        t0 = time.perf_counter()
        again = await kb.ingest("lex")
        again_s = time.perf_counter() - t0
        if again.changed or again.chunks or len(again.unchanged) != len(docs):
            raise Failed(f"{kind}: a second ingest changed something: {again.summary()}")
        chunks = await chunks_of(store, "lex")
        texts = {(v["source"], v["text"]) for v in chunks.values()}
        key_of = {(v["source"], v["text"]): k for k, v in chunks.items()}
        floor_s = await floor_writes(store, chunks)
        samples, found = await timed_searches(kb, services, "lex", qs, repeat, texts)
        reads = await floor_reads(store, found, key_of, repeat)
        if "searcher" not in brute:  # in memory: the same on every store, measured once
            brute["searcher"] = BruteForce(chunks)
            brute_samples, ranks = [], []
            for q in qs:
                t0 = time.perf_counter()
                best = brute["searcher"].search(q.text)
                brute_samples.append(time.perf_counter() - t0)
                ranks.append(rank_of(q, best))
            brute["latency"] = latency(brute_samples)
            brute["recall_at_4"] = summary(ranks, qs)["recall_at_4"]
        lex = latency(samples)
        row: dict[str, Any] = {
            "store": kind, "documents": len(docs), "chunks": n_chunks,
            "ingest_s": round(ingest_s, 2), "floor_set_s": round(floor_s, 2),
            "ingest_ratio": round(ingest_s / floor_s, 2), "reingest_unchanged_s": round(again_s, 3),
            "lexical": lex, "floor_get4": latency(reads), "floor_brute_force": brute["latency"],
            "recall_at_4_brute_force": brute["recall_at_4"],
            "lexical_vs_get4_p50": round(lex["p50_ms"] / latency(reads)["p50_ms"], 1),
            "lexical_vs_brute_force_p50": round(lex["p50_ms"] / brute["latency"]["p50_ms"], 3),
            "recall_at_4_lexical": summary([rank_of(q, f) for q, f in zip(qs, found, strict=True)],
                                           qs)["recall_at_4"],
            "top4": [[f"{s}|{t[:40]}" for s, t in f] for f in found],
        }  # fmt: skip
        if n_chunks < len(chunks) or len(chunks) < brute["target"]:
            raise Failed(f"{kind}: {len(chunks)} chunks, fewer than {brute['target']}")
        if hybrid:
            row["ingest_hybrid_s"], _ = await ingest(kb, "hyb", len(docs))
            hyb_samples, hyb_found = await timed_searches(kb, services, "hyb", qs, repeat, texts)
            row["hybrid"] = latency(hyb_samples)
            ranks = [rank_of(q, f) for q, f in zip(qs, hyb_found, strict=True)]
            row["recall_at_4_hybrid"] = summary(ranks, qs)["recall_at_4"]
    return row
