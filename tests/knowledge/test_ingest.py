"""knowledge.ingest: files into chunks in the store, incrementally by content hash (both stores)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from tests.knowledge.support import encrypted_pdf, pdf_bytes
from tmy import metrics
from tmy.errors import StoreError
from tmy.knowledge import documents, layout
from tmy.knowledge.config import ChunkConfig
from tmy.knowledge.embedding import Embedder, unpack
from tmy.knowledge.ingest import MAX_CHUNKS_PER_FILE, ingest
from tmy.store.base import MISSING, Store
from tmy.store.metered import metered
from tmy.store.sqlite import SQLiteStore
from tmy.store.textindex import IndexDoc

WRITES = ("set", "delete", "update", "commit", "index_put", "index_remove", "index_drop")
SMALL = ChunkConfig(200, 40)


@pytest.fixture
async def meter(store: Store) -> AsyncIterator[Store]:
    """The test's store, timed into the metrics (so a test counts the writes)."""
    yield metered(store)


def writes() -> float:
    return sum(
        metrics.REGISTRY.get_sample_value("tmy_store_op_seconds_count", {"op": op}) or 0
        for op in WRITES
    )


def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "returns.md").write_text("# Returns\n\nReturn any item within 30 days.\n")
    (docs / "sub" / "zh.txt").write_text("退货政策：收到商品后三十天内可以退货。\n")
    (docs / "hours.html").write_text("<p>We open at 9 am.</p><script>var x</script>")
    (docs / "manual.pdf").write_bytes(pdf_bytes(["Page one: warranty is two years", "Page two"]))
    (docs / "notes.csv").write_text("not,included\n")
    (docs / ".hidden.md").write_text("a hidden file\n")
    return docs


async def chunk_texts(store: Store, base: str) -> dict[str, list[str]]:
    out = {}
    for doc, record in (await documents.documents(store, base)).items():
        keys = [layout.chunk_key(base, doc, n) for n in range(record["chunks"])]
        out[record["source"]] = [v["text"] for v in await store.get_many(keys)]
    return out


async def test_a_folder_is_ingested_with_its_kinds(meter: Store, tmp_path: Path) -> None:
    report = await ingest(meter, "faq", [folder(tmp_path)], chunk=SMALL)
    assert sorted(report.added) == ["hours.html", "manual.pdf", "returns.md", "sub/zh.txt"]
    texts = await chunk_texts(meter, "faq")
    assert texts["hours.html"] == ["We open at 9 am."]
    assert texts["manual.pdf"] == ["Page one: warranty is two years", "Page two"]
    assert texts["sub/zh.txt"] == ["退货政策：收到商品后三十天内可以退货。"]
    pdf = layout.doc_id(str(tmp_path / "docs/manual.pdf"))
    chunk = await meter.get(layout.chunk_key("faq", pdf, 1))
    assert chunk["source"] == "manual.pdf" and chunk["position"] == "page 2, chars 0–8"
    assert (await meter.index_stats(layout.namespace("faq"))).n == report.chunks == 5
    assert await documents.base_names(meter) == ["faq"]


async def test_unchanged_files_cost_no_writes(meter: Store, tmp_path: Path) -> None:
    docs = folder(tmp_path)
    await ingest(meter, "faq", [docs], chunk=SMALL)
    before = writes()
    report = await ingest(meter, "faq", [docs], chunk=SMALL)
    assert writes() == before
    assert len(report.unchanged) == 4 and not report.changed
    # touched, same content: only the record's file time is written, no chunk
    os.utime(docs / "returns.md", ns=(1, 1))
    before_texts = await chunk_texts(meter, "faq")
    before = writes()
    report = await ingest(meter, "faq", [docs], chunk=SMALL)
    assert writes() == before + 1 and not report.changed
    assert await chunk_texts(meter, "faq") == before_texts


async def test_an_edited_file_is_replaced_and_a_deleted_one_removed(
    meter: Store, tmp_path: Path
) -> None:
    docs = folder(tmp_path)
    long = " ".join(f"Rule {i} of returns." for i in range(40))
    (docs / "returns.md").write_text(long)
    await ingest(meter, "faq", [docs], chunk=SMALL)
    many = len((await chunk_texts(meter, "faq"))["returns.md"])
    assert many > 3
    (docs / "returns.md").write_text("Returns: 14 days now.")
    (docs / "hours.html").unlink()
    report = await ingest(meter, "faq", [docs], chunk=SMALL)
    assert report.replaced == ["returns.md"] and report.removed == ["hours.html"]
    texts = await chunk_texts(meter, "faq")
    assert texts["returns.md"] == ["Returns: 14 days now."] and "hours.html" not in texts
    doc = layout.doc_id(str(docs / "returns.md"))
    assert await meter.get(layout.chunk_key("faq", doc, 1)) is MISSING  # the old tail is gone
    hits = await meter.index_search(layout.namespace("faq"), ["rule", "open"])
    assert hits.docs == {}  # neither the old text nor the deleted file is found
    assert (await meter.index_stats(layout.namespace("faq"))).n == 4


async def test_bad_files_are_skipped_and_the_rest_goes_on(store: Store, tmp_path: Path) -> None:
    docs = folder(tmp_path)
    (docs / "secret.pdf").write_bytes(encrypted_pdf(["hidden"]))
    (docs / "blob.txt").write_bytes(b"\x00\x00binary")
    report = await ingest(store, "faq", [docs, tmp_path / "missing"], chunk=SMALL)
    reasons = {s["source"]: s["reason"] for s in report.skipped}
    assert "encrypted PDF" in reasons["secret.pdf"] and "binary" in reasons["blob.txt"]
    assert "no such file or folder" in reasons[str(tmp_path / "missing")]
    assert len(report.added) == 4


async def test_a_missing_root_keeps_its_documents(store: Store, tmp_path: Path) -> None:
    docs = folder(tmp_path)
    await ingest(store, "faq", [docs], chunk=SMALL)
    docs.rename(tmp_path / "elsewhere")
    report = await ingest(store, "faq", [docs], chunk=SMALL)
    assert report.removed == [] and len(await documents.documents(store, "faq")) == 4


async def test_other_roots_documents_are_not_pruned(store: Store, tmp_path: Path) -> None:
    docs = folder(tmp_path)
    extra = tmp_path / "extra.md"
    extra.write_text("Extra document.")
    await ingest(store, "faq", [docs], chunk=SMALL)
    await ingest(store, "faq", [extra], chunk=SMALL)
    report = await ingest(store, "faq", [docs], chunk=SMALL)
    assert report.removed == [] and len(await documents.documents(store, "faq")) == 5


async def test_chunks_past_the_limit_are_dropped(store: Store, tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("word " * (MAX_CHUNKS_PER_FILE * 30))
    report = await ingest(store, "big", [big], chunk=ChunkConfig(100, 0))
    assert report.chunks == MAX_CHUNKS_PER_FILE


async def test_vectors_are_stored_and_a_new_model_re_embeds(store: Store, tmp_path: Path) -> None:
    calls: list[int] = []

    async def embed(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return [[float(len(t)), 1.0] for t in texts]

    docs = folder(tmp_path)
    await ingest(store, "faq", [docs], chunk=SMALL, embedder=Embedder("one", embed))
    doc = layout.doc_id(str(docs / "returns.md"))
    stored = unpack(await store.get(layout.vector_key("faq", doc, 0)))
    assert stored is not None and list(stored) == pytest.approx([42 / 42.0119, 1 / 42.0119])
    assert len(calls) == 4
    await ingest(store, "faq", [docs], chunk=SMALL, embedder=Embedder("one", embed))
    assert len(calls) == 4  # unchanged: nothing embedded again
    await ingest(store, "faq", [docs], chunk=SMALL, embedder=Embedder("two", embed))
    assert len(calls) == 8  # another model: every document again


async def test_failing_embeddings_index_lexically_and_retry(store: Store, tmp_path: Path) -> None:
    from tmy.errors import TmyError

    state = {"down": True}

    async def embed(texts: list[str]) -> list[list[float]]:
        if state["down"]:
            raise TmyError("embeddings endpoint down")
        return [[1.0] for _ in texts]

    docs = folder(tmp_path)
    report = await ingest(store, "faq", [docs], chunk=SMALL, embedder=Embedder("e", embed))
    assert len(report.added) == 4 and (await store.index_stats("kb/faq")).n == 5
    state["down"] = False
    report = await ingest(store, "faq", [docs], chunk=SMALL, embedder=Embedder("e", embed))
    assert len(report.replaced) == 4  # embedded now
    doc = layout.doc_id(str(docs / "returns.md"))
    assert list(unpack(await store.get(layout.vector_key("faq", doc, 0))) or []) == [1.0]


async def test_drop_base_removes_everything(store: Store, tmp_path: Path) -> None:
    await ingest(store, "faq", [folder(tmp_path)], chunk=SMALL)
    assert await documents.drop_base(store, "faq") == 4
    assert await store.keys("kb/faq/") == [] and await documents.base_names(store) == []
    assert (await store.index_stats("kb/faq")).n == 0


async def test_chunks_of_a_write_cut_short_are_still_removed(store: Store, tmp_path: Path) -> None:
    """A crash after the chunks were written but before the record: the record's reserved
    count (written first) still names every chunk."""
    from tmy.knowledge.chunking import Chunk

    docs = tmp_path / "docs"
    docs.mkdir()
    path = docs / "a.md"
    path.write_text("text")
    doc = layout.doc_id(str(path))
    record = {"id": doc, "path": str(path), "root": str(docs), "source": "a.md",
              "chunks": 0, "reserved": 3, "fingerprint": ""}  # fmt: skip
    await store.set(layout.doc_key("faq", doc), record)
    chunks = [Chunk(f"chunk {n} words", 0, 10) for n in range(3)]
    # a Batch cut short after its index_put, before the records: keys and index written
    await documents.write_values(store, "faq", doc, "a.md", chunks, None, 0)
    index = [IndexDoc(layout.index_id(doc, n), {"chunk": 1, str(n): 1}) for n in range(3)]
    await store.index_put(layout.namespace("faq"), index)
    assert (await store.index_stats("kb/faq")).n == 3
    path.unlink()
    report = await ingest(store, "faq", [docs])
    assert report.removed == ["a.md"]
    assert await store.keys("kb/faq/") == [] and (await store.index_stats("kb/faq")).n == 0


async def test_a_new_document_notes_its_chunks_before_writing_them(
    meter: Store, tmp_path: Path
) -> None:
    docs = folder(tmp_path)
    await ingest(meter, "faq", [docs], chunk=SMALL)
    record = (await documents.documents(meter, "faq"))[layout.doc_id(str(docs / "manual.pdf"))]
    assert record["chunks"] == 2 and "reserved" not in record and record["pages"] == 2


class CountingStore(SQLiteStore):
    """The real SQLite store, counting ``index_put`` calls; ``fail_at``: the call that raises
    (a crash in the middle of an ingestion)."""

    def __init__(self, path: Path, fail_at: int = 0) -> None:
        super().__init__(path)
        self.puts, self.fail_at = 0, fail_at

    async def index_put(self, ns: str, docs: Sequence[IndexDoc]) -> None:
        self.puts += 1
        if self.puts == self.fail_at:
            raise StoreError("the process died here")
        await super().index_put(ns, docs)


def many_files(tmp_path: Path, count: int, words: int) -> Path:
    docs = tmp_path / "many"
    docs.mkdir()
    for i in range(count):
        (docs / f"f{i}.md").write_text(f"marker{i} lorem ipsum dolor sit amet " * words)
    return docs


async def searchable(store: Store, docs: Path, count: int) -> None:
    """Each file's chunks are in the index exactly once (by its marker), and nothing else is."""
    records = await documents.documents(store, "many")
    assert len(records) == count and all(r["fingerprint"] for r in records.values())
    for i in range(count):
        record = records[layout.doc_id(str(docs / f"f{i}.md"))]
        hits = await store.index_search("kb/many", [f"marker{i}"], budget=10_000)
        assert len(hits.docs) == record["chunks"] > 0
    total = sum(r["chunks"] for r in records.values())
    assert (await store.index_stats("kb/many")).n == total
    assert len(await store.keys("kb/many/c/")) == total


async def test_a_folder_is_indexed_in_fewer_puts_than_documents(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "kb.db")
    await store.open()
    try:
        docs = many_files(tmp_path, 30, 2)
        report = await ingest(store, "many", [docs], chunk=SMALL)
        assert len(report.added) == 30 and store.puts == 1
        await searchable(store, docs, 30)
    finally:
        await store.close()


async def test_an_ingestion_cut_short_mid_batch_is_repaired(tmp_path: Path) -> None:
    """The second ``index_put`` fails: the first batch's documents are ingested, the second
    batch's have chunk keys but stale records, the rest nothing; the next ingestion writes
    every one not ingested, once."""
    store = CountingStore(tmp_path / "kb.db", fail_at=2)
    await store.open()
    try:
        docs = many_files(tmp_path, 40, 40)  # ~1,500 characters: 9 chunks of 200 each
        with pytest.raises(StoreError, match="died"):
            await ingest(store, "many", [docs], chunk=SMALL)
        ingested = [r for r in (await documents.documents(store, "many")).values()
                    if r["fingerprint"]]  # fmt: skip
        assert 0 < len(ingested) < 40
        report = await ingest(store, "many", [docs], chunk=SMALL)
        assert len(report.unchanged) == len(ingested)
        assert len(report.added) + len(report.replaced) == 40 - len(ingested)
        await searchable(store, docs, 40)
        assert not (await ingest(store, "many", [docs], chunk=SMALL)).changed
    finally:
        await store.close()
