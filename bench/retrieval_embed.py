"""A local embeddings endpoint for the retrieval benchmark: hashed character n-grams.

    python bench/retrieval_embed.py --port 8123 [--dim 256]

Answers the OpenAI-compatible ``POST /v1/embeddings`` (``{"model", "input": [...]}`` →
``{"data": [{"index", "embedding"}], ...}``), what :mod:`tmy.memory.embeddings` sends, so
a knowledge base's ``embeddings:`` reaches it through an ``llm.models`` entry whose
``base_url`` is ``http://127.0.0.1:PORT/v1``. ``GET /stats`` counts requests and texts.

The vector of a text (:func:`vector`) is deterministic and needs no model: each word
(lowercased, NFKC) adds its own feature and its character trigrams (``<ret``, ``etu``,
``urn>``…), each CJK run its characters and character bigrams; every feature is hashed
(crc32) to one of ``dim`` signed buckets, and the sum is L2-normalised. Two texts are
close when they share words, word pieces ("shipped" ~ "shipping") or Chinese characters —
a stand-in for a real embedding model that is cheap, local and the same on every
machine. It runs in its own process, so its CPU is not counted as the benchmark's.
"""

from __future__ import annotations

import argparse
import math
import re
import unicodedata
import zlib
from collections.abc import Sequence

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W_{_CJK}]+)")
DIM = 256


def features(text: str) -> list[tuple[str, float]]:
    """The weighted features of ``text`` (see the module docstring)."""
    out: list[tuple[str, float]] = []
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).casefold()):
        word = match.group("word")
        if word is not None:
            out.append(("w:" + word, 1.0))
            padded = f"<{word}>"
            out.extend(("g:" + padded[i : i + 3], 0.5) for i in range(len(padded) - 2))
            continue
        run = match.group("cjk")
        out.extend(("c:" + ch, 0.5) for ch in run)
        out.extend(("b:" + run[i : i + 2], 1.0) for i in range(len(run) - 1))
    return out


def vector(text: str, dim: int = DIM) -> list[float]:
    """``text`` as a unit vector of ``dim`` hashed, signed feature buckets."""
    v = [0.0] * dim
    for feature, weight in features(text):
        h = zlib.crc32(feature.encode("utf-8"))
        v[h % dim] += weight if h & 0x80000000 else -weight
    norm = math.sqrt(sum(x * x for x in v))
    return [round(x / norm, 6) for x in v] if norm else v


def vectors(texts: Sequence[str], dim: int = DIM) -> list[list[float]]:
    return [vector(t, dim) for t in texts]


def main() -> None:
    from aiohttp import web  # deferred: only the server process needs it

    p = argparse.ArgumentParser(description="a local OpenAI-compatible embeddings endpoint")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dim", type=int, default=DIM)
    args = p.parse_args()
    stats = {"requests": 0, "inputs": 0}

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return web.json_response({"error": {"message": "input: strings"}}, status=400)
        stats["requests"] += 1
        stats["inputs"] += len(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": vector(t, args.dim)}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": sum(len(t) for t in texts), "total_tokens": 0}
        return web.json_response(
            {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        )

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/stats", get_stats)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
