"""Long-term memory as an extension: everything it adds to tmy, stated in one object.

* the executors ``REMEMBER`` and ``FORGET``;
* the commands ``memory`` and ``dialog``;
* a lifespan that yields the app's :class:`~tmy.memory.runtime.MemoryRuntime`
  (and writes the recall use counts it notes once a second, :mod:`tmy.memory.uses`)
  (``services.state["memory"]``, read through :func:`~tmy.memory.runtime.memory_of`)
  and, while the app is open, plugs :class:`~tmy.memory.hooks.MemoryRecall` into
  the app's LLM runtime: that is how an LLM step's ``memory:`` recalls (tmy.llm
  never imports tmy.memory).

It comes after the LLM extension in the built-ins, so the LLM runtime is in
``services.state`` when this lifespan starts; without the LLM extension it
still offers REMEMBER, FORGET and the commands.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tmy.executors.registry import ExecutorSpec
from tmy.extension import Extension
from tmy.llm.runtime import STATE_KEY as LLM_STATE_KEY
from tmy.llm.runtime import Runtime as LLMRuntime
from tmy.memory import executors as memory_executors
from tmy.memory.commands import COMMANDS
from tmy.memory.hooks import MemoryRecall
from tmy.memory.runtime import STATE_KEY, MemoryRuntime
from tmy.types import Services


def executors(settings: Any) -> tuple[ExecutorSpec, ...]:
    """REMEMBER and FORGET (``llm.memory`` was validated with the settings: ``settings.memory``)."""
    return (
        ExecutorSpec(
            "REMEMBER",
            memory_executors.remember,
            options=memory_executors.REMEMBER_OPTIONS,
            takes=str,
            check=memory_executors.check_remember,
            doc="store the input as a long-term memory entry; answers a confirmation",
        ),
        ExecutorSpec(
            "FORGET",
            memory_executors.forget,
            options=memory_executors.FORGET_OPTIONS,
            takes=str,
            check=memory_executors.check_forget,
            doc="disable the memory entries that best match the input; answers what it forgot",
        ),
    )


@contextlib.asynccontextmanager
async def lifespan(services: Services) -> AsyncIterator[MemoryRuntime]:
    """The app's memory runtime, its recall plugged into the LLM runtime while the app is open."""
    memory = MemoryRuntime(services.settings.memory, services)
    llm = services.state.get(LLM_STATE_KEY)
    async with memory.uses.writing(services.store):  # recall use counts, once a second
        if not isinstance(llm, LLMRuntime):  # no LLM extension: no memory: steps to serve
            yield memory
            return
        with llm.recall_by(MemoryRecall(memory)):
            yield memory


EXTENSION = Extension(
    name=STATE_KEY,
    executors=executors,
    commands=COMMANDS,
    lifespan=lifespan,
    doc="long-term memory: REMEMBER, FORGET, memory: recall in LLM steps (docs/memory.md)",
)
