"""memory.search: the query terms sent to the index are bounded."""

from __future__ import annotations

from tmy.memory import scoring, search


def test_a_long_query_keeps_its_heaviest_terms_in_query_order() -> None:
    words = [f"w{i:04d}" for i in range(1000)]
    terms = search.query_terms(" ".join(words))
    assert list(terms) == words[: search.MAX_QUERY_TERMS]


def test_an_ordinary_query_keeps_every_term() -> None:
    q = "what is my cat called, and where do I live?"
    assert search.query_terms(q) == scoring.terms(q)


def test_heavier_terms_are_kept_first() -> None:
    weights = scoring.terms(
        "我最喜欢的水果是芒果" * 200 + "".join(chr(0x4E00 + i) for i in range(600))
    )
    kept = search.query_terms(
        "我最喜欢的水果是芒果" * 200 + "".join(chr(0x4E00 + i) for i in range(600))
    )
    assert len(kept) == search.MAX_QUERY_TERMS
    assert min(kept.values()) >= max(w for t, w in weights.items() if t not in kept)
