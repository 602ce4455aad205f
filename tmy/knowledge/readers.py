"""Documents as text: Markdown and plain text as they are, HTML's visible text, PDF pages.

A reader turns a file's bytes into **sections**: ``(text, page)`` pairs, where
``page`` is the 1-based PDF page (None for the other kinds). Chunks never span
two sections, so a PDF chunk's position names its page.

* ``.md``, ``.markdown``, ``.txt``, ``.text``, ``.rst`` — UTF-8 (a BOM is
  dropped), UTF-16 with a BOM, else GB18030/GBK, else UTF-8 with invalid bytes
  replaced (:func:`decode`); a file with NUL bytes, or mostly control characters and
  undecodable bytes, is binary, refused.
* ``.html``, ``.htm`` — the text of the document without ``<script>``,
  ``<style>``, ``<template>``, ``<noscript>`` and ``<head>`` other than its
  ``<title>``; block elements become line breaks (stdlib :mod:`html.parser`).
* ``.pdf`` — each page's text extracted by ``pypdf`` (from PyPI); an encrypted
  PDF that does not open with the empty password is refused; at most
  :data:`MAX_PDF_PAGES` pages are read.

Every refusal is an :class:`UnreadableDocument` with a one-line reason; the
ingestion logs it and goes on with the other files.
"""

from __future__ import annotations

import io
import logging
import re
from html.parser import HTMLParser
from pathlib import Path

from tmy.errors import TmyError

TEXT_SUFFIXES = frozenset((".md", ".markdown", ".txt", ".text", ".rst"))
HTML_SUFFIXES = frozenset((".html", ".htm"))
PDF_SUFFIXES = frozenset((".pdf",))
SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES

Section = tuple[str, int | None]
MAX_PDF_PAGES = 2_000
"""Pages of a PDF read (a file holds at most 2,000 chunks, and a page with text gives one)."""
BINARY_SHARE = 0.1
"""A text whose first 64 K characters hold more than this share (and more than 8) of control
characters and undecodable bytes (U+FFFD) is binary, refused (a NUL-free binary named
``.md``); a stray bad byte or an ANSI colour code is not."""


class UnreadableDocument(TmyError):
    """A file that gives no text: binary, encrypted, broken, of an unknown kind."""


def kind_of(path: Path | str) -> str | None:
    """``"text"``, ``"html"``, ``"pdf"`` by the file name's suffix, else None."""
    suffix = Path(path).suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return "text"
    if suffix in HTML_SUFFIXES:
        return "html"
    if suffix in PDF_SUFFIXES:
        return "pdf"
    return None


def read_sections(name: str, data: bytes) -> list[Section]:
    """The text sections of a file called ``name`` holding ``data``; UnreadableDocument."""
    kind = kind_of(name)
    if kind is None:
        raise UnreadableDocument(
            f"{name}: not a kind of document tmy reads ({', '.join(sorted(SUFFIXES))})"
        )
    if kind == "pdf":
        return pdf_sections(name, data)
    text = decode(name, data)
    return [(html_text(text) if kind == "html" else text, None)]


def decode(name: str, data: bytes) -> str:
    """The text of ``data``: UTF-8 (BOM dropped), UTF-16 with a BOM, else GB18030 (GBK text
    files are common where Chinese documents come from), else UTF-8 with bad bytes
    replaced. A file with NUL bytes (and no UTF-16 BOM) is binary: refused."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16").lstrip("\ufeff")
        except UnicodeDecodeError:
            pass
    if b"\0" in data[:65536]:
        raise UnreadableDocument(f"{name}: a binary file (it holds NUL bytes), not text")
    for encoding in ("utf-8", "gb18030"):
        try:
            text = data.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    else:
        text = data.decode("utf-8", errors="replace")
    if _binary(text[:65536]):
        raise UnreadableDocument(f"{name}: a binary file (mostly control or undecodable bytes)")
    return text[1:] if text.startswith("\ufeff") else text


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufffd]")


def _binary(sample: str) -> bool:
    return len(_CONTROL.findall(sample)) > max(8, BINARY_SHARE * len(sample))  # a few: a typo


_SKIP = frozenset(("script", "style", "template", "noscript", "svg", "head"))
_BLOCK_TAGS = "p div br li ul ol tr table h1 h2 h3 h4 h5 h6 section article header footer nav "
_BLOCK_TAGS += "blockquote pre dd dt dl hr title main aside figure figcaption"
_BLOCK = frozenset(_BLOCK_TAGS.split())


class _TextOf(HTMLParser):
    """Collects the visible text; ``<title>`` counts though it sits in ``<head>``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping: list[str] = []
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in _SKIP:
            self.skipping.append(tag)
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in _SKIP and tag in self.skipping:
            while self.skipping and self.skipping.pop() != tag:
                pass
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title or not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The visible text of an HTML document: runs of spaces made one, paragraphs kept."""
    parser = _TextOf()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def pdf_sections(name: str, data: bytes) -> list[Section]:
    """One section per page with text, numbered from 1 (pypdf's extraction), of the first
    :data:`MAX_PDF_PAGES` pages; a longer PDF ends with an empty section numbered its last
    page (a tiny PDF may list one page a million times: each costs an extraction)."""
    from pypdf import PdfReader  # deferred: pypdf is imported only when a PDF is read
    from pypdf.errors import PyPdfError

    # a broken PDF makes pypdf log a warning per object it repairs (thousands, for a hostile
    # one): the refusal says what matters, once
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableDocument(f"{name}: an encrypted PDF (it needs a password)")
        out: list[Section] = []
        pages = reader.pages
        for number in range(1, min(len(pages), MAX_PDF_PAGES) + 1):
            text = pages[number - 1].extract_text() or ""
            if text.strip():
                out.append((text, number))
        if len(pages) > MAX_PDF_PAGES:  # the pages not read: an empty last section says so
            out.append(("", len(pages)))
        return out
    except UnreadableDocument:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, AttributeError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise UnreadableDocument(f"{name}: not a readable PDF ({why})") from None
    except NotImplementedError as exc:  # pypdf: an encryption algorithm it lacks
        raise UnreadableDocument(f"{name}: a PDF pypdf cannot open ({exc})") from None
    except Exception as exc:  # RecursionError on deep nesting, IndexError …: a hostile file
        why = f"{type(exc).__name__}: {exc}"
        raise UnreadableDocument(f"{name}: a PDF pypdf fails on ({why})") from None
