"""Knowledge base test data: a minimal PDF made by hand, a loopback embeddings server."""

from __future__ import annotations

import hashlib
import io
import math
import re
from typing import Any

from aiohttp import web


def pdf_bytes(pages: list[str]) -> bytes:
    """A valid PDF with one page per text (Helvetica, one line each), xref offsets computed."""
    objects: list[bytes] = []
    n_pages = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n_pages))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n_pages} >>".encode())
    font = 3 + 2 * n_pages
    for i, text in enumerate(pages):
        content = 4 + 2 * i
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    trailer = b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
    out.write(trailer % (len(objects) + 1, xref))
    return out.getvalue()


def encrypted_pdf(pages: list[str], password: str = "secret") -> bytes:
    """The same PDF encrypted with a user password, by pypdf's writer."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(pdf_bytes(pages))))
    writer.encrypt(password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


DIM = 64
_STOP_WORDS = "a an the is are what which of for on and to in any you may our i do"
STOP = frozenset(_STOP_WORDS.split())
SYNONYMS = {"kitty": "cat", "kitten": "cat", "feline": "cat", "automobile": "car", "vehicle": "car"}


def hashed_vector(text: str) -> list[float]:
    """A deterministic embedding: hashed words (synonyms folded) into DIM buckets, normalised."""
    vector = [0.0] * DIM
    for word in re.findall(r"\w+", text.casefold()):
        if word in STOP:
            continue
        word = SYNONYMS.get(word, word)
        bucket = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
        vector[bucket % DIM] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


class EmbeddingServer:
    """``POST /v1/embeddings`` on loopback, answering :func:`hashed_vector` of each input."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail = False
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if self.fail:
            return web.json_response({"error": "down"}, status=503)
        data = [
            {"index": i, "embedding": hashed_vector(text)} for i, text in enumerate(body["input"])
        ]
        return web.json_response({"data": data, "model": body["model"]})

    async def __aenter__(self) -> EmbeddingServer:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
