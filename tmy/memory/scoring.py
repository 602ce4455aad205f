"""Lexical relevance for memory recall: BM25 over words and CJK character n-grams.

Tokens:

* space-separated scripts: lowercased (NFKC, case-folded) words of letters and
  digits, without English stop words and with a light plural fold
  (``cats`` → ``cat``), so ``what is my cat called`` keeps ``cat`` and ``called``;
* CJK runs (Han, kana, Hangul) have no spaces, so they give character bigrams
  (weight 1) and single characters (weight 0.4; 1 for a one-character run).
  Grammatical characters (的 了 是 我 什 么 …) are dropped as single characters,
  a bigram of two of them is dropped, and so is a bigram with a particle or
  pronoun (的 了 吗 么 我 你 …), which straddles a word boundary, as are
  question words (时候, 哪里, 怎么 …). ``我最喜欢什么水果``
  and ``我最喜欢的水果是芒果`` then share 最喜 / 喜欢 / 水果 without a segmenter.

Scoring is Okapi BM25 (k1 1.2, b 0.75) over the candidate entries, with ten
empty "background" documents added to the document count so that the IDF of a
handful of entries does not swing wildly. The BM25 score is normalised into a
*relevance* in [0, 1]: the share of the query's weight the entry matches (an
entry that holds every query term once, at average length, scores 1). That
makes one threshold (``min_score``) meaningful whatever the corpus size.

The IDF is measured **at a reference size** (:data:`REFERENCE_DOCS`: the default
200 entries plus the background): past it, a term's document count is scaled
to the share of the collection it covers (``df × 210 / N``) and N to 210. Plain
IDF grows with log N for rare terms while a common term's stays put, so as a
collection grows, an entry matching a query's common words ("cat", "喜欢")
loses to the query's rarer words it lacks and falls under ``min_score`` even
when it is the best match there is (2 of 4 ordinary queries found nothing at
10,000 entries). Measured at the reference size, a term weighs by how common it
is, not by how many entries exist: an entry's relevance to a query is the same
among 200 entries or 100,000 of the same make-up, so one threshold
(``min_score``) keeps its meaning at any size. Up to 200 entries nothing changes.

Entries are tokenised once, when written (their term counts are kept in the
store's index, :mod:`tmy.store.textindex`); :func:`relevance` scores the
candidates the index returns from its statistics, without their texts.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

K1 = 1.2
B = 0.75
BACKGROUND_DOCS = 10
REFERENCE_DOCS = 210  # the default llm.memory.max_entries (200) + BACKGROUND_DOCS
CJK_UNIGRAM_WEIGHT = 0.4

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN_RE = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W_{_CJK}]+)")

STOP_WORDS = frozenset(
    """
    a about above after again all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just let me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves please tell know remember ai bot hey hi hello ok okay yes s t d ll m
    re ve
    """.split()  # noqa: SIM905  (150 words as a list literal: unreadable)
)
STOP_CHARS = frozenset(
    "的了是在我你他她它们这那个有和就不也都吗呢吧啊哦嗯么什很还要会能说给对把被让与及或之其而为着过得地一些哪谁呀嘛啦哈"
)
# Particles and pronouns that are (almost) never part of a content word: a bigram with
# one of them straddles a word boundary (欢什 in 喜欢什么) and only adds noise.
PARTICLES = frozenset("的了是吗呢吧啊哦嗯么什呀嘛啦哈我你他她它")
# Question and function words of two characters: they say how something is asked, not what.
_QUESTION_WORDS = (
    "时候 哪里 哪儿 哪个 怎么 怎样 如何 多少 为何 知道 告诉 记得 请问 一下 "
    "可以 还是 就是 但是 因为 所以 如果 已经 没有 一个 这个 那个 现在 觉得 应该"
)
STOP_BIGRAMS = frozenset(_QUESTION_WORDS.split())


def _fold(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def has_cjk(text: str) -> bool:
    """Does ``text`` contain CJK characters (the confirmations answer in Chinese then)?"""
    return bool(re.search(f"[{_CJK}]", text))


def terms(text: str) -> dict[str, float]:
    """The weighted terms of a query: token -> weight (see the module docstring)."""
    weights: dict[str, float] = {}
    for token, weight in _tokens(text):
        weights[token] = max(weights.get(token, 0.0), weight)
    return weights


def counts(text: str) -> Counter[str]:
    """The term frequencies of a document (an entry or a summary)."""
    return Counter(token for token, _ in _tokens(text))


def _tokens(text: str) -> list[tuple[str, float]]:
    text = unicodedata.normalize("NFKC", text).casefold()
    out: list[tuple[str, float]] = []
    for match in _TOKEN_RE.finditer(text):
        word = match.group("word")
        if word is not None:
            if (len(word) > 1 or word.isdigit()) and word not in STOP_WORDS:
                out.append((_fold(word), 1.0))
            continue
        run = match.group("cjk")
        if len(run) == 1:
            if run not in STOP_CHARS:
                out.append((run, 1.0))
            continue
        quiet = set()  # the characters of question words say nothing on their own either
        for i in range(len(run) - 1):
            if run[i : i + 2] in STOP_BIGRAMS:
                quiet.update((i, i + 1))
        for i, ch in enumerate(run):
            if ch not in STOP_CHARS and i not in quiet:
                out.append((ch, CJK_UNIGRAM_WEIGHT))
        for i in range(len(run) - 1):
            pair = run[i : i + 2]
            if pair[0] in PARTICLES or pair[1] in PARTICLES or pair in STOP_BIGRAMS:
                continue
            if not (pair[0] in STOP_CHARS and pair[1] in STOP_CHARS):
                out.append((pair, 1.0))
    return out


@dataclass(frozen=True, slots=True)
class Match:
    """How well one document matches the query."""

    relevance: float  # normalised BM25, 0..1
    bm25: float  # the raw BM25 score
    matched: tuple[str, ...]  # the query terms it contains (best first)


def idf(n_docs: int, df: float) -> float:
    """BM25's IDF of a term in ``df`` of ``n_docs`` documents, measured at the reference size
    (see the module docstring); the background documents are added here."""
    n = n_docs + BACKGROUND_DOCS
    if n > REFERENCE_DOCS:
        df = df * REFERENCE_DOCS / n
        n = REFERENCE_DOCS
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def relevance(
    query: dict[str, float],
    docs: Mapping[Any, tuple[int, Mapping[str, int]]],
    n_docs: int,
    total_length: int,
    df: Mapping[str, int],
    *,
    detail: int | None = None,
) -> dict[Any, Match]:
    """Score each of ``docs`` (id → (length, its counts of the query's terms)) against
    ``query``, in a collection of ``n_docs`` documents of ``total_length`` with document
    counts ``df`` (the index's statistics). With ``detail``, only the ``detail`` best get
    their matched terms listed (the others' ``matched`` is empty): it is what costs."""
    if not docs:
        return {}
    avgdl = max(1.0, total_length / n_docs) if n_docs else 1.0
    weight = {t: w * idf(n_docs, df.get(t, 0)) for t, w in query.items()}
    norm = sum(weight.values())
    if norm <= 0:
        return {key: Match(0.0, 0.0, ()) for key in docs}
    k_len = K1 * B / avgdl
    k_base = K1 * (1 - B)
    k1p1 = K1 + 1
    raws: dict[Any, float] = {}
    pairs = list(weight.items())
    for key, (length, counts) in docs.items():
        denominator = k_base + k_len * length
        raw = 0.0
        for t, w in pairs:
            tf = counts.get(t)
            if tf:
                raw += w * tf * k1p1 / (tf + denominator)
        raws[key] = raw
    listed = raws if detail is None else sorted(raws, key=raws.__getitem__, reverse=True)[:detail]
    out = {key: Match(min(1.0, raw / norm), raw, ()) for key, raw in raws.items()}
    for key in listed:
        length, counts = docs[key]
        denominator = k_base + k_len * length
        parts = sorted(
            (
                (w * counts[t] * k1p1 / (counts[t] + denominator), t)
                for t, w in pairs
                if counts.get(t)
            ),
            reverse=True,
        )
        out[key] = Match(out[key].relevance, raws[key], tuple(t for _, t in parts))
    return out


def bm25(query: dict[str, float], docs: Sequence[Counter[str]]) -> list[Match]:
    """Score every document of ``docs`` (term counts) against ``query``: :func:`relevance`
    over these documents alone (a result per document, in order)."""
    if not docs:
        return []
    df = {t: sum(1 for d in docs if t in d) for t in query}
    lengths = [sum(d.values()) for d in docs]
    scored = relevance(
        query,
        {i: (n, d) for i, (n, d) in enumerate(zip(lengths, docs, strict=True))},
        len(docs),
        sum(lengths),
        df,
    )
    return [scored[i] for i in range(len(docs))]


def recency(age_seconds: float, half_life_days: float) -> float:
    """A multiplier in [0.8, 1]: 1 for a new entry, halfway to 0.8 after one half-life."""
    if half_life_days <= 0:
        return 1.0
    age_days = max(0.0, age_seconds) / 86400
    return 0.8 + 0.2 * 0.5 ** (age_days / half_life_days)


def importance(level: int | float) -> float:
    """A multiplier for importance 1..5 (default 3 → 1.0): 0.9 … 1.1."""
    level = min(5.0, max(1.0, float(level)))
    return 0.85 + 0.05 * level


def rrf(ranks: Sequence[int | None], k: int = 60) -> float:
    """Reciprocal rank fusion of 1-based ranks (None: not ranked by that list)."""
    return sum(1.0 / (k + r) for r in ranks if r is not None)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 when either is empty or of another length)."""
    if not a or not b or len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0
