"""Long-term memory for the LLM answerer (seed 003): remember / forget, recall, dialogue summaries.

Built from rule-level pieces, so operations staff decide which words remember
and which steps recall:

* executors ``REMEMBER`` (store the input as an entry) and ``FORGET`` (disable
  the entries that best match the input);
* the ``memory:`` key of an ``LLM`` step: the relevant entries and recent
  dialogue summaries go into the request's dynamic tail, never into its stable
  prefix (:mod:`tmy.memory.hooks`, plugged into the LLM runtime's recall slot);
* dialogue summaries of conversations that ended (:mod:`tmy.memory.dialog`);
* ``llm.memory:`` settings (:mod:`tmy.config.memory`), the commands
  ``memory`` and ``dialog`` (:mod:`tmy.memory.commands`).

:data:`EXTENSION` names all of it (:mod:`tmy.memory.extension`); its lifespan's
:class:`MemoryRuntime` is ``services.state["memory"]``, read with
:func:`memory_of`. This package sits above :mod:`tmy.llm` (its dialogue
summaries use the LLM exchange). See docs/memory.md.
"""

from __future__ import annotations

from tmy.memory.extension import EXTENSION
from tmy.memory.runtime import MemoryRuntime, memory_of

__all__ = ["EXTENSION", "MemoryRuntime", "memory_of"]
