"""knowledge.readers: text, HTML without scripts and styles, PDF pages; bad files refused."""

from __future__ import annotations

import pytest

from tests.knowledge.support import encrypted_pdf, pdf_bytes
from tmy.knowledge.readers import UnreadableDocument, html_text, kind_of, read_sections


def test_markdown_and_text_are_read_as_they_are() -> None:
    assert read_sections("a.md", "# Title\n\nBody é".encode()) == [("# Title\n\nBody é", None)]
    assert read_sections("b.TXT", "\ufeff退货政策".encode()) == [("退货政策", None)]


def test_html_gives_its_visible_text() -> None:
    html = (
        "<html><head><title>Hours</title><style>p{color:red}</style>"
        "<script>var secret = 1;</script></head><body><h1>Opening</h1>"
        "<p>We open at <b>9&nbsp;am</b>.</p><noscript>enable js</noscript><p>Closed Sunday</p>"
        "</body></html>"
    )
    text = html_text(html)
    assert "secret" not in text and "color" not in text and "enable js" not in text
    assert text.split("\n\n") == ["Hours", "Opening", "We open at 9 am.", "Closed Sunday"]
    assert read_sections("x.htm", html.encode())[0][0] == text


def test_pdf_pages_are_numbered() -> None:
    data = pdf_bytes(["Returns within 30 days", "", "Shipping (free) over 50"])
    assert read_sections("m.pdf", data) == [
        ("Returns within 30 days", 1),
        ("Shipping (free) over 50", 3),
    ]


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("secret.pdf", encrypted_pdf(["hidden"]), "an encrypted PDF"),
        ("broken.pdf", b"%PDF-1.4\nnot really", "not a readable PDF"),
        ("blob.txt", b"\x00\x01\x02binary", "a binary file"),
        ("sheet.xlsx", b"PK...", "not a kind of document"),
    ],
    ids=["encrypted", "broken", "binary", "xlsx"],  # the encrypted bytes differ per process (xdist)
)
def test_bad_files_are_refused_with_a_reason(name: str, data: bytes, reason: str) -> None:
    with pytest.raises(UnreadableDocument, match=reason):
        read_sections(name, data)


def test_kinds() -> None:
    assert [kind_of(n) for n in ("a.md", "b.html", "c.PDF", "d.rst", "e.doc")] == [
        "text", "html", "pdf", "text", None,
    ]  # fmt: skip


def test_text_encodings() -> None:
    from tmy.knowledge.readers import decode

    assert decode("a.txt", "退货政策".encode("gbk")) == "退货政策"
    assert decode("a.txt", "Grüße".encode("utf-16")) == "Grüße"
    assert decode("a.txt", b"caf\xc3\xa9") == "café"
    assert decode("a.txt", b"\x80abc") == "\ufffdabc"  # neither: bad bytes replaced
