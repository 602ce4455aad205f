"""The retrieval benchmark (bench/retrieval.py): its corpus, its local embedder, a quick run."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import retrieval_data  # noqa: E402
import retrieval_embed  # noqa: E402


def test_the_corpus_is_the_same_every_time_and_each_answer_is_in_its_document() -> None:
    docs = retrieval_data.corpus(240)
    again = retrieval_data.corpus(240)
    assert [(d.path, d.text) for d in docs] == [(d.path, d.text) for d in again]
    assert len({d.entity for d in docs}) == 240
    questions = retrieval_data.questions(docs)
    retrieval_data.check(docs, questions)  # each value once in its document, never shared
    assert len(questions) == 100
    assert Counter(q.lang for q in questions) == {"en": 50, "zh": 50}
    assert set(Counter(q.wording for q in questions)) == set(retrieval_data.WORDINGS)
    assert {d.path.rsplit(".", 1)[1] for d in docs} == {"md", "txt", "html"}
    # paraphrased: no question is a sentence of its document
    by_path = {d.path: d for d in docs}
    assert not any(q.text.rstrip("?？") in by_path[q.path].text for q in questions)
    # a larger corpus starts with the smaller one
    assert [d.text for d in retrieval_data.corpus(300)[:240]] == [d.text for d in docs]


def test_the_local_embedding_is_unit_length_and_close_for_shared_word_pieces() -> None:
    shipped = retrieval_embed.vector("Orders are shipped within 12 hours")
    assert shipped == retrieval_embed.vector("Orders are shipped within 12 hours")
    assert math.isclose(sum(x * x for x in shipped), 1.0, rel_tol=1e-4)

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    shipping = retrieval_embed.vector("What is the shipping time?")
    warranty = retrieval_embed.vector("How long is the warranty?")
    assert cos(shipped, shipping) > cos(shipped, warranty)
    assert len(retrieval_embed.vector("保修期是多久")) == retrieval_embed.DIM


@pytest.mark.slow
def test_a_quick_run_measures_both_retrievals_and_checks_every_answer() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "retrieval.py"), "--quick", "--no-write",
         "--stores", "sqlite", "--no-hybrid-scale"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "floor: brute-force BM25" in done.stdout
    assert "floor: get_many of 4 chunks" in done.stdout
    assert "hybrid (+ vectors, RRF)" in done.stdout
