"""Vectors for a knowledge base: any async function of texts, or the configured model.

An :class:`Embedder` is what ingestion and search take: ``embed(texts)`` gives one
vector per text (TmyError on failure) and ``identity`` names what made them — it
is kept with every document, so configuring another model re-embeds them at the
next ingestion. :func:`configured` makes one from a base's ``embeddings:`` through
memory's client (:func:`tmy.memory.embeddings.embed`: an OpenAI-compatible
``POST {base_url}/embeddings`` of a model in ``llm.models``); a benchmark or a
test passes its own function instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

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
