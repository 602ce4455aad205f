"""Long-term memory's state for one app, and how steps and commands reach it.

The memory extension's lifespan (:mod:`tmy.memory.extension`) yields one
:class:`MemoryRuntime` per app; the app keeps it as ``services.state["memory"]``,
read only through :func:`memory_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tmy.config.memory import MemoryConfig, load_memory_config
from tmy.errors import ExecutorError
from tmy.types import Services

STATE_KEY = "memory"  # the extension's name: its lifespan's yield is services.state["memory"]


def memory_config(settings: Any) -> MemoryConfig:
    """The validated ``llm.memory:`` section of ``settings``.

    One place reads it, so it moves to the frozen ``settings.memory`` of tmy.config
    in one line (today it is validated from the raw ``settings.llm`` mapping).
    """
    frozen = getattr(settings, "memory", None)
    return frozen if isinstance(frozen, MemoryConfig) else load_memory_config(settings.llm)


@dataclass
class MemoryRuntime:
    """The memory feature's share of one app: its validated config and the services."""

    config: MemoryConfig
    services: Services


def memory_of(services: Services) -> MemoryRuntime:
    """The app's memory runtime (``services.state["memory"]``, set by the extension's lifespan)."""
    state: Mapping[str, Any] = services.state
    runtime = state.get(STATE_KEY)
    if not isinstance(runtime, MemoryRuntime):
        raise ExecutorError("the memory extension is not installed in this app")
    return runtime
