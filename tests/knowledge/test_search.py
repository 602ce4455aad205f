"""knowledge.search: BM25 over the base's index (English and Chinese), vectors fused by RRF."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.knowledge.support import DIM, hashed_vector
from tmy.errors import TmyError
from tmy.knowledge import layout
from tmy.knowledge.config import ChunkConfig
from tmy.knowledge.embedding import Embedder
from tmy.knowledge.ingest import ingest
from tmy.knowledge.search import DENSE_SCAN_FLOATS, search
from tmy.store.base import Store

DOCS = {
    "returns.md": "Returns: you may return any item within 30 days of delivery for a refund.",
    "shipping.md": "Shipping is free for orders above 50 euros; delivery takes three days.",
    "pets.md": "Our office cat is called Mimi and sleeps on the printer.",
    "zh.txt": "退货政策：收到商品后三十天内可以退货，运费由我们承担。",
    "hours.txt": "营业时间：工作日上午九点到下午六点。",
}


async def local_embed(texts: Sequence[str]) -> list[list[float]]:
    return [hashed_vector(t) for t in texts]


LOCAL = Embedder("hash-64", local_embed, min_similarity=0.2)


async def make(store: Store, tmp_path: Path, base: str = "faq", embedder: Embedder | None = None,
               docs: dict[str, str] = DOCS) -> Path:  # fmt: skip
    folder = tmp_path / base
    folder.mkdir()
    for name, text in docs.items():
        (folder / name).write_text(text)
    await ingest(store, base, [folder], chunk=ChunkConfig(200, 20), embedder=embedder)
    return folder


async def test_english_and_chinese_questions_find_their_chunks(
    store: Store, tmp_path: Path
) -> None:
    await make(store, tmp_path)
    found = await search(store, ["faq"], "how many days do I have to return an item?")
    assert found[0].source == "returns.md" and found[0].base == "faq"
    assert found[0].position == "chars 0–73" and 0 < found[0].score <= 1
    assert found[0].why["lexical_rank"] == 1 and "return" in found[0].why["matched"]
    found = await search(store, ["faq"], "多少天内可以退货？")
    assert found[0].source == "zh.txt" and "退货" in found[0].why["matched"]
    found = await search(store, ["faq"], "营业时间是什么")
    assert [p.source for p in found] == ["hours.txt"]


async def test_top_and_min_score(store: Store, tmp_path: Path) -> None:
    await make(store, tmp_path)
    found = await search(store, ["faq"], "delivery days item", top=5)
    assert [p.source for p in found][:2] == ["returns.md", "shipping.md"]
    assert len(await search(store, ["faq"], "delivery days item", top=1)) == 1
    best = found[0].score
    assert await search(store, ["faq"], "delivery days item", min_score=best + 0.01) == []
    kept = await search(store, ["faq"], "delivery days item", min_score=best)
    assert [p.source for p in kept] == ["returns.md"]
    assert await search(store, ["faq"], "zebra") == []


async def test_several_bases_are_one_collection(store: Store, tmp_path: Path) -> None:
    await make(store, tmp_path)
    await make(store, tmp_path, "manual", docs={"warranty.md": "The warranty lasts two years."})
    found = await search(store, ["faq", "manual"], "how long is the warranty")
    assert (found[0].base, found[0].source) == ("manual", "warranty.md")
    assert await search(store, ["nothing-here"], "warranty") == []


async def test_a_chunk_removed_after_the_index_read_is_left_out(
    store: Store, tmp_path: Path
) -> None:
    folder = await make(store, tmp_path)
    doc = layout.doc_id(str(folder / "returns.md"))
    await store.delete(layout.chunk_key("faq", doc, 0))  # the index still names it
    found = await search(store, ["faq"], "return an item within 30 days")
    assert "returns.md" not in [p.source for p in found] and found


async def test_hybrid_finds_a_synonym_lexical_search_misses(store: Store, tmp_path: Path) -> None:
    await make(store, tmp_path, embedder=LOCAL)
    question = "what is the kitty named"
    assert await search(store, ["faq"], question) == []  # no word in common
    found = await search(store, ["faq"], question, embedders={"faq": LOCAL})
    assert found[0].source == "pets.md"
    why = found[0].why
    assert why["vector_rank"] == 1 and why["lexical_rank"] is None and why["vector"] > 0.2
    assert found[0].score == pytest.approx((1 / 61) * 61 / 2, abs=1e-6)  # one list's first: 0.5


async def test_hybrid_fuses_both_rankings(store: Store, tmp_path: Path) -> None:
    await make(store, tmp_path, embedder=LOCAL)
    found = await search(store, ["faq"], "office cat Mimi", embedders={"faq": LOCAL})
    best = found[0]
    assert best.source == "pets.md"
    assert best.why["lexical_rank"] == 1 and best.why["vector_rank"] == 1
    assert best.score == pytest.approx(1.0) and best.why["rrf"] == pytest.approx(2 / 61, abs=1e-6)


async def test_a_failing_embedder_leaves_the_search_lexical(store: Store, tmp_path: Path) -> None:
    await make(store, tmp_path, embedder=LOCAL)

    async def down(texts: Sequence[str]) -> list[list[float]]:
        raise TmyError("embeddings endpoint down")

    broken = {"faq": Embedder("hash-64", down)}
    found = await search(store, ["faq"], "return an item", embedders=broken)
    assert found[0].source == "returns.md"
    assert found[0].why["vector_error"] == "embeddings endpoint down"


@pytest.mark.slow
@pytest.mark.redis
async def test_on_a_redis_cluster(cluster_store_url: str, tmp_path: Path) -> None:
    """Chunks, vectors and records live in many hash slots; the base's index in one."""
    from tmy.knowledge import documents
    from tmy.store.url import open_store

    store = open_store(cluster_store_url)
    await store.open()
    try:
        folder = await make(store, tmp_path, embedder=LOCAL)
        found = await search(store, ["faq"], "kitty", embedders={"faq": LOCAL})
        assert found[0].source == "pets.md"
        (folder / "pets.md").unlink()
        await ingest(store, "faq", [folder], chunk=ChunkConfig(200, 20), embedder=LOCAL)
        assert (await store.index_stats("kb/faq")).n == 4
        assert await documents.drop_base(store, "faq") == 4
        assert await store.keys("kb/") == []
    finally:
        await store.close()


def test_vectors_are_packed_normalised() -> None:
    from tmy.knowledge.embedding import normalised, pack, similarity, unpack

    packed = pack([3.0, 4.0])
    assert packed.startswith("f32:") and list(unpack(packed) or []) == pytest.approx([0.6, 0.8])
    assert unpack([0.6, 0.8]) is None and unpack("f32:***") is None
    assert similarity(normalised([1, 0]), normalised([1, 1])) == pytest.approx(0.7071, abs=1e-4)
    assert similarity(normalised([1, 0]), normalised([1, 0, 0])) == 0.0
    assert list(normalised([0, 0])) == [0.0, 0.0]


async def test_chunks_tied_at_full_relevance_rank_by_their_bm25(
    store: Store, tmp_path: Path
) -> None:
    """Relevance is capped at 1: among chunks that reach it, the higher raw BM25 ranks first,
    whatever the chunk ids (they hash the file's path, so they differ per folder)."""
    docs = {
        "a.md": "Casora router warranty: the Casora router warranty lasts 35 months, see the card.",
        "b.md": "The Casora router warranty lasts 35 months.",
    }
    await make(store, tmp_path, docs=docs)
    found = await search(store, ["faq"], "Casora router warranty")
    assert found[0].why["relevance"] == found[1].why["relevance"]
    assert found[0].why["bm25"] > found[1].why["bm25"] and found[0].source == "a.md"


async def test_the_dense_scan_is_a_budget_of_floats(store: Store, tmp_path: Path) -> None:
    """Every chunk is compared by vector while chunks × the query's dimensions stay within
    DENSE_SCAN_FLOATS: 4 chunks of ~62,000 dimensions are, 5 are not (64 dimensions: both)."""
    repeat = DENSE_SCAN_FLOATS // (4 * DIM)  # the same cosines, DIM × repeat dimensions

    async def wide_embed(texts: Sequence[str]) -> list[list[float]]:
        return [hashed_vector(t) * repeat for t in texts]

    wide = Embedder("hash-wide", wide_embed, min_similarity=0.2)
    four = {k: v for k, v in DOCS.items() if k != "hours.txt"}
    await make(store, tmp_path, "four", embedder=wide, docs=four)
    await make(store, tmp_path, "five", embedder=wide)
    await make(store, tmp_path, "small", embedder=LOCAL)
    question = "what is the kitty named"  # no word of pets.md: only the dense scan finds it
    found = await search(store, ["four"], question, embedders={"four": wide})
    assert found[0].source == "pets.md" and found[0].why["lexical_rank"] is None
    assert await search(store, ["five"], question, embedders={"five": wide}) == []
    found = await search(store, ["small"], question, embedders={"small": LOCAL})
    assert found[0].source == "pets.md"
    both = {"four": wide, "small": LOCAL}  # 4 × 62,464 + 5 × 64 floats: over the budget
    assert await search(store, ["four", "small"], question, embedders=both) == []
