"""The ``knowledge:`` option of an LLM step: what it asks of a knowledge base, and what it gets.

tmy.llm knows nothing of tmy.knowledge (the knowledge base sits above it, beside
the daemon). The option is declared and checked here; what it *does* comes from
a :class:`Knowledge` provider the knowledge extension's lifespan plugs into the
runtime with :meth:`tmy.llm.runtime.Runtime.knowledge_by`.

The step's forms::

    knowledge: faq                               # one base, the defaults
    knowledge: [faq, manual]                     # several bases
    knowledge: {use: [faq], top: 4, min_score: 0.2}

The chosen passages go into the request's dynamic tail (never its stable prefix),
numbered so the answer may cite them as ``[1]``, ``[2]``; the run local
``SOURCES`` lists what was used.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tmy.hints import did_you_mean
from tmy.types import Services

DEFAULT_TOP = 4
MAX_TOP = 50
_KEYS = ("use", "top", "min_score")


@dataclass(frozen=True, slots=True)
class KnowledgeSpec:
    """A step's ``knowledge:``: which bases, how many passages, above which score."""

    use: tuple[str, ...]  # knowledge base names
    top: int = DEFAULT_TOP
    min_score: float | None = None  # None: every passage ranked in the top counts


def knowledge_spec(raw: Any) -> KnowledgeSpec | None:
    """``knowledge: NAME``, ``[NAME, …]`` or ``{use, top, min_score}``; None = off.

    Raises ValueError with a message fit for ``file:line: …``.
    """
    if raw is None or raw is False or raw in ("", [], {}):
        return None
    if isinstance(raw, (str, list)):
        raw = {"use": raw}
    if not isinstance(raw, dict):
        raise ValueError(
            "knowledge: expected a base name, a list of names or {use: [NAME, …], top, min_score}"
        )
    unknown = [k for k in raw if k not in _KEYS]
    if unknown:
        hint = did_you_mean(str(unknown[0]), _KEYS)
        raise ValueError(
            f"knowledge: unknown key {unknown[0]!r}{hint}; allowed: {', '.join(_KEYS)}"
        )
    use = raw.get("use")
    if isinstance(use, str):
        use = [use]
    if not use or not isinstance(use, list) or not all(isinstance(n, str) and n for n in use):
        raise ValueError("knowledge.use must name one knowledge base or a list of them")
    top = raw.get("top", DEFAULT_TOP)
    if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= MAX_TOP:
        raise ValueError(f"knowledge.top must be a whole number from 1 to {MAX_TOP}")
    min_score = raw.get("min_score")
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float, type(None))):
        raise ValueError("knowledge.min_score must be a number")
    return KnowledgeSpec(
        tuple(dict.fromkeys(use)), top, None if min_score is None else float(min_score)
    )


@dataclass(frozen=True, slots=True)
class Passage:
    """One chunk a search chose: where it comes from, its text, and why it ranked."""

    base: str  # knowledge base name
    source: str  # the document: its path relative to the base's folder (or as added)
    position: str  # where in it, human-readable: "chars 1600–2400" (+ "page 3" for PDFs)
    text: str
    score: float  # the score it was ranked by (fused when hybrid)
    why: Mapping[str, Any]  # the parts: {"bm25": 7.1, "lexical_rank": 1, "vector": 0.83, …}


class Knowledge(Protocol):
    """The knowledge base as a step's ``knowledge:`` sees it (tmy.knowledge implements it)."""

    def names(self) -> Collection[str]:
        """The configured knowledge bases (a computed ``use:`` is checked against them)."""
        ...

    async def search(self, services: Services, spec: KnowledgeSpec, query: str) -> list[Passage]:
        """Best first, at most ``spec.top``, none under ``spec.min_score``.

        Raises TmyError on failure: the step then answers without knowledge.
        """
        ...
