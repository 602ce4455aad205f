"""Finding the entries that match a query: the index's candidates scored, the best ones read.

For each owner searched (the sender's own entries, the chat's, the global
ones) the store's index returns a bounded set of candidates with their lengths
and term counts (:meth:`~tmy.store.base.Store.index_search`: one read per
owner, whatever the owner holds). They are scored together — one collection:
the owners' document counts, lengths and document frequencies added up — by
:func:`tmy.memory.scoring.relevance`, and only the entries that can still be
chosen are read (``get_many`` of their keys). Entries still in an old list
(:mod:`tmy.memory.legacy`) are scored with them from the list itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tmy.memory import layout, scoring
from tmy.store.base import Store

DENSE_SCAN_MAX = 2_000
"""With embeddings, owners holding at most this many entries in all are read whole (every
entry a dense candidate, as before); past it, only the lexical candidates are."""


@dataclass(slots=True)
class Candidate:
    """One entry found: where it is, how it matches, and (once read) the entry itself."""

    scope: str
    owner: str
    entry_id: str
    match: scoring.Match
    entry: dict[str, Any] | None = None


@dataclass(slots=True)
class Found:
    """Candidates best relevance first, and how many entries the owners hold in all (and
    what scored them: the query's terms, the collection's statistics, each one's counts)."""

    candidates: list[Candidate] = field(default_factory=list)
    considered: int = 0
    terms: dict[str, float] = field(default_factory=dict)
    total: int = 0
    df: dict[str, int] = field(default_factory=dict)
    docs: dict[tuple[str, str], tuple[int, Mapping[str, int]]] = field(default_factory=dict)

    def matched(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, ...]]:
        """The matched terms (best first) of the candidates ``keys`` ((owner, id) pairs):
        listed for the few shown, not for every candidate scored."""
        sub = {k: self.docs[k] for k in keys if k in self.docs}
        scored = scoring.relevance(self.terms, sub, self.considered, self.total, self.df)
        return {k: m.matched for k, m in scored.items()}


MAX_QUERY_TERMS = 256
"""A query's terms looked up in the index: the heaviest this many (by weight, then first in
the query). A question of ordinary length has far fewer; a pasted 19,000-character CJK text
has ~33,000 (bigrams and characters), each a lookup in every owner searched."""

_NONE = scoring.Match(0.0, 0.0, ())


def query_terms(query: str) -> dict[str, float]:
    """The weighted terms of ``query`` (:func:`tmy.memory.scoring.terms`), at most
    :data:`MAX_QUERY_TERMS` of them: the heaviest, the earliest among equals."""
    terms = scoring.terms(query)
    if len(terms) <= MAX_QUERY_TERMS:
        return terms
    kept = sorted(terms.items(), key=lambda tw: -tw[1])[:MAX_QUERY_TERMS]  # stable: query order
    return dict(kept)


async def find(
    store: Store,
    owners: Sequence[tuple[str, str]],
    query: str,
    legacy: Mapping[str, list[dict[str, Any]]] | None = None,
    *,
    every_entry: bool = False,
) -> Found:
    """Score the candidates of ``owners`` ((scope, owner key) pairs) for ``query``.

    ``legacy``: owner key → entries of an old list there (or entries already read: an owner
    not in ``owners`` is not searched), scored from their text.
    ``every_entry``: add every entry of owners holding at most :data:`DENSE_SCAN_MAX`
    (relevance 0 when it matches nothing) — the dense candidates of hybrid recall.
    Nothing is read yet (:func:`read`), but the old lists' entries.
    """
    legacy = legacy or {}
    terms = query_terms(query)
    names = list(terms)
    hits = await store.index_search_many([owner for _, owner in owners], names)
    n = total = 0
    df = dict.fromkeys(names, 0)
    docs: dict[tuple[str, str], tuple[int, Mapping[str, int]]] = {}
    scope_of = {}
    for (scope, owner), hit in zip(owners, hits, strict=True):
        scope_of[owner] = scope
        n, total = n + hit.stats.n, total + hit.stats.total
        for t in names:
            df[t] += hit.stats.df.get(t, 0)
        for doc, counts in hit.docs.items():
            docs[owner, doc] = counts
    old: dict[tuple[str, str], dict[str, Any]] = {}
    for owner, items in legacy.items():
        for entry in items:
            counts = scoring.counts(str(entry.get("text", "")))
            n, total = n + 1, total + sum(counts.values())
            for t in names:
                df[t] += 1 if t in counts else 0
            docs[owner, entry["id"]] = (sum(counts.values()), counts)
            old[owner, entry["id"]] = entry
    matches = scoring.relevance(terms, docs, n, total, df, detail=0) if terms else {}
    out = Found(considered=n, terms=terms, total=total, df=df, docs=docs)
    for (owner, doc), match in matches.items():
        if match.relevance > 0:
            out.candidates.append(
                Candidate(
                    scope_of.get(owner) or layout_scope(owner),
                    owner,
                    doc,
                    match,
                    old.get((owner, doc)),
                )
            )
    if every_entry and n <= DENSE_SCAN_MAX:
        await _every_entry(store, owners, hits, old, out)
    out.candidates.sort(key=lambda c: (-c.match.relevance, c.entry_id))
    return out


async def _every_entry(
    store: Store,
    owners: Sequence[tuple[str, str]],
    hits: Sequence[Any],
    old: dict[tuple[str, str], dict[str, Any]],
    out: Found,
) -> None:
    seen = {(c.owner, c.entry_id) for c in out.candidates}
    for (scope, owner), hit in zip(owners, hits, strict=True):
        for doc, _ in await store.index_lowest(owner, hit.stats.n):
            if (owner, doc) not in seen:
                seen.add((owner, doc))
                out.candidates.append(Candidate(scope, owner, doc, _NONE))
    for (owner, doc), entry in old.items():
        if (owner, doc) not in seen:
            out.candidates.append(Candidate(layout_scope(owner), owner, doc, _NONE, entry))


def layout_scope(owner: str) -> str:
    return "global" if owner == layout.GLOBAL_KEY else owner.split("/")[1]


async def read(store: Store, candidates: Sequence[Candidate]) -> list[Candidate]:
    """``candidates`` with their entries read (one ``get_many``); those whose key is gone
    (deleted since the index was read) are left out."""
    todo = [c for c in candidates if c.entry is None]
    if todo:
        values = await store.get_many([layout.doc_key(c.owner, c.entry_id) for c in todo])
        for c, value in zip(todo, values, strict=True):
            if isinstance(value, dict) and value.get("id") == c.entry_id and "text" in value:
                c.entry = value
    return [c for c in candidates if c.entry is not None]
