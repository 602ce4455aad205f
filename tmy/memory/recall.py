"""Recall: the relevant entries and summaries for one question, as one delimited block.

What may be recalled for a message is fixed by who sends it and where, never
by what it says: the user's own entries (``mem/user/<platform>/<user>``), the
entries of the chat it is sent in, the global ones, and the user's own
summaries of conversations in this chat. Each entry is checked again against
its owner / chat after it is read, so a mis-filed entry cannot leak either.

Entries are found through the store's lexical index (:mod:`tmy.memory.search`):
a recall reads a bounded set of candidates per owner and then only the
entries that can still be chosen — the cost does not grow with the number of
entries (about 1–3 ms at 100,000). An entry whose relevance is below
``min_score / 1.1`` or below ``0.6 × 0.72 / 1.1`` of the best relevance cannot
reach the thresholds whatever its recency and importance, so it is not read;
at most :data:`READ_MAX` entries are.

Each candidate gets a score::

    score = relevance × recency × importance

``relevance`` is normalised BM25 (:mod:`tmy.memory.scoring`, 0…1), ``recency``
0.8…1 (half-life ``llm.memory.recency_half_life_days``), ``importance`` 0.9…1.1
(REMEMBER's ``importance: 1..5``). An entry is recalled when its score reaches
``min_score`` and at least 60 % of the best entry's score — there is no "recent
entries" fallback: when nothing is relevant, nothing is injected. With
embeddings configured, an entry whose cosine similarity reaches
``embeddings.min_similarity`` is a candidate too, and candidates are ranked by
reciprocal rank fusion of the lexical and the dense ranking (× recency ×
importance).

The block goes into the request's dynamic tail, after the time/sender lines and
before the question — never into the system prompt, so the stable prefix stays
byte-identical and cacheable. Entry texts are single lines with ``<`` and ``>``
replaced, cut to ``max_entry_chars``, and the block stops growing at
``max_block_chars``: nothing a user remembered can close the block early or
pass for an instruction outside it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tmy.config.memory import MemoryConfig, RecallSpec
from tmy.errors import TmyError
from tmy.logs import get_logger
from tmy.memory import dialog, legacy, scoring, search
from tmy.memory.block import render
from tmy.memory.embeddings import EmbeddingError, embed, vectors_for
from tmy.memory.entries import entries_of, scope_key
from tmy.memory.runtime import memory_of
from tmy.message import Message
from tmy.types import Services

log = get_logger("tmy.memory")

RELATIVE_CUT = 0.6  # an entry must score at least 60 % of the best one's score
MAX_BOOST = 1.0 * 1.1  # recency × importance at most (see scoring.recency / importance)
MIN_BOOST = 0.8 * 0.9  # … and at least
READ_MAX = 200  # entries read for one recall, at most (the best by relevance)


@dataclass
class Scored:
    """One candidate and the parts of its score (``ctx`` prints them)."""

    kind: str  # "entry" | "dialogue"
    item: dict[str, Any]
    key: str
    relevance: float = 0.0
    bm25: float = 0.0
    matched: tuple[str, ...] = ()
    recency: float = 1.0
    importance: float = 1.0
    similarity: float | None = None
    rrf: float | None = None
    score: float = 0.0
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.item.get("id"),
            "kind": self.kind,
            "scope": self.item.get("scope", "dialogue"),
            "text": self.item.get("text"),
            "score": round(self.score, 4),
            "relevance": round(self.relevance, 4),
            "bm25": round(self.bm25, 4),
            "recency": round(self.recency, 4),
            "importance": round(self.importance, 4),
            "matched": list(self.matched[:8]),
        }
        if self.similarity is not None:
            out["similarity"] = round(self.similarity, 4)
        if self.rrf is not None:
            out["rrf"] = round(self.rrf, 5)
        if self.why:
            out["why"] = self.why
        return out


@dataclass
class Recall:
    """What a ``memory:`` step recalled, and why."""

    block: str = ""
    entries: list[Scored] = field(default_factory=list)
    dialogues: list[Scored] = field(default_factory=list)
    rejected: list[Scored] = field(default_factory=list)
    min_score: float = 0.0
    considered: int = 0
    mode: str = "lexical"
    notes: list[str] = field(default_factory=list)

    def details(self) -> dict[str, Any]:
        """For the step record (``ask --json`` → ``extra.memory``) and the ``ctx`` inspector."""
        return {
            "mode": self.mode,
            "min_score": self.min_score,
            "considered": self.considered,
            "entries": [s.as_dict() for s in self.entries],
            "dialogues": [s.as_dict() for s in self.dialogues],
            "rejected": [s.as_dict() for s in self.rejected],
            "block_chars": len(self.block),
            **({"notes": self.notes} if self.notes else {}),
        }


def _visible(scope: str, item: dict[str, Any], message: Message) -> bool:
    """The namespace check, again, on the entry itself (a second line of defence)."""
    if not item.get("enabled", True):
        return False
    if scope == "user":
        return item.get("user") == message.user and item.get("platform") == message.platform
    if scope == "chat":
        return item.get("chat") == message.chat and item.get("platform") == message.platform
    return scope == "global"


async def recall(
    services: Services,
    message: Message,
    spec: RecallSpec,
    query: str,
    *,
    touch_entries: bool = True,
    job: Any = None,
    tz: Any = None,
) -> Recall:
    """What ``spec`` recalls for ``query`` sent by ``message``'s sender in its chat.

    With ``job`` (a running LLM step), a recorded conversation of this chat that
    has ended by silence is summarised first, so this request already sees it.
    """
    mrt = memory_of(services)
    cfg = mrt.config
    store = services.store
    now = time.time()
    min_score = cfg.min_score if spec.min_score is None else spec.min_score
    out = Recall(min_score=min_score)
    scope_keys = [(s, scope_key(s, message)) for s in spec.scopes] if spec.max else []
    keys = [k for _, k in scope_keys]
    want_dialogue = spec.dialogue > 0 and cfg.dialogue.enabled
    if want_dialogue:
        keys.append(dialog.dialog_key(message.platform, message.user))
    closing = job is not None and spec.summarize and cfg.dialogue.enabled
    if closing:
        keys.append(dialog.open_key(message))
    lexical = bool(scope_keys and query.strip())
    every = cfg.embeddings.enabled
    reading = store.get_many(keys) if keys else _nothing()
    if lexical:  # searched while the owner keys are read: they hold an old list only rarely
        values, found = await asyncio.gather(
            reading, search.find(store, scope_keys, query, None, every_entry=every)
        )
    else:
        values, found = await reading, None
    by_key = dict(zip(keys, values, strict=True))

    summaries: list[dict[str, Any]] = []
    if want_dialogue:
        summaries = dialog.summaries_of(by_key[dialog.dialog_key(message.platform, message.user)])
    if closing and dialog.expired(by_key[dialog.open_key(message)], now):
        record = await dialog.claim_expired(store, message)
        if record is not None:
            summaries.append(await dialog.close(job, record, cfg))

    old = {k: entries_of(by_key[k]) for _, k in scope_keys if isinstance(by_key[k], list)}
    if old:  # entries of an older tmy's list: moved on first touch, else scored from it
        if touch_entries:
            for key in old:
                await legacy.migrate(store, key, by_key[key])
            old = {}
        if lexical:
            found = await search.find(store, scope_keys, query, old, every_entry=every)
    if found is not None:
        out.considered = found.considered
        await _score_entries(services, cfg, spec, query, found, message, out, now, touch_entries)
        shown = [*out.entries, *out.rejected]
        terms = found.matched([(s.key, s.item["id"]) for s in shown])
        for s in shown:
            s.matched = terms.get((s.key, s.item["id"]), s.matched)
    if want_dialogue and summaries:
        _score_dialogues(cfg, spec, query, summaries, message, out, now, min_score, mrt.counted)
    out.block, out.entries, out.dialogues = render(out.entries, out.dialogues, cfg, tz)
    if touch_entries and out.entries:
        by_owner: dict[str, set[str]] = {}
        for s in out.entries:
            by_owner.setdefault(s.key, set()).add(s.item["id"])
        for key, ids in by_owner.items():
            await mrt.uses.count(services.store, mrt.services.store, key, ids, now)
    return out


async def _nothing() -> list[Any]:
    return []


async def _read(
    services: Services,
    cfg: MemoryConfig,
    found: search.Found,
    message: Message,
    out: Recall,
    now: float,
) -> list[Scored]:
    """The candidates that can still be chosen (and five near misses), read and checked
    again against their owner (:func:`_visible`), with their score parts."""
    ranked = found.candidates
    if cfg.embeddings.enabled:
        wanted = ranked if len(ranked) <= search.DENSE_SCAN_MAX else ranked[:READ_MAX]
    else:
        best = ranked[0].match.relevance if ranked else 0.0
        floor = max(out.min_score / MAX_BOOST, RELATIVE_CUT * MIN_BOOST / MAX_BOOST * best)
        above = [c for c in ranked[:READ_MAX] if c.match.relevance >= floor]
        wanted = ranked[: len(above) + 5]  # and five near misses, for `rejected`
    candidates: list[Scored] = []
    for c in await search.read(services.store, wanted):
        item = c.entry
        if item is None or not _visible(c.scope, item, message):
            continue
        item.setdefault("scope", c.scope)
        scored = Scored("entry", item, c.owner)
        scored.relevance, scored.bm25 = c.match.relevance, c.match.bm25
        scored.matched = c.match.matched
        created = float(item.get("created") or now)
        scored.recency = scoring.recency(now - created, cfg.recency_half_life_days)
        scored.importance = scoring.importance(item.get("importance") or 3)
        scored.score = scored.relevance * scored.recency * scored.importance
        candidates.append(scored)
    return candidates


async def _score_entries(
    services: Services,
    cfg: MemoryConfig,
    spec: RecallSpec,
    query: str,
    found: search.Found,
    message: Message,
    out: Recall,
    now: float,
    save_vectors: bool,
) -> None:
    candidates = await _read(services, cfg, found, message, out, now)
    min_score = out.min_score
    emb = cfg.embeddings
    if emb.enabled:
        try:
            (qvec,) = await embed(services, emb, [query])
            vectors = await vectors_for(
                services, emb, [c.item for c in candidates], save=save_vectors
            )
        except (EmbeddingError, TmyError) as exc:
            log.warning("memory.embedding_failed", error=str(exc))
            out.notes.append(f"embeddings failed, lexical only: {exc}")
        else:
            out.mode = "hybrid"
            for c in candidates:
                c.similarity = scoring.cosine(qvec, vectors.get(c.item["id"], []))
            lexical = sorted((c for c in candidates if c.relevance > 0), key=lambda c: -c.score)
            dense = sorted((c for c in candidates if c.similarity), key=lambda c: -c.similarity)
            lex_rank = {id(c): i for i, c in enumerate(lexical, 1)}
            dense_rank = {id(c): i for i, c in enumerate(dense, 1)}
            for c in candidates:
                c.rrf = scoring.rrf([lex_rank.get(id(c)), dense_rank.get(id(c))])
            chosen = []
            for c in candidates:
                lexical_ok = c.relevance > 0 and c.score >= min_score
                dense_ok = (c.similarity or 0) >= emb.min_similarity
                if lexical_ok or dense_ok:
                    c.why = "lexical" if not dense_ok else "dense" if not lexical_ok else "both"
                    chosen.append(c)
                else:
                    c.why = (
                        f"score {c.score:.2f} < min_score {min_score:g} and similarity "
                        f"{c.similarity or 0:.2f} < {emb.min_similarity:g}"
                    )
            chosen.sort(key=lambda c: -(c.rrf or 0) * c.recency * c.importance)
            _keep(out, candidates, chosen, spec.max)
            return
    best = max((c.score for c in candidates), default=0.0)
    chosen = []
    for c in candidates:
        if c.relevance <= 0:
            c.why = "no term in common"
        elif c.score < min_score:
            c.why = f"score {c.score:.2f} < min_score {min_score:g}"
        elif c.score < RELATIVE_CUT * best:
            c.why = f"score {c.score:.2f} < {RELATIVE_CUT:g} × the best ({best:.2f})"
        else:
            chosen.append(c)
    chosen.sort(key=lambda c: -c.score)
    _keep(out, candidates, chosen, spec.max)


def _keep(out: Recall, candidates: list[Scored], chosen: list[Scored], limit: int) -> None:
    for c in chosen[limit:]:
        c.why = f"beyond memory.max ({limit})"
    out.entries = chosen[:limit]
    kept = {id(c) for c in out.entries}
    rest = [c for c in candidates if id(c) not in kept and (c.relevance > 0 or c.similarity)]
    rest.sort(key=lambda c: -max(c.score, c.similarity or 0))
    out.rejected = rest[:5]


def _score_dialogues(
    cfg: MemoryConfig,
    spec: RecallSpec,
    query: str,
    summaries: list[dict[str, Any]],
    message: Message,
    out: Recall,
    now: float,
    min_score: float,
    counted: Callable[[str], Counter[str]],
) -> None:
    mine = [
        s
        for s in summaries
        if s.get("chat") == message.chat
        and s.get("platform", message.platform) == message.platform
        and s.get("user", message.user) == message.user
    ]
    if not mine:
        return
    matches = scoring.bm25(scoring.terms(query), [counted(s["text"]) for s in mine])
    window = max(cfg.dialogue.recent_days, 0.001) * 86400
    scored = []
    for s, m in zip(mine, matches, strict=True):
        age = max(0.0, now - float(s.get("created") or now))
        fresh = 0.5 ** (age / window)
        key = dialog.dialog_key(message.platform, message.user)
        c = Scored("dialogue", s, key, m.relevance, m.bm25, m.matched, fresh)
        c.score = 0.5 * m.relevance + 0.5 * fresh
        if m.relevance >= min_score or age <= window:
            c.why = "relevant" if m.relevance >= min_score else "recent"
            scored.append(c)
    scored.sort(key=lambda c: -c.score)
    out.dialogues = scored[: spec.dialogue]
