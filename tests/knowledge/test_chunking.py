"""knowledge.chunking: chunks of about `chars`, overlapping, cut at paragraphs and sentences."""

from __future__ import annotations

import itertools

from tmy.knowledge.chunking import Chunk, chunk_sections, spans
from tmy.knowledge.config import ChunkConfig


def _sentences(n: int) -> str:
    return " ".join(f"Sentence number {i} says fact {i}." for i in range(n))


def test_a_short_text_is_one_chunk() -> None:
    assert chunk_sections([("  Short text.  ", None)], ChunkConfig(100, 20)) == [
        Chunk("Short text.", 2, 15)
    ]


def test_chunks_overlap_and_end_at_sentences() -> None:
    text = _sentences(40)
    chunks = chunk_sections([(text, None)], ChunkConfig(200, 50))
    assert len(chunks) > 5
    for a, b in itertools.pairwise(chunks):
        assert len(a.text) <= 200
        assert a.text.endswith(".")  # cut at a sentence end
        assert b.start < a.end  # the next one starts inside this one: they overlap
        assert a.end - b.start <= 50
        assert text[b.start - 1] == " " and b.text.startswith("Sentence")  # at a word
    assert chunks[-1].end == len(text)
    # every sentence is whole in some chunk
    for i in range(40):
        assert any(f"Sentence number {i} says fact {i}." in c.text for c in chunks)


def test_paragraph_breaks_come_first() -> None:
    text = "A" * 120 + ". More words here.\n\n" + "B" * 50 + ". " + "C" * 300
    first = chunk_sections([(text, None)], ChunkConfig(200, 0))[0]
    assert first.text.endswith("More words here.")


def test_text_without_breaks_is_cut_hard_and_still_progresses() -> None:
    text = "x" * 1000
    found = list(spans(text, 300, 100))
    assert found[0] == (0, 300) and found[-1][1] == 1000
    assert all(b[0] > a[0] for a, b in itertools.pairwise(found))


def test_chinese_text_is_cut_at_sentence_marks() -> None:
    text = "".join(f"第{i}条：收到商品后三十天内可以退货。" for i in range(30))
    chunks = chunk_sections([(text, None)], ChunkConfig(100, 20))
    assert all(c.text.endswith("。") for c in chunks[:-1])


def test_pages_are_chunked_apart_and_positions_name_them() -> None:
    chunks = chunk_sections([("Page one text.", 1), ("Page two text.", 2)], ChunkConfig(100, 10))
    assert [c.position for c in chunks] == ["page 1, chars 0–14", "page 2, chars 0–14"]


def test_the_limit_drops_the_rest() -> None:
    assert len(chunk_sections([(_sentences(100), None)], ChunkConfig(100, 0), limit=3)) == 3
