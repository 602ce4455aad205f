"""The knowledge base as an extension: everything it adds to tmy, stated in one object.

* the ``knowledge:`` config section (:mod:`tmy.knowledge.config`);
* the ``kb`` command (:mod:`tmy.knowledge.commands`);
* a lifespan that yields the app's :class:`~tmy.knowledge.bases.KnowledgeBases`
  (``services.state["knowledge"]``, read with :func:`~tmy.knowledge.bases.knowledge_of`)
  and, while the app is open, plugs it into the LLM runtime as the provider of an
  LLM step's ``knowledge:`` (tmy.llm never imports tmy.knowledge);
* a serving part that ingests the configured bases and follows their files
  (:mod:`tmy.knowledge.watch`).

It comes after the LLM extension in the built-ins, so the LLM runtime is in
``services.state`` when this lifespan starts; without it the ``kb`` command still works.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tmy.errors import TmyError
from tmy.extension import ConfigSection, Extension
from tmy.knowledge import documents
from tmy.knowledge.bases import STATE_KEY, KnowledgeBases, check_models
from tmy.knowledge.checks import check_warnings
from tmy.knowledge.commands import COMMANDS
from tmy.knowledge.config import SECTION, bases_of, parse
from tmy.knowledge.watch import serving
from tmy.llm.runtime import STATE_KEY as LLM_STATE_KEY
from tmy.llm.runtime import Runtime as LLMRuntime
from tmy.logs import get_logger
from tmy.types import Services

log = get_logger("tmy.knowledge")


@contextlib.asynccontextmanager
async def lifespan(services: Services) -> AsyncIterator[KnowledgeBases]:
    """The app's knowledge bases, plugged into the LLM runtime while the app is open."""
    configs = bases_of(services.settings)
    check_models(services, configs)
    try:
        known = await documents.base_names(services.store)
    except TmyError as exc:  # the store answers later: the configured bases are known anyway
        log.warning("knowledge.bases_unread", error=str(exc))
        known = []
    kb = KnowledgeBases(services, configs, known)
    llm = services.state.get(LLM_STATE_KEY)
    if not isinstance(llm, LLMRuntime):
        yield kb
        return
    with llm.knowledge_by(kb):
        yield kb


def health(services: Services) -> tuple[dict[str, Any], bool] | None:
    """The knowledge bases' part of ``/healthz`` (None when no base is known)."""
    kb = services.state.get(STATE_KEY)
    if not isinstance(kb, KnowledgeBases) or not kb.names():
        return None
    return kb.health()


EXTENSION = Extension(
    name=STATE_KEY,
    commands=COMMANDS,
    config=ConfigSection(SECTION, parse),
    lifespan=lifespan,
    serving=serving,
    health=health,
    check_warnings=check_warnings,
    doc="knowledge bases over documents: knowledge: in LLM steps, kb commands (docs/knowledge.md)",
)
