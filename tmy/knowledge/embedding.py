"""Vectors for a knowledge base: any async function of texts, or the configured model.

An :class:`Embedder` is what ingestion and search take: ``embed(texts)`` gives one
vector per text (TmyError on failure) and ``identity`` names what made them — it
is kept with every document, so configuring another model re-embeds them at the
next ingestion. :func:`configured` makes one from a base's ``embeddings:`` through
memory's client (:func:`tmy.memory.embeddings.embed`: an OpenAI-compatible
``POST {base_url}/embeddings`` of a model in ``llm.models``); a benchmark or a
test passes its own function instead.

Vectors are kept normalised, as float32 in base64 (``"f32:…"``: 8 KB for 1,536
dimensions where a JSON list of rounded numbers takes 12 KB), so a search
decodes one quickly and its cosine with the (normalised) query is a plain dot
product: half the work of :func:`tmy.memory.scoring.cosine` per chunk, which a
hybrid search pays for every chunk of a small base (up to
:data:`tmy.knowledge.search.DENSE_SCAN_FLOATS` floats).
"""

from __future__ import annotations

import base64
import math
import operator
from array import array
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tmy.config.memory import EmbeddingsConfig
from tmy.knowledge.config import KbEmbeddings
from tmy.memory.embeddings import embed
from tmy.types import Services

Embed = Callable[[Sequence[str]], Awaitable[list[list[float]]]]


@dataclass(frozen=True, slots=True)
class Embedder:
    """``embed(texts)`` → vectors; ``identity``: what makes them; ``min_similarity``: the
    cosine under which a chunk is not ranked by vector at search."""

    identity: str
    embed: Embed
    min_similarity: float = 0.3


def configured(services: Services, cfg: KbEmbeddings) -> Embedder:
    """The embedder of a base's ``embeddings:`` (the app's HTTP client, ``llm.models``)."""
    memory_cfg = EmbeddingsConfig(model=cfg.model, id=cfg.id, timeout=cfg.timeout)

    async def vectors(texts: Sequence[str]) -> list[list[float]]:
        return await embed(services, memory_cfg, texts)

    return Embedder(cfg.identity, vectors, cfg.min_similarity)


PACKED = "f32:"


def normalised(vector: Sequence[float]) -> array[float]:
    """``vector`` scaled to length 1 (all zeros stays zeros), as float32."""
    norm = math.sqrt(sum(float(x) * float(x) for x in vector))
    return array("f", (float(x) / norm for x in vector) if norm else (0.0 for _ in vector))


def pack(vector: Sequence[float]) -> str:
    """A vector as stored: normalised float32 in base64."""
    return PACKED + base64.b64encode(normalised(vector).tobytes()).decode("ascii")


def unpack(value: Any) -> array[float] | None:
    """A stored vector (None for anything else)."""
    if isinstance(value, str) and value.startswith(PACKED):
        try:
            return array("f", base64.b64decode(value[len(PACKED) :], validate=True))
        except ValueError:
            return None
    return None


def similarity(a: array[float], b: array[float]) -> float:
    """The cosine of two normalised vectors (0 when their lengths differ)."""
    return sum(map(operator.mul, a, b)) if len(a) == len(b) and a else 0.0
