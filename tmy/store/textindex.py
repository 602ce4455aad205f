"""A lexical index kept in the store: namespaces of documents, term → documents.

Memory recall finds its entries through it, and a knowledge base can find its
chunks through it the same way; the store knows nothing of either. A
**namespace** (``ns``, a key-like string: ``mem/user/telegram/ann``,
``kb/faq``) holds **documents**, each with

* an id (``doc``: no whitespace, no ``/``, at most :data:`MAX_DOC_CHARS` characters),
* its **term frequencies** (term → count ≥ 1; the caller tokenised the text
  once, when it wrote it — the store never sees the text),
* a **length** (what BM25 calls ``|d|``; by default the sum of the counts; a
  caller may index marker terms it leaves out of the length),
* an **order** (a float: the caller's eviction order, lowest first — memory
  uses disabled, then least used, then oldest).

The primitives (methods of every :class:`~tmy.store.base.Store`):

* ``index_put(ns, docs)`` — add or replace documents (:class:`IndexDoc`), with
  the namespace's statistics, in one transaction / one script; a replaced
  document's old postings go in the same step. O(terms of the documents): the
  cost of a write does not depend on how many documents the namespace holds.
* ``index_remove(ns, ids)`` — remove documents (absent ones are ignored); the
  number removed.
* ``index_order(ns, orders)`` — set the order of existing documents.
* ``index_stats(ns, terms)`` — :class:`IndexStats`: document count, total
  length, document frequency of each term.
* ``index_search(ns, terms, budget=…)`` — :class:`IndexHits`: the statistics
  and, for a bounded set of candidate documents, their length and the count
  of every asked term. How candidates are found (:func:`plan`): terms are taken
  rarest first; the rarest term's whole posting list is read when it is within
  ``budget``, else only its ``budget`` most recently put documents — and when
  the two rarest terms are both over it, the documents holding both (the
  intersection, newest first: Redis intersects the two sorted sets whole, in C;
  SQLite scans at most 32 × ``budget`` of the rarer term's newest postings). A
  later term is read whole only while it is rare (at most ``budget / 8``
  documents) and the postings read stay within ``budget``; every other term is
  only *probed*: its count is looked up for the candidates already found, never
  read whole. So a very common term ("my", "cat", "喜欢") costs at most
  ``budget`` lookups, whatever its document frequency.
* ``index_lowest(ns, n, term=None)`` — the ``n`` documents of lowest order
  (optionally only those holding ``term``), with their order: the cap policy's
  victims.
* ``index_drop(ns)`` — remove the whole namespace.

Writes are applied at most once like every store write (a Redis script
records its operation id; a resent copy applies nothing). On a Redis Cluster
every key of one namespace is in one hash slot (``{ns}`` is the hash tag).

**Snapshots** carry the index: ``snapshot`` lists each document as a
pseudo-entry ``(tmy/ix/<ns>/<doc>, {"tf": {…}, "len": n, "order": x}, None)``
(:func:`entry_key`, :func:`doc_entry`), which ``restore`` writes back into the
index rather than as a key — so a backup (a file of snapshot entries), and the
SQLite → Redis migration, keep every index, and a backup restored into an
empty store finds the same documents. ``restore(replace=True)`` drops every
namespace first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tmy.errors import StoreError
from tmy.store.codec import check_key

POSTINGS_BUDGET = 200
"""Postings ``index_search`` reads whole (and candidates it probes) unless told otherwise."""

RARE_SHARE = 8
"""A term after the rarest is read whole only when its document frequency is at most
``budget / RARE_SHARE``: a common term adds candidates that only it matches, which the
rarer terms already outrank; it is probed instead."""
MAX_DOC_CHARS = 200
MAX_TF = 1023  # counts above it are kept as 1023 (the Redis layout packs the count in 10 bits)
MAX_LENGTH = 2**40
"""A document's largest length: a namespace's total (a sum of lengths) stays far inside the
64-bit integers SQLite and Redis keep (a length of 2**63 raised OverflowError mid-write)."""
ENTRY_PREFIX = "tmy/ix/"
"""Snapshot pseudo-entries of index documents: ``tmy/ix/<ns>/<doc>`` (not a real key)."""


@dataclass(frozen=True, slots=True)
class IndexDoc:
    """One document to put: its id, term counts, length (None: the counts' sum), order."""

    doc: str
    tf: Mapping[str, int]
    length: int | None = None
    order: float = 0.0

    @property
    def size(self) -> int:
        return sum(self.tf.values()) if self.length is None else self.length


@dataclass(frozen=True, slots=True)
class IndexStats:
    """A namespace's document count ``n``, total length and each asked term's document count."""

    n: int = 0
    total: int = 0
    df: dict[str, int] = field(default_factory=dict)

    @property
    def avgdl(self) -> float:
        return self.total / self.n if self.n else 0.0


@dataclass(frozen=True, slots=True)
class IndexHits:
    """What ``index_search`` found: the statistics, and for each candidate document its
    length and the counts of the asked terms it holds (``docs[doc] = (length, {term: tf})``).

    ``complete`` is False when a posting list was cut to the budget (the
    candidates are the most recent ones, or the intersection of the two rarest terms).
    """

    stats: IndexStats
    docs: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    complete: bool = True


def check_ns(ns: str) -> str:
    """Refuse a namespace no store can hold: the rules of store keys
    (:func:`tmy.store.codec.check_key`: a non-empty string of valid Unicode), and no more.
    A namespace is an owner's key (memory names its namespaces after the keys of its
    owners): one refused here while the key itself is accepted — a user id with a newline,
    an escaped id over 500 characters — was a user whose memory could not be written."""
    try:
        check_key(ns)
    except StoreError:
        raise StoreError(f"invalid index namespace {ns!r}") from None
    return ns


def check_doc(doc: IndexDoc) -> IndexDoc:
    """Refuse a document the layouts cannot hold (StoreError, before anything is written)."""
    d = doc.doc
    if not isinstance(d, str) or not d or len(d) > MAX_DOC_CHARS or "/" in d or d.split() != [d]:
        raise StoreError(f"invalid index document id {d!r} (no spaces or '/', at most 200 chars)")
    for term, count in doc.tf.items():
        if not isinstance(term, str) or not term or "\n" in term:
            raise StoreError(f"invalid index term {term!r} in document {d!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise StoreError(f"invalid count {count!r} of term {term!r} in document {d!r}")
    size = doc.size
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_LENGTH:
        raise StoreError(f"invalid length {size!r} of document {d!r} (0 to 2**40)")
    if isinstance(doc.order, bool) or not isinstance(doc.order, (int, float)):
        raise StoreError(f"invalid order {doc.order!r} of document {d!r}")
    if not math.isfinite(doc.order):  # NaN has no place in the order; ±inf none in JSON
        raise StoreError(f"invalid order {doc.order!r} of document {d!r} (a finite number)")
    return doc


@dataclass(slots=True)
class Plan:
    """Which terms ``index_search`` reads whole, which it cuts, which it only probes."""

    read: list[str] = field(default_factory=list)  # whole posting lists
    cut: list[str] = field(default_factory=list)  # 1 term: its newest; 2: their intersection
    probe: list[str] = field(default_factory=list)


def plan(df: Mapping[str, int], budget: int) -> Plan:
    """Rarest first: the rarest term is read (whole within ``budget``; over it, its newest
    ``budget`` postings — or, when the second rarest is over it too, their intersection);
    a later term is read whole only while it is rare (≤ ``budget`` / :data:`RARE_SHARE`)
    and the postings read stay within ``budget``; every other term is probed."""
    out = Plan()
    spent = 0
    ranked = sorted((t for t in df if df[t] > 0), key=lambda t: (df[t], t))
    for i, term in enumerate(ranked):
        if not out.read and not out.cut and df[term] > budget:
            nxt = ranked[i + 1] if i + 1 < len(ranked) else None
            out.cut = [term] if nxt is None else [term, nxt]
            spent = budget
        elif out.cut and len(out.cut) == 2 and term == out.cut[1]:
            continue
        elif (
            not out.cut and spent + df[term] <= budget and (not out.read or rare(df, term, budget))
        ):
            out.read.append(term)
            spent += df[term]
        else:
            out.probe.append(term)
    return out


def rare(df: Mapping[str, int], term: str, budget: int) -> bool:
    return df[term] * RARE_SHARE <= budget


def entry_key(ns: str, doc: str) -> str:
    """The snapshot pseudo-entry key of one document."""
    return f"{ENTRY_PREFIX}{ns}/{doc}"


def doc_entry(ns: str, doc: IndexDoc) -> tuple[str, dict[str, Any], None]:
    """A document as a snapshot entry."""
    value = {"tf": dict(doc.tf), "len": doc.size, "order": doc.order}
    return entry_key(ns, doc.doc), value, None


def parse_entry(key: str, value: Any) -> tuple[str, IndexDoc]:
    """(ns, document) of a snapshot pseudo-entry; StoreError when it is not one."""
    ns, _, doc = key[len(ENTRY_PREFIX) :].rpartition("/")
    if not key.startswith(ENTRY_PREFIX) or not ns or not isinstance(value, dict):
        raise StoreError(f"not an index document entry: {key!r}")
    tf = value.get("tf")
    if not isinstance(tf, dict):
        raise StoreError(f"index document entry {key!r} has no term counts")
    length = value.get("len")
    order = value.get("order", 0.0)
    if isinstance(order, bool) or not isinstance(order, int | float):
        raise StoreError(f"index document entry {key!r}: order {order!r} is not a number")
    indexed = IndexDoc(doc, tf, length if isinstance(length, int) else None, float(order))
    return check_ns(ns), check_doc(indexed)


def split_entries(
    entries: Iterable[tuple[str, Any, float | None]],
) -> tuple[list[tuple[str, Any, float | None]], dict[str, list[IndexDoc]]]:
    """A snapshot's entries: (the real ones, the index documents by namespace)."""
    plain: list[tuple[str, Any, float | None]] = []
    docs: dict[str, list[IndexDoc]] = {}
    for entry in entries:
        key = entry[0] if isinstance(entry, tuple | list) and entry else None
        if isinstance(key, str) and key.startswith(ENTRY_PREFIX):
            ns, doc = parse_entry(key, entry[1])
            docs.setdefault(ns, []).append(doc)
        else:
            plain.append(entry)
    return plain, docs


def capped(count: int) -> int:
    return count if count <= MAX_TF else MAX_TF


def batched(docs: Sequence[IndexDoc], size: int = 500) -> list[Sequence[IndexDoc]]:
    return [docs[i : i + size] for i in range(0, len(docs), size)]
