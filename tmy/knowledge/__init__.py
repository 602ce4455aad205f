"""Knowledge bases over documents, for the LLM answerer's ``knowledge:`` option.

Files (Markdown, text, HTML, PDF) under a base's paths are cut into chunks kept
in the store and indexed lexically (BM25 over words and CJK n-grams, the
store's inverted index, as memory recall is) and, with ``embeddings:``, by
vectors fused by reciprocal rank; the daemon re-ingests changed files by
content hash. See docs/knowledge.md.

* :func:`ingest` (:mod:`tmy.knowledge.ingest`) and :func:`search`
  (:mod:`tmy.knowledge.search`): the two operations, on any store;
* :class:`Embedder`: vectors from any async function (:func:`configured`: a
  base's ``embeddings:`` model);
* :data:`EXTENSION`: the ``knowledge:`` section, the ``kb`` command, the
  provider plugged into the LLM runtime, the daemon's watcher.
"""

from __future__ import annotations

from tmy.knowledge.bases import KnowledgeBases, knowledge_of
from tmy.knowledge.chunking import Chunk, chunk_sections
from tmy.knowledge.config import ChunkConfig, KbEmbeddings, KnowledgeBaseConfig, parse
from tmy.knowledge.documents import base_names, drop_base
from tmy.knowledge.embedding import Embedder, configured
from tmy.knowledge.extension import EXTENSION
from tmy.knowledge.ingest import IngestReport, ingest
from tmy.knowledge.search import search

__all__ = [
    "EXTENSION",
    "Chunk",
    "ChunkConfig",
    "Embedder",
    "IngestReport",
    "KbEmbeddings",
    "KnowledgeBaseConfig",
    "KnowledgeBases",
    "base_names",
    "chunk_sections",
    "configured",
    "drop_base",
    "ingest",
    "knowledge_of",
    "parse",
    "search",
]
