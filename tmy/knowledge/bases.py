"""The app's knowledge bases: the configured ones and those added by ``kb add``, as one object.

:class:`KnowledgeBases` is what the extension's lifespan yields
(``services.state["knowledge"]``, read with :func:`knowledge_of`) and plugs into
the LLM runtime as its :class:`tmy.llm.knowledge.Knowledge` provider: an LLM
step's ``knowledge: {use: [NAME]}`` calls :meth:`KnowledgeBases.search`. The
``kb`` commands and the daemon's watcher ingest through it, so a configured
base is always ingested with its own ``include``, ``chunk`` and ``embeddings``.

A base that is not configured (made by ``kb add``) is chunked with the
defaults and searched lexically.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from tmy.errors import ConfigError, ExecutorError, TmyError
from tmy.hints import did_you_mean
from tmy.knowledge import documents, search
from tmy.knowledge.config import DEFAULT_INCLUDE, KnowledgeBaseConfig, check_name, roots_of
from tmy.knowledge.embedding import Embedder, configured
from tmy.knowledge.ingest import LOCK_WAIT, IngestReport, ingest
from tmy.knowledge.layout import lock_key
from tmy.llm.knowledge import KnowledgeSpec, Passage
from tmy.types import Services

STATE_KEY = "knowledge"  # the extension's name: its lifespan's yield is services.state[...]


class KnowledgeBases:
    """The knowledge bases of one app (see the module docstring)."""

    def __init__(
        self, services: Services, configs: Mapping[str, KnowledgeBaseConfig], known: Sequence[str]
    ) -> None:
        self.services = services
        self.configs = dict(configs)
        self.known = set(known)  # bases in the store (kb add), as last read
        self.status: dict[str, dict[str, Any]] = {}  # the last ingestion of each base (/healthz)
        self._locks: dict[str, asyncio.Lock] = {}

    def names(self) -> Collection[str]:
        """The configured bases and those found in the store."""
        return sorted(set(self.configs) | self.known)

    def check(self, name: str) -> str:
        """``name`` when it is a base, else ExecutorError with a did-you-mean."""
        if name in self.configs or name in self.known:
            return name
        names = self.names()
        known = ", ".join(names) or "none"
        raise ExecutorError(
            f"no knowledge base named {name!r}{did_you_mean(name, names)}; known: {known}"
        )

    def embedder(self, name: str, services: Services | None = None) -> Embedder | None:
        cfg = self.configs.get(name)
        if cfg is None or cfg.embeddings is None:
            return None
        return configured(services or self.services, cfg.embeddings)

    async def refresh(self) -> list[str]:
        """Re-read the bases the store holds (another process may have added one)."""
        self.known = set(await documents.base_names(self.services.store))
        return sorted(self.known)

    async def search(self, services: Services, spec: KnowledgeSpec, query: str) -> list[Passage]:
        """The Knowledge provider's search: ``spec.use``'s bases, best first (TmyError)."""
        for name in spec.use:
            if name not in self.configs and name not in self.known:
                await self.refresh()
                break
        bases = [self.check(name) for name in spec.use]
        embedders = {b: e for b in bases if (e := self.embedder(b, services)) is not None}
        return await search.search(
            services.store,
            bases,
            query,
            top=spec.top,
            min_score=spec.min_score,
            embedders=embedders,
        )

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    @contextlib.asynccontextmanager
    async def _held(self, name: str) -> AsyncIterator[None]:
        """The base to oneself across processes too (the lease :func:`ingest` holds): a
        ``kb del`` or ``rebuild`` never drops documents another process is writing."""
        async with self._lock(name), self.services.store.lock(lock_key(name), wait=LOCK_WAIT):
            yield

    async def ingest(
        self, name: str, roots: Sequence[Path] | None = None, *, wait: float = LOCK_WAIT
    ) -> IngestReport:
        """Ingest ``roots`` (default: the base's configured paths) into base ``name``;
        ``wait``: how long another process's ingestion of it is waited for (StoreError)."""
        check_name(name)
        cfg = self.configs.get(name)
        if roots is None:
            roots = roots_of(self.services.settings, cfg) if cfg else []
        async with self._lock(name):
            try:
                report = await ingest(
                    self.services.store,
                    name,
                    roots,
                    chunk=cfg.chunk if cfg else None,
                    include=cfg.include if cfg else DEFAULT_INCLUDE,
                    embedder=self.embedder(name),
                    lock_wait=wait,
                )
            except TmyError as exc:
                self.status[name] = {"at": time.time(), "error": str(exc)}
                raise
        self.status[name] = {
            "at": time.time(),
            "documents": len(report.added) + len(report.replaced) + len(report.unchanged),
            "changed": len(report.added) + len(report.replaced) + len(report.removed),
            "skipped": len(report.skipped),
        }
        if report.added or report.replaced or report.unchanged:
            self.known.add(name)
        return report

    def health(self) -> tuple[dict[str, Any], bool]:
        """``/healthz``'s part: each base's last ingestion; unhealthy when one failed."""
        bases = {name: dict(self.status.get(name, {"at": None})) for name in self.names()}
        return {"bases": bases}, not any("error" in s for s in self.status.values())

    async def rebuild(self, name: str) -> IngestReport:
        """Drop the base and ingest it again from its configured paths and the folders and
        files its documents were added from — refused while one of them holding documents is
        missing (an unmounted share: an ingestion keeps those documents, a rebuild would not)."""
        self.check(name)
        store = self.services.store
        cfg = self.configs.get(name)
        roots = roots_of(self.services.settings, cfg) if cfg else []
        records = list((await documents.documents(store, name)).values())
        for record in records:
            root = Path(str(record.get("root") or record.get("path") or ""))
            if str(root) and not any(_inside(root, r) for r in roots):
                roots.append(root)
        paths = [Path(str(r.get("path") or "")) for r in records]
        gone = [str(r) for r in roots if not r.exists() and any(_inside(p, r) for p in paths)]
        if gone:  # an unmounted share: rebuilding would empty what ingesting keeps
            raise TmyError(
                f"kb rebuild {name}: {', '.join(gone)} cannot be found, and rebuilding would "
                "drop its documents; bring it back first, or kb del what is no longer wanted"
            )
        async with self._held(name):
            await documents.drop_base(store, name)
        if not roots:
            self.known.discard(name)
        return await self.ingest(name, roots)

    async def delete(self, name: str, source: str | None = None) -> dict[str, Any]:
        """Remove the document ``source`` (its source name or file path) or the whole base."""
        self.check(name)
        store = self.services.store
        async with self._held(name):
            if source is None:
                gone = await documents.drop_base(store, name)
                self.known.discard(name)
                return {"base": name, "removed": gone, "whole": True}
            wanted = {source, os.path.abspath(source)}
            removed = []
            for record in (await documents.documents(store, name)).values():
                if record.get("source") in wanted or record.get("path") in wanted:
                    await documents.remove_document(store, name, record)
                    removed.append(record.get("source"))
        return {"base": name, "removed": len(removed), "sources": removed, "whole": False}


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_models(services: Services, configs: Mapping[str, KnowledgeBaseConfig]) -> None:
    """Every ``embeddings.model`` names a model of ``llm.models`` (ConfigError naming the key)."""
    models = services.settings.llm.models
    for name, cfg in configs.items():
        if cfg.embeddings is not None and cfg.embeddings.model not in models:
            hint = did_you_mean(cfg.embeddings.model, models)
            raise ConfigError(
                f"'knowledge.{name}.embeddings.model' names unknown model "
                f"{cfg.embeddings.model!r}{hint}; configured models: {', '.join(models) or 'none'}"
            )


def knowledge_of(services: Services) -> KnowledgeBases:
    """The app's knowledge bases (``services.state["knowledge"]``, set by the extension)."""
    found = services.state.get(STATE_KEY)
    if not isinstance(found, KnowledgeBases):
        raise TmyError("the knowledge extension is not installed in this app")
    return found
