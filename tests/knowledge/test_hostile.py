"""Hostile input to the knowledge base: links out of a folder and loops, a FIFO in a file's
place, NUL-free binaries, a PDF listing one page thousands of times, an oversized folder,
a huge search result, a kb del racing another process's ingestion, kb add over HTTP."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from tests.knowledge.support import pdf_bytes
from tmy.errors import TmyError
from tmy.knowledge import KnowledgeBases, documents, ingest, knowledge_of, readers, scanning, search
from tmy.knowledge.config import ChunkConfig, parse
from tmy.knowledge.embedding import Embedder
from tmy.knowledge.readers import UnreadableDocument, read_sections
from tmy.knowledge.search import MAX_PASSAGE_CHARS
from tmy.store.base import Store
from tmy.testing import Bot
from tmy.testing.serving import serving

RULES = "rules:\n  - {id: ping, triggers: [ping], steps: [{plugin: ADJUST, input: pong}]}\n"
KEY = "k-kb-hostile"
ingest_module = importlib.import_module("tmy.knowledge.ingest")  # the package exports ingest()


def linked_folder(tmp_path: Path) -> Path:
    """docs/ with a file, a link to a file inside, and links out: a file, a folder, a loop."""
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("the api key is hunter2")
    (outside / "more.md").write_text("more hunter2 outside")
    (docs / "in.md").write_text("inside the folder: returns within 30 days")
    (docs / "sub" / "deep.md").write_text("deep inside")
    (docs / "alias.md").symlink_to(docs / "sub" / "deep.md")
    (docs / "leak.txt").symlink_to(outside / "secret.txt")
    (docs / "outdir").symlink_to(outside, target_is_directory=True)
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    return docs


async def test_links_out_of_the_folder_are_not_read(store: Store, tmp_path: Path) -> None:
    docs = linked_folder(tmp_path)
    report = await ingest(store, "faq", [docs])
    assert sorted(report.added) == ["alias.md", "in.md", "sub/deep.md"]
    skipped = {s["source"]: s["reason"] for s in report.skipped}
    assert set(skipped) == {"leak.txt", "loop", "outdir"}
    assert "outside" in skipped["leak.txt"] and "name it in paths" in skipped["leak.txt"]
    assert await search(store, ["faq"], "hunter2 api key") == []
    # the operator may name the file itself: a root is read wherever its link points
    named = await ingest(store, "faq", [docs / "leak.txt"])
    assert named.added == ["leak.txt"]


async def test_a_fifo_in_a_files_place_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "x.md"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so opening the writer cannot block
    writer = os.open(fifo, os.O_WRONLY)
    os.close(writer)
    try:
        with pytest.raises(OSError, match="not a regular file"):
            ingest_module._read(fifo)
    finally:
        os.close(reader)


def test_a_binary_without_nul_bytes_is_refused() -> None:
    noise = bytes((i * 37 + 11) % 255 + 1 for i in range(4000))  # every byte but NUL
    with pytest.raises(UnreadableDocument, match="a binary file"):
        read_sections("data.md", noise)
    escapes = "\x1b[1mbold\x1b[0m text with a colour code or two, otherwise plain\n" * 20
    assert read_sections("log.txt", escapes.encode())[0][0].startswith("\x1b[1mbold")


def repeated_page_pdf(refs: int) -> bytes:
    """A PDF whose page tree lists one page ``refs`` times: tiny, yet ``refs`` pages."""
    data = pdf_bytes(["hello page"])
    return data.replace(b"/Kids [3 0 R] /Count 1", b"/Kids [%s] /Count %d" % (
        b" ".join([b"3 0 R"] * refs), refs))  # fmt: skip


def test_a_pdf_listing_a_page_many_times_is_read_up_to_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(readers, "MAX_PDF_PAGES", 5)
    sections = read_sections("bomb.pdf", repeated_page_pdf(40))
    assert [page for _, page in sections] == [1, 2, 3, 4, 5, 40]
    assert sections[-1] == ("", 40)  # the pages not read: the document's last page named


async def test_a_long_pdf_is_noted_as_cut(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers, "MAX_PDF_PAGES", 5)
    monkeypatch.setattr(ingest_module, "MAX_PDF_PAGES", 5)
    (tmp_path / "bomb.pdf").write_bytes(repeated_page_pdf(40))
    report = await ingest(store, "faq", [tmp_path])
    (record,) = (await documents.documents(store, "faq")).values()
    assert report.added == ["bomb.pdf"] and record["chunks"] == 5 and record["pages"] == 40


async def test_a_folder_over_the_file_limit_prunes_nothing(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        (tmp_path / f"{n}.md").write_text(f"document number {n}")
    assert len((await ingest(store, "faq", [tmp_path])).added) == 3
    monkeypatch.setattr(scanning, "MAX_FILES", 2)
    report = await ingest(store, "faq", [tmp_path])
    assert report.removed == [] and len(await documents.documents(store, "faq")) == 3
    assert [s["source"] for s in report.skipped] == [str(tmp_path)]
    assert "more than 2 files" in report.skipped[0]["reason"]


async def test_passages_are_bounded_in_characters(store: Store, tmp_path: Path) -> None:
    paragraph = "Returns are accepted within thirty days of delivery, always. " * 330  # ~20,000
    (tmp_path / "big.md").write_text("\n\n".join([paragraph] * 5))
    await ingest(store, "faq", [tmp_path], chunk=ChunkConfig(20_000, 100))
    found = await search(store, ["faq"], "returns accepted within days", top=50)
    assert 1 <= len(found) < 5
    assert sum(len(p.text) for p in found) <= MAX_PASSAGE_CHARS


class Gate:
    """An embedder that waits until opened: an ingestion held in the middle of a write."""

    def __init__(self) -> None:
        self.entered, self.open = asyncio.Event(), asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.entered.set()
        await self.open.wait()
        return [[1.0, 0.0] for _ in texts]


async def test_kb_del_waits_for_another_process_ingesting(tmp_path: Path, store_url: str) -> None:
    (tmp_path / "a.md").write_text("returns within thirty days " * 40)
    bases = parse({"faq": {"paths": [str(tmp_path)]}})
    async with Bot({"r.yaml": RULES}, store=store_url, sections={"knowledge": bases}) as bot:
        services = bot.app.engine.services
        store = services.store
        await knowledge_of(services).ingest("faq")
        (tmp_path / "a.md").write_text("exchanges are free of charge " * 40)
        gate = Gate()  # "another process": the module's ingest with its own embedder
        other = asyncio.create_task(
            ingest(store, "faq", [tmp_path], embedder=Embedder("gate", gate.embed))
        )
        await gate.entered.wait()
        mine = KnowledgeBases(services, bases, ["faq"])  # this process: kb del faq
        deleting = asyncio.create_task(mine.delete("faq"))
        await asyncio.sleep(0.2)  # kb del has started (and, fixed, waits for the lease)
        gate.open.set()
        await asyncio.gather(other, deleting)
        left = await store.keys("kb/faq/")
        names = await documents.base_names(store)
    # all or nothing: never chunks of a base the list of bases no longer names
    assert left == [] and "faq" not in names, (left, names)


@pytest.mark.slow
async def test_kb_add_over_http_reads_only_configured_folders(tmp_path: Path) -> None:
    docs = linked_folder(tmp_path)
    outside = tmp_path / "outside"
    bases = parse({"faq": {"paths": [str(docs)]}})
    async with (
        serving({"r.yaml": RULES}, http_api_keys=(KEY,), sections={"knowledge": bases}) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=30) as client,
    ):

        async def add(*paths: str) -> httpx.Response:
            args = {"action": "add", "name": "extra", "target": " ".join(paths)}
            headers = {"Authorization": f"Bearer {KEY}"}
            return await client.post("/admin/commands/kb", json={"args": args}, headers=headers)

        refused = [await add(p) for p in (str(outside), "/etc", str(docs / "outdir"))]
        taken = await add(str(docs / "sub"))
    for answer in refused:
        assert answer.status_code == 400, answer.text
        assert "reads only files inside the paths of a configured base" in answer.json()["text"]
    assert taken.status_code == 200 and taken.json()["data"]["added"] == ["deep.md"], taken.text


def nested_pdf() -> bytes:
    """A PDF whose page content nests arrays 50,000 deep: pypdf recurses until it fails."""
    return pdf_bytes(["x"]).replace(b"BT /F1 12 Tf", b"[" * 50_000 + b"]" * 50_000 + b" BT /F1")


async def test_a_pdf_that_breaks_pypdf_is_skipped_and_the_rest_ingested(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a.pdf").write_bytes(nested_pdf())
    (tmp_path / "b.md").write_text("the rest is ingested")
    report = await ingest(store, "faq", [tmp_path])
    assert report.added == ["b.md"] and [s["source"] for s in report.skipped] == ["a.pdf"]
    assert "RecursionError" in report.skipped[0]["reason"]
    assert not [r for r in caplog.records if r.name.startswith("pypdf")]  # no flood of warnings


async def test_a_huge_question_is_embedded_in_part(store: Store, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("退货政策：收到商品后三十天内可以退货。")
    asked: list[str] = []

    async def embed(texts: Sequence[str]) -> list[list[float]]:
        asked.extend(texts)
        return [[1.0, 0.0] for _ in texts]

    embedder = Embedder("rec", embed)
    await ingest(store, "faq", [tmp_path], embedder=embedder)
    asked.clear()
    found = await search(store, ["faq"], "退货" * 10_000, embedders={"faq": embedder})
    assert found and found[0].source == "a.md"
    assert [len(t) for t in asked] == [2_000]


async def test_a_file_name_that_is_not_utf8_is_skipped_not_fatal(
    store: Store, tmp_path: Path
) -> None:
    os.mkdir(tmp_path / "docs")
    with open(os.path.join(os.fsencode(tmp_path / "docs"), b"bad\xff.md"), "w") as fh:
        fh.write("zebras in a file whose name is Latin-1")
    (tmp_path / "docs" / "line\nbreak.md").write_text("tigers behind a newline")
    (tmp_path / "docs" / "ok.md").write_text("lions are fine")
    report = await ingest(store, "faq", [tmp_path / "docs"])
    assert sorted(report.added) == ["line\nbreak.md", "ok.md"]
    bad = {"source": "bad\ufffd.md", "reason": "its name is not UTF-8: rename it"}
    assert report.skipped == [bad]
    found = await search(store, ["faq"], "tigers lions")
    assert sorted(p.source for p in found) == ["line\nbreak.md", "ok.md"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists any folder whatever its mode")
async def test_an_unreadable_subfolder_keeps_its_documents(store: Store, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("kept while its folder cannot be listed")
    (tmp_path / "b.md").write_text("b")
    assert len((await ingest(store, "faq", [tmp_path])).added) == 2
    (tmp_path / "sub").chmod(0)
    try:
        report = await ingest(store, "faq", [tmp_path])
    finally:
        (tmp_path / "sub").chmod(0o755)
    assert report.removed == [] and report.skipped[0]["source"] == "sub"
    assert "cannot list it" in report.skipped[0]["reason"]


async def test_rebuild_refuses_while_a_folder_with_documents_is_missing(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "a.md").write_text("documents on a share that is not mounted now")
    async with Bot({"r.yaml": RULES}) as bot:
        kb = knowledge_of(bot.app.engine.services)
        await kb.ingest("extra", [share])
        share.rename(tmp_path / "away")  # unmounted
        with pytest.raises(TmyError, match="cannot be found, and rebuilding would drop"):
            await kb.rebuild("extra")
        kept = await documents.documents(bot.app.engine.services.store, "extra")
        assert [r["source"] for r in kept.values()] == ["a.md"]


async def test_files_another_process_added_while_waiting_are_not_pruned(
    store: Store, tmp_path: Path
) -> None:
    (tmp_path / "a.md").write_text("alpha")
    (tmp_path / "b.md").write_text("bravo")
    gate = Gate()  # process A: holds the base, stopped in the middle of a.md
    first = asyncio.create_task(
        ingest(store, "faq", [tmp_path], embedder=Embedder("gate", gate.embed))
    )
    await gate.entered.wait()
    (tmp_path / "b.md").unlink()  # process B looks now, then waits for A
    second = asyncio.create_task(ingest(store, "faq", [tmp_path]))
    await asyncio.sleep(0.2)
    (tmp_path / "b.md").write_text("bravo again")  # back before A reaches it: A ingests it
    gate.open.set()
    await asyncio.gather(first, second)
    records = await documents.documents(store, "faq")
    assert sorted(r["source"] for r in records.values()) == ["a.md", "b.md"]


async def test_the_daemon_waits_for_another_process_ingesting_as_long_as_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tmy.knowledge.watch import ingest_all

    monkeypatch.setattr(ingest_module, "LOCK_WAIT", 0.1)  # a kb add's wait: short here
    (tmp_path / "a.md").write_text("alpha")
    bases = parse({"faq": {"paths": [str(tmp_path)]}})
    async with Bot({"r.yaml": RULES}, sections={"knowledge": bases}) as bot:
        services = bot.app.engine.services
        kb = knowledge_of(services)
        async with services.store.lock("kb/faq/lock"):  # another daemon ingests faq
            started = asyncio.create_task(ingest_all(kb, ["faq"]))
            await asyncio.sleep(0.5)
        await started
    assert "error" not in kb.status["faq"] and kb.status["faq"]["documents"] == 1
