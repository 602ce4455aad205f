"""Ingestion: files under a base's paths made into chunks in the store, incrementally.

:func:`ingest` scans the given roots (a folder: every file whose name matches
``include``, hidden files and folders left out; a file: itself), then for each
file compares it with its document record:

* same size and modification time and the same fingerprint → nothing is read
  or written;
* else the file is read and hashed: the same content (and chunk settings and
  embedding model: the **fingerprint**) → only the record's size/time are
  updated; different → it is parsed, chunked, embedded (with an embedder) and
  its chunks replace the old ones — the index documents of several files in
  one ``index_put``, the records after them (:class:`tmy.knowledge.documents.Batch`);
* a document recorded under a scanned root whose file is gone is removed. A
  root that does not exist is reported and its documents are kept (an
  unmounted share must not empty a base).

A bad file — unreadable, binary, an encrypted or broken PDF, over
:data:`MAX_FILE_BYTES` — is skipped with a warning (``knowledge.skipped``) and
the others go on; a document already ingested from it keeps its chunks. A
file's chunks beyond :data:`MAX_CHUNKS_PER_FILE` are dropped (warned as
``truncated``). Embeddings failing are warned about and the document is indexed
lexically; its fingerprint then lacks the embedding model, so the next
ingestion embeds it again.

Which files a folder gives — links, hidden files, limits — is
:mod:`tmy.knowledge.scanning`.

One ingestion of a base at a time, across processes: it holds the store lease
``kb/<name>/lock`` (two daemons starting on one store ingest once; the second
finds every file unchanged).
"""

from __future__ import annotations

import asyncio
import os
import stat as stat_module
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tmy.errors import TmyError
from tmy.knowledge import documents, layout
from tmy.knowledge.chunking import Chunk, chunk_sections
from tmy.knowledge.config import DEFAULT_INCLUDE, ChunkConfig
from tmy.knowledge.embedding import Embedder
from tmy.knowledge.readers import MAX_PDF_PAGES, UnreadableDocument, kind_of, read_sections
from tmy.knowledge.scanning import File, inside, scan, shown
from tmy.logs import get_logger
from tmy.store.base import Store

log = get_logger("tmy.knowledge")

MAX_FILE_BYTES = 20 * 1024 * 1024
"""A larger file is skipped (a knowledge base holds documents, not data dumps)."""
MAX_CHUNKS_PER_FILE = 2_000
"""A file's chunks past this many are dropped (about 1.6 million characters at 800)."""
LOCK_WAIT = 600.0
READER_VERSION = 1  # part of every fingerprint: a change of how files are read re-reads them


@dataclass(slots=True)
class IngestReport:
    """What one ingestion did, by source."""

    base: str
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {source, reason}
    chunks: int = 0  # chunks written

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced or self.removed)

    def summary(self) -> str:
        parts = [
            f"{len(self.added)} added",
            f"{len(self.replaced)} replaced",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.removed)} removed",
            f"{len(self.skipped)} skipped",
        ]
        plural = "s" if self.chunks != 1 else ""
        text = f"{self.base}: {', '.join(parts)} ({self.chunks} chunk{plural} written)"
        return "\n".join([text, *(f"  skipped {s['source']}: {s['reason']}" for s in self.skipped)])

    def as_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "added": self.added,
            "replaced": self.replaced,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "skipped": self.skipped,
            "chunks": self.chunks,
        }


def fingerprint(content: str, chunk: ChunkConfig, embedded_with: str) -> str:
    return f"{content}:{chunk.chars}:{chunk.overlap}:{embedded_with}:{READER_VERSION}"


def _parse(file: File, data: bytes, chunk: ChunkConfig) -> tuple[list[Chunk], int, bool]:
    """(chunks, pages, truncated) of a file's bytes (a worker thread runs this)."""
    sections = read_sections(file.path.name, data)
    chunks = chunk_sections(sections, chunk, MAX_CHUNKS_PER_FILE + 1)
    pages = max((page or 0 for _, page in sections), default=0)
    truncated = len(chunks) > MAX_CHUNKS_PER_FILE or pages > MAX_PDF_PAGES
    return chunks[:MAX_CHUNKS_PER_FILE], pages, truncated


def _read(path: Path) -> bytes:
    """The file's bytes (at most one over the limit). Opened without blocking and checked to
    be a regular file: a FIFO or device put in a file's place is refused, never waited on."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat_module.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        return fh.read(MAX_FILE_BYTES + 1)


async def _vectors(
    embedder: Embedder | None, chunks: Sequence[Chunk], source: str, report: IngestReport
) -> list[list[float]] | None:
    if embedder is None or not chunks:
        return None
    try:
        vectors = await embedder.embed([c.text for c in chunks])
        if len(vectors) != len(chunks):
            raise TmyError(f"{len(vectors)} vectors for {len(chunks)} chunks")
        return vectors
    except TmyError as exc:
        log.warning("knowledge.embedding_failed", base=report.base, source=source, error=str(exc))
        return None


class _Sync:
    """One ingestion of one base (the state :func:`ingest` threads through its files)."""

    def __init__(self, store: Store, base: str, chunk: ChunkConfig, embedder: Embedder | None):
        self.store, self.base, self.chunk, self.embedder = store, base, chunk, embedder
        self.report = IngestReport(base)
        self.batch = documents.Batch(store, base)

    def skip(self, source: str, reason: str) -> None:
        source, reason = shown(source), shown(reason)
        self.report.skipped.append({"source": source, "reason": reason})
        log.warning("knowledge.skipped", base=self.base, source=source, reason=reason)

    async def file(self, file: File, old: dict[str, Any] | None) -> None:
        """Bring one file's document up to date (see the module docstring)."""
        try:
            stat = file.path.stat()
        except OSError as exc:
            self.skip(file.source, f"cannot read it: {exc.strerror or exc}")
            return
        identity = self.embedder.identity if self.embedder else ""
        if (
            old
            and old.get("size") == stat.st_size
            and old.get("mtime_ns") == stat.st_mtime_ns
            and old.get("fingerprint") == fingerprint(old.get("hash", ""), self.chunk, identity)
        ):
            self.report.unchanged.append(file.source)
            return
        if stat.st_size > MAX_FILE_BYTES:
            self.skip(file.source, f"{stat.st_size} bytes, over the limit of {MAX_FILE_BYTES}")
            return
        try:
            data = await asyncio.to_thread(_read, file.path)
        except OSError as exc:
            self.skip(file.source, f"cannot read it: {exc.strerror or exc}")
            return
        if len(data) > MAX_FILE_BYTES:  # it grew since the stat
            self.skip(file.source, f"over the limit of {MAX_FILE_BYTES} bytes")
            return
        content = layout.content_hash(data)
        record: dict[str, Any] = dict(old or {})
        record.update(size=stat.st_size, mtime_ns=stat.st_mtime_ns)
        if old and old.get("fingerprint") == fingerprint(content, self.chunk, identity):
            await self.store.set(layout.doc_key(self.base, old["id"]), record)  # touched only
            self.report.unchanged.append(file.source)
            return
        try:
            chunks, pages, truncated = await asyncio.to_thread(_parse, file, data, self.chunk)
        except UnreadableDocument as exc:
            self.skip(file.source, str(exc).partition(": ")[2] or str(exc))
            return
        except Exception as exc:  # a reader's bug on a hostile file must not stop the others
            self.skip(file.source, f"cannot be read ({type(exc).__name__}: {exc})")
            return
        if truncated:
            log.warning("knowledge.truncated", base=self.base, source=file.source,
                        kept=MAX_CHUNKS_PER_FILE)  # fmt: skip
        await self.write(file, record, old, chunks, content, pages, data)

    async def write(
        self,
        file: File,
        record: dict[str, Any],
        old: dict[str, Any] | None,
        chunks: list[Chunk],
        content: str,
        pages: int,
        data: bytes,
    ) -> None:
        doc = layout.doc_id(str(file.path))
        vectors = await _vectors(self.embedder, chunks, file.source, self.report)
        old_count = documents.extent(old)
        record.update(id=doc, path=str(file.path), root=str(file.root))
        record.setdefault("source", file.source)
        if len(chunks) > old_count:  # noted first: a crash midway leaves no chunk unaccounted
            reserving = {**record, "reserved": len(chunks)}
            if old is None:
                reserving.update(chunks=0, fingerprint="")  # the next ingestion writes it again
            await self.store.set(layout.doc_key(self.base, doc), reserving)
        embedded = self.embedder.identity if self.embedder and (vectors or not chunks) else ""
        record.pop("reserved", None)
        record.update(
            source=file.source,
            kind=kind_of(file.path),
            hash=content,
            fingerprint=fingerprint(content, self.chunk, embedded),
            chunks=len(chunks),
            bytes=len(data),
            pages=pages,
            vectors=bool(vectors),
            ingested=time.time(),
        )  # written once its chunks are all in place (the batch's last step)
        self.done(await self.batch.add(record, chunks, vectors, old_count, bool(old)))

    def done(self, written: Sequence[documents.Staged]) -> None:
        """Count the documents whose records are written (their chunks all in place)."""
        for staged in written:
            source = str(staged.record["source"])
            (self.report.replaced if staged.replaced else self.report.added).append(source)
            self.report.chunks += int(staged.record["chunks"])


def _under(path: str, roots: Sequence[Path]) -> bool:
    return any(inside(path, str(r)) for r in roots)


async def ingest(
    store: Store,
    base: str,
    roots: Sequence[Path],
    *,
    chunk: ChunkConfig | None = None,
    include: Sequence[str] = DEFAULT_INCLUDE,
    embedder: Embedder | None = None,
    lock_wait: float = LOCK_WAIT,
) -> IngestReport:
    """Ingest the files under ``roots`` into ``base`` (see the module docstring);
    ``lock_wait``: how long another process's ingestion of the base is waited for."""
    sync = _Sync(store, base, chunk or ChunkConfig(), embedder)
    async with store.lock(layout.lock_key(base), wait=lock_wait):
        # scanned once the base is ours: a list made before waiting for another process's
        # ingestion would miss the files it added, and their documents would be pruned
        found = await asyncio.to_thread(scan, roots, include)  # a large folder: off the loop
        for root in found.missing:
            sync.skip(str(root), "no such file or folder (its documents are kept)")
        for refused in found.refused:
            sync.skip(refused["source"], refused["reason"])
        records = await documents.documents(store, base)
        if found.files:
            await documents.note_base(store, base)
        seen = set()
        for file in found.files:
            doc = layout.doc_id(str(file.path))
            seen.add(doc)
            await sync.file(file, records.get(doc))
        sync.done(await sync.batch.flush())
        whole = [Path(os.path.abspath(r)) for r in roots]  # the roots walked to their end
        scanned = [r for r in whole if r not in found.missing and r not in found.partial]
        for doc, record in sorted(records.items()):
            if doc not in seen and _under(str(record.get("path", "")), scanned):
                await documents.remove_document(store, base, record)
                sync.report.removed.append(str(record.get("source")))
    if sync.report.changed or sync.report.skipped:
        fields = sync.report.as_json() | {"unchanged": len(sync.report.unchanged)}
        log.info("knowledge.ingested", **fields)
    return sync.report
