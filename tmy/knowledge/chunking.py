"""Documents cut into chunks of about ``chars`` characters that share about ``overlap``.

A chunk ends where the text breaks best within its last half: a paragraph
break (a blank line) first, then the end of a sentence (``. ! ?`` followed by a
space, or ``。！？；``) or a line break, then a space; only a text with none of
them is cut mid-word. The next chunk starts ``overlap`` characters before that
end, moved forward to the start of a word (or of a sentence, when one starts
inside the overlap), so a fact cut in two by one chunk's end is whole in the
next one. Chunks never span two sections (PDF pages).

A chunk's **position** says where it is: ``chars 1600–2400`` (offsets in its
section's text), ``page 3, chars 0–800`` for a PDF.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tmy.knowledge.config import ChunkConfig

_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_SENTENCE = re.compile(r"[.!?](?=\s)|[。！？；]|\n")
_SPACE = re.compile(r"\s")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: its text (stripped), where it starts and ends in its section, its page."""

    text: str
    start: int
    end: int
    page: int | None = None

    @property
    def position(self) -> str:
        where = f"chars {self.start}–{self.end}"
        return where if self.page is None else f"page {self.page}, {where}"


def _last(pattern: re.Pattern[str], text: str, lo: int, hi: int) -> int | None:
    """The end of the last match of ``pattern`` in ``text[lo:hi]``, or None."""
    found = None
    for match in pattern.finditer(text, lo, hi):
        found = match.end()
    return found


def _break(text: str, start: int, limit: int) -> int:
    """Where a chunk from ``start`` of at most ``limit`` characters ends best."""
    end = start + limit
    if end >= len(text):
        return len(text)
    lo = start + limit // 2
    for pattern in (_PARAGRAPH, _SENTENCE, _SPACE):
        found = _last(pattern, text, lo, end + 1)
        if found is not None and found > start:
            return found
    return end


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Where the chunk after ``[start, end)`` begins: ``overlap`` before ``end``, at a word."""
    if overlap <= 0 or end >= len(text):
        return end
    back = max(start + 1, end - overlap)
    sentence = _SENTENCE.search(text, back, end)
    if sentence is not None and sentence.end() < end:
        back = sentence.end()
    else:
        space = _SPACE.search(text, back, end)
        if space is not None and space.end() < end:
            back = space.end()
    return back


def spans(text: str, chars: int, overlap: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each chunk of ``text`` (see the module docstring)."""
    start = 0
    while start < len(text):
        while start < len(text) and text[start].isspace():
            start += 1
        if start >= len(text):
            return
        end = _break(text, start, chars)
        yield start, end
        if end >= len(text):
            return
        start = max(_next_start(text, start, end, overlap), start + 1)


def chunk_sections(
    sections: Sequence[tuple[str, int | None]], config: ChunkConfig, limit: int | None = None
) -> list[Chunk]:
    """The chunks of every section, in order (at most ``limit``: the rest are dropped)."""
    out: list[Chunk] = []
    for text, page in sections:
        for start, end in spans(text, config.chars, config.overlap):
            piece = text[start:end].strip()
            if piece:
                out.append(Chunk(piece, start, end, page))
                if limit is not None and len(out) >= limit:
                    return out
    return out
