"""Optional dense recall: vectors from an OpenAI-compatible ``POST {base_url}/embeddings``.

Configured by ``llm.memory.embeddings.model`` — a model name from
``llm.models`` whose ``base_url``, API key and headers are used — and ``id``,
the provider's embedding model (``text-embedding-3-small``, ``bge-m3`` on
Ollama/vLLM, …). Without it, recall is lexical only.

An entry's vector is computed when it is remembered and kept at
``mem/vec/<id>``; entries without one (remembered before embeddings were
configured, or while the endpoint was down) get theirs at the next recall that
considers them. Every failure here is logged and recall carries on lexically:
embeddings can only add candidates, never break a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from tmy import redact
from tmy.config.memory import EmbeddingsConfig
from tmy.errors import TmyError
from tmy.llm.runtime import runtime_of
from tmy.logs import get_logger
from tmy.memory.entries import vector_key
from tmy.store.base import MISSING, Store
from tmy.types import Services

log = get_logger("tmy.memory")

MAX_BATCH = 64
MAX_BODY = 16 * 1024 * 1024


class EmbeddingError(TmyError):
    """The embeddings endpoint failed (recall goes on without it)."""


async def embed(
    services: Services, cfg: EmbeddingsConfig, texts: Sequence[str]
) -> list[list[float]]:
    """One vector per text, in order; EmbeddingError on any failure."""
    import httpx  # deferred: httpx is ~50 ms of every CLI start

    if not texts:
        return []
    try:
        model = runtime_of(services).config.model(cfg.model)
    except TmyError as exc:
        raise EmbeddingError(str(exc)) from None
    if model.is_mock:  # e.g. `run.py test`, where every model is the mock
        raise EmbeddingError(f"model {cfg.model!r} is the TESTONLY mock: it has no embeddings")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if model.api_key:
        headers["Authorization"] = f"Bearer {model.api_key}"
    headers.update(dict(model.headers))
    url = f"{model.base_url}/embeddings"
    out: list[list[float]] = []
    for start in range(0, len(texts), MAX_BATCH):
        batch = list(texts[start : start + MAX_BATCH])
        body = orjson.dumps({"model": cfg.id, "input": batch})
        try:
            resp = await services.http.post(url, content=body, headers=headers, timeout=cfg.timeout)
        except httpx.HTTPError as exc:
            raise EmbeddingError(
                redact.redact(f"{redact.safe_url(url)}: {type(exc).__name__}: {exc}")
            ) from None
        if resp.status_code != 200:
            raise EmbeddingError(
                redact.redact(
                    f"{redact.safe_url(url)} answered HTTP {resp.status_code}: {resp.text[:300]}"
                )
            )
        if len(resp.content) > MAX_BODY:
            raise EmbeddingError(f"{redact.safe_url(url)} sent more than {MAX_BODY} bytes")
        try:
            data = orjson.loads(resp.content)["data"]
            vectors = sorted(data, key=lambda d: d.get("index", 0))
            got = [[float(x) for x in d["embedding"]] for d in vectors]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(
                f"{redact.safe_url(url)}: not an embeddings response ({exc})"
            ) from None
        if len(got) != len(batch):
            raise EmbeddingError(f"{redact.safe_url(url)}: {len(got)} vectors for {len(batch)}")
        out.extend(got)
    return out


def _compact(vector: list[float]) -> list[float]:
    return [round(x, 5) for x in vector]


async def store_vector(services: Services, cfg: EmbeddingsConfig, entry: dict[str, Any]) -> None:
    """Compute and keep the vector of a new entry (failures are logged, not raised)."""
    try:
        (vector,) = await embed(services, cfg, [entry["text"]])
        await services.store.set(vector_key(entry["id"]), _compact(vector))
    except TmyError as exc:
        log.warning("memory.embedding_failed", error=str(exc), entry=entry["id"])


async def vectors_for(
    services: Services, cfg: EmbeddingsConfig, entries: Sequence[dict[str, Any]], *, save: bool
) -> dict[str, list[float]]:
    """Vectors of ``entries`` by id: stored ones, and the missing ones computed (and kept)."""
    store: Store = services.store
    keys = [vector_key(e["id"]) for e in entries]
    found: dict[str, list[float]] = {}
    missing = []
    for entry, value in zip(entries, await store.get_many(keys) if keys else [], strict=True):
        if value is MISSING or not isinstance(value, list):
            missing.append(entry)
        else:
            found[entry["id"]] = value
    if missing:
        vectors = await embed(services, cfg, [e["text"] for e in missing])
        for entry, vector in zip(missing, vectors, strict=True):
            found[entry["id"]] = vector
            if save:
                await store.set(vector_key(entry["id"]), _compact(vector))
    return found


async def forget_vectors(store: Store, ids: Sequence[str]) -> None:
    for entry_id in ids:
        try:
            await store.delete(vector_key(entry_id))
        except TmyError:
            pass
