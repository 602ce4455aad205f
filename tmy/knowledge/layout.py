"""Where a knowledge base lives in the store: keys, ids, and its one index namespace.

::

    kb/bases                        {name: {"created": t}} — every base that holds documents
    kb/<name>/d/<doc id>            a document: {source, path, root, hash, fingerprint,
                                    chunks, bytes, kind, pages, size, mtime_ns, ingested,
                                    vectors}
    kb/<name>/c/<doc id>/<n>        chunk n: {source, position, text, hash, doc, n}
    kb/<name>/v/<doc id>/<n>        chunk n's vector (with embeddings): "f32:<base64>",
                                    normalised float32 (tmy.knowledge.embedding.pack)
    kb/<name>/lock                  the lease one ingestion of the base holds

The base's chunks are the documents of the store's lexical index namespace
``kb/<name>`` (:mod:`tmy.store.textindex`), with the index document id
``<doc id>.<n>``. A document id is a hash of the file's absolute path (two
folders may each hold an ``index.md``); a base name holds no ``/``, braces or
spaces (:data:`tmy.knowledge.config.NAME_RE`), so ``kb/<name>`` cannot run
into another base's keys nor pick another's Redis Cluster hash tag.
"""

from __future__ import annotations

import hashlib

BASES_KEY = "kb/bases"
PREFIX = "kb/"


def namespace(base: str) -> str:
    """The base's index namespace."""
    return f"kb/{base}"


def base_prefix(base: str) -> str:
    return f"kb/{base}/"


def doc_id(path: str) -> str:
    """The id of the document read from ``path`` (absolute, as a string)."""
    return hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def doc_prefix(base: str) -> str:
    return f"kb/{base}/d/"


def doc_key(base: str, doc: str) -> str:
    return f"kb/{base}/d/{doc}"


def chunk_key(base: str, doc: str, n: int) -> str:
    return f"kb/{base}/c/{doc}/{n}"


def vector_key(base: str, doc: str, n: int) -> str:
    return f"kb/{base}/v/{doc}/{n}"


def lock_key(base: str) -> str:
    return f"kb/{base}/lock"


def index_id(doc: str, n: int) -> str:
    """The chunk's document id in the index namespace."""
    return f"{doc}.{n}"


def parse_index_id(value: str) -> tuple[str, int] | None:
    """(doc id, n) of an index document id, or None."""
    doc, _, n = value.rpartition(".")
    return (doc, int(n)) if doc and n.isdigit() else None


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
