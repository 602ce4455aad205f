"""``run.py check``'s word on the knowledge bases LLM steps name.

A base is either configured (``knowledge:`` in the config) or made at run time with
``kb add``; a rule may name either, so a name the config does not know is not a
load error. ``check`` warns (``file:line: …``, with a did-you-mean) of a constant
``knowledge:`` name that is neither configured nor in the store — most likely a typo.
At run time the step still searches it and, when the base does not exist, fails
with the same did-you-mean.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tmy import redact
from tmy.config import Settings
from tmy.errors import TmyError
from tmy.hints import did_you_mean
from tmy.knowledge import documents
from tmy.knowledge.config import bases_of, resolve
from tmy.llm.knowledge import knowledge_spec
from tmy.rulebook.model import Rulebook
from tmy.store.url import open_store
from tmy.values.compiled import Constant


def unknown_bases(rulebook: Rulebook, known: Collection[str]) -> list[str]:
    """``file:line: …`` for every constant ``knowledge:`` name that is not in ``known``."""
    out = []
    for rule in rulebook.rules:
        for step in rule.steps:
            value = step.options.get("knowledge") if step.spec.name == "LLM" else None
            if not isinstance(value, Constant):
                continue
            try:
                spec = knowledge_spec(value.value)
            except ValueError:  # the load-time check said so already
                continue
            for name in spec.use if spec is not None else ():
                if name not in known:
                    out.append(
                        f"{step.file}:{step.line}: rule {rule.id!r} step {step.uri}: "
                        f"knowledge base {name!r} is neither configured (knowledge:) nor "
                        f"made with kb add{did_you_mean(name, known)}"
                    )
    return out


def missing_paths(settings: Settings) -> list[str]:
    """A configured base's ``paths`` entry that does not exist (a typo ingests nothing)."""
    out = []
    for name, base in bases_of(settings).items():
        for path in base.paths:
            if not resolve(settings, path).exists():
                out.append(
                    f"knowledge.{name}.paths: {path!r} does not exist "
                    f"({resolve(settings, path)}): nothing is ingested from it"
                )
    return out


async def check_warnings(settings: Settings, rulebook: Any) -> list[str]:
    """What ``run.py check`` adds: configured paths that do not exist, and bases the rules
    name that do not exist (configured or in the store; a store that cannot be read leaves
    the configured ones to go by)."""
    return missing_paths(settings) + await _unknown_bases(settings, rulebook)


async def _unknown_bases(settings: Settings, rulebook: Any) -> list[str]:
    known = set(bases_of(settings))
    names_used = unknown_bases(rulebook, known)
    if not names_used:
        return []
    redact.add_url(settings.store)
    store = open_store(settings.store, max_value_bytes=settings.max_value_bytes)
    try:
        await store.open()
        try:
            known.update(await documents.base_names(store))
        finally:
            await store.close()
    except TmyError as exc:
        return [*unknown_bases(rulebook, known), f"the store could not be read: {exc}"]
    return unknown_bases(rulebook, known)
