"""Knowledge-base retrieval: recall@4 lexical and hybrid; ingest and search at 10,000 chunks.

Documents come from ``bench/retrieval_data.py`` (deterministic, English and Chinese,
Markdown, text and HTML), written as files into a temporary folder; everything runs
through the real app (:class:`tmy.testing.Bot` with a ``knowledge:`` section):
``KnowledgeBases.ingest``, which ``kb add``/``rebuild`` and the daemon's watcher call, and
``KnowledgeBases.search``, which an LLM step's ``knowledge:`` and ``kb search`` call.
Embeddings come from ``bench/retrieval_embed.py``: an OpenAI-compatible
``POST /v1/embeddings`` on loopback (hashed character n-grams, ``--dim`` 1,536 like
text-embedding-3-small's, in its own process),
configured as the ``llm.models`` entry ``emb`` that the hybrid base's ``embeddings:`` names.
The measurements are in ``bench/retrieval_parts.py``.

1. **Recall** (SQLite): ``--docs`` documents (240, about 1,500 chunks) and 100 questions
   (50 English, 50 Chinese), each answered by one fact of one document and worded
   differently from it. Two bases over the same folder, ``lex`` (lexical) and ``hyb``
   (with ``embeddings:``), are ingested and asked every question, top 4. A question is
   answered at rank r when the r-th passage comes from its document and holds the fact's
   value. Floor: an exact brute-force BM25 over the same chunks (memory's tokeniser and
   scoring, every chunk scored, no index): what the index's bounded reads may lose.
2. **Scale** (SQLite, then Redis): documents until the chunks reach ``--chunks``
   (10,000; the recall documents come first, so the questions still apply). Ingest time,
   against the floor of writing the same chunk values with plain ``store.set`` (64 at a
   time, as ingestion writes them); a second ingest with nothing changed; the wall time of
   each search of the 100 questions (``--repeat`` rounds; p50, p99), lexical and, unless
   ``--no-hybrid-scale``, hybrid. Floors: ``get_many`` of the 4 chunk keys a search found
   (the store's own cost of reading the answer), and the brute-force BM25 over all chunks
   in memory (a search without the index).

Checked, else exit 1: every file is ingested (none skipped), every question's value is
whole in some chunk of its document, every passage is a stored chunk of a corpus file,
the second ingest changes nothing, the scale base holds at least ``--chunks`` chunks,
the hybrid bases called the embeddings endpoint. Recall itself is measured, not checked;
so is whether Redis ranks as SQLite does (the same top 4 for how many questions).
Redis: db 15 under a unique prefix, deleted afterwards. The machine is shared: the result
records the CPU other processes used.

    python bench/retrieval.py             # 240 documents; 10,000 chunks on SQLite and Redis
    python bench/retrieval.py --quick     # 60 documents, 30 questions; 1,000 chunks
    python bench/retrieval.py --stores sqlite --no-hybrid-scale
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import common
from retrieval_parts import Failed, corpus_for, recall_part, scale_part, write_corpus

EMBED = Path(__file__).resolve().with_name("retrieval_embed.py")


def print_tables(recall: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    n, kinds = (
        recall["questions"],
        (
            ("lexical (BM25 index)", "lexical"),
            ("hybrid (+ vectors, RRF)", "hybrid"),
            ("floor: brute-force BM25", "brute_force_bm25"),
        ),
    )
    title = f"Recall@4 — {recall['documents']} documents, {recall['chunks']} chunks, {n} questions"
    head = ["retrieval", "recall@4", "English", "Chinese", "shares a word", "a stem", "the name",
            "recall@1", "MRR", "ingest s"]  # fmt: skip
    body = []
    for name, key in kinds:
        r = recall[key]
        counts = sorted(int(x.split("/")[0]) for x in r["runs"])
        spread = f" ({counts[0]}–{counts[-1]})" if counts[0] != counts[-1] else ""
        body.append([name, r["recall_at_4"] + spread, *r["by_language"].values(),
                     *r["by_wording"].values(), r["recall_at_1"], r["mrr"],
                     recall["ingest_s"].get(key, "")])  # fmt: skip
    print(common.table(title, head, body))
    print(
        f"(the median of {len(recall['lexical']['runs'])} runs by lexical recall, each in another "
        "folder (chunk ids hash the file's path); in brackets the range, when the runs differ)"
    )
    if not rows:
        return
    print(
        common.table(
            "Ingest (lexical base)",
            ["store", "chunks", "ingest s", "floor: store.set s", "ratio", "again, unchanged s",
             "hybrid ingest s"],
            [[r["store"], r["chunks"], r["ingest_s"], r["floor_set_s"], r["ingest_ratio"],
              r["reingest_unchanged_s"], r.get("ingest_hybrid_s", "")] for r in rows],
        )
    )  # fmt: skip
    table = []
    for r in rows:
        table.append([r["store"], "lexical", r["lexical"]["p50_ms"], r["lexical"]["p99_ms"],
                      r["lexical_vs_get4_p50"], r["lexical_vs_brute_force_p50"],
                      r["recall_at_4_lexical"]])  # fmt: skip
        if "hybrid" in r:
            table.append([r["store"], "hybrid", r["hybrid"]["p50_ms"], r["hybrid"]["p99_ms"],
                          round(r["hybrid"]["p50_ms"] / r["floor_get4"]["p50_ms"], 1),
                          round(r["hybrid"]["p50_ms"] / r["floor_brute_force"]["p50_ms"], 3),
                          r["recall_at_4_hybrid"]])  # fmt: skip
        table.append([r["store"], "floor: get_many of 4 chunks", r["floor_get4"]["p50_ms"],
                      r["floor_get4"]["p99_ms"], 1.0, "", ""])  # fmt: skip
    table.append(["(memory)", "floor: brute-force BM25", rows[0]["floor_brute_force"]["p50_ms"],
                  rows[0]["floor_brute_force"]["p99_ms"], "", 1.0,
                  rows[0]["recall_at_4_brute_force"]])  # fmt: skip
    print(
        common.table(
            f"Search at {rows[0]['chunks']:,} chunks (wall ms per query)",
            ["store", "search", "p50 ms", "p99 ms", "p50 ÷ get4", "p50 ÷ brute force", "recall@4"],
            table,
        )
    )
    for r in rows[1:]:
        print(f"{r['store']}: the same top 4 as {rows[0]['store']} for "
              f"{r['same_top4_as_first_store']} of 100 questions")  # fmt: skip


def start_embedder(dim: int) -> tuple[subprocess.Popen[bytes], int]:
    port = common.free_port()
    proc = subprocess.Popen(
        [sys.executable, str(EMBED), "--port", str(port), "--dim", str(dim)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    common.wait_http("127.0.0.1", port, path="/stats", proc=proc, timeout=30)
    return proc, port


async def run(args: argparse.Namespace, tmp: Path, port: int) -> dict[str, Any]:
    common.configure_logs(tmp)  # info, JSON lines, to a file: as `serve` logs
    runs = [await recall_part(tmp, port, args.docs, args.questions, k) for k in range(args.runs)]
    runs.sort(key=lambda r: int(r["lexical"]["recall_at_4"].split("/")[0]))
    recall = runs[len(runs) // 2]  # the median run (by lexical recall) speaks for them
    for mode in ("lexical", "hybrid", "brute_force_bm25"):
        recall[mode]["runs"] = [r[mode]["recall_at_4"] for r in runs]
    print(f"recall: done ({recall['chunks']} chunks, {args.runs} folders)", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    kinds = [k for k in args.stores.split(",") if k]
    if "redis" in kinds and not common.redis_available():
        print("redis at 127.0.0.1:6379 does not answer: skipping it", file=sys.stderr)
        kinds.remove("redis")
    if kinds:
        docs, _ = corpus_for(args.chunks)
        folder = tmp / "scale"
        write_corpus(folder, docs)
        brute: dict[str, Any] = {"target": args.chunks}
        for kind in kinds:
            prefix = common.redis_prefix() if kind == "redis" else ""
            url = common.redis_url(prefix) if prefix else f"sqlite:///{tmp / 'scale.db'}"
            try:
                rows.append(await scale_part(kind, url, folder, docs, port, args.repeat,
                                             args.hybrid_scale, brute))  # fmt: skip
            finally:
                if prefix:
                    common.redis_cleanup(prefix)
            print(f"{kind}: done ({rows[-1]['ingest_s']} s to ingest)", file=sys.stderr)
    first = rows[0]["top4"] if rows else []
    for row in rows:  # the stores' indexes are the same design: the same top 4, or say so
        row["same_top4_as_first_store"] = sum(
            a == b for a, b in zip(row.pop("top4"), first, strict=True)
        )
    return {"recall": recall, "scale": rows}


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """What run_all's summary lists (no goal was set for retrieval: ok is None)."""
    recall = result["recall"]
    out = [
        {"target": f"recall@4 {mode}", "value": recall[mode]["recall_at_4"], "ok": None}
        for mode in ("lexical", "hybrid", "brute_force_bm25")
    ]
    for row in result["scale"]:
        where = f"{row['store']}, {row['chunks']:,} chunks"
        out.append({"target": f"ingest s ({where})", "value": row["ingest_s"], "ok": None})
        for mode in ("lexical", "hybrid"):
            if mode in row:
                value = f"{row[mode]['p50_ms']} / {row[mode]['p99_ms']}"
                out.append({"target": f"{mode} search p50/p99 ms ({where})", "value": value,
                            "ok": None})  # fmt: skip
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="60 documents, 30 questions, 1,000 chunks")
    p.add_argument("--stores", default="sqlite,redis")
    p.add_argument("--docs", type=int, default=240, help="documents of the recall corpus")
    p.add_argument("--questions", type=int, default=100)
    p.add_argument("--chunks", type=int, default=10_000, help="chunks of the scale corpus")
    p.add_argument("--repeat", type=int, default=3, help="rounds of the 100 questions timed")
    p.add_argument("--hybrid-scale", action=argparse.BooleanOptionalAction, default=True,
                   help="also ingest and search the scale corpus with embeddings")  # fmt: skip
    p.add_argument("--runs", type=int, default=5, help="recall runs, each in another folder")
    p.add_argument("--dim", type=int, default=1536, help="the local embeddings' dimensions")
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/*.json")
    args = p.parse_args()
    if args.quick:
        args.docs, args.questions, args.chunks, args.repeat, args.runs = 60, 30, 1_000, 1, 1
    embedder, port = start_embedder(args.dim)
    try:
        with tempfile.TemporaryDirectory(prefix="tmy-bench-retrieval-") as tmp:
            result = asyncio.run(run(args, Path(tmp), port))
        result["embedder"] = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read()
        )
        if not result["embedder"]["inputs"]:
            raise Failed("the hybrid bases never called the embeddings endpoint")
    except Failed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        common.stop_process(embedder)
    print_tables(result["recall"], result["scale"])
    if not args.no_write:
        path = common.write_result("retrieval", {
            "method": "KnowledgeBases.ingest/search through the real app (tmy.testing.Bot); "
            "embeddings from bench/retrieval_embed.py on loopback; wall time per query",
            **result, "targets": targets(result)}, quick=args.quick)  # fmt: skip
        print(f"written: {path.relative_to(common.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
