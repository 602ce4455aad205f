"""Long-term memory's state for one app, and how steps and commands reach it.

The memory extension's lifespan (:mod:`tmy.memory.extension`) yields one
:class:`MemoryRuntime` per app; the app keeps it as ``services.state["memory"]``,
read only through :func:`memory_of`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tmy.config.memory import MemoryConfig
from tmy.errors import ExecutorError
from tmy.memory.uses import Uses
from tmy.types import Services

STATE_KEY = "memory"  # the extension's name: its lifespan's yield is services.state["memory"]


@dataclass
class MemoryRuntime:
    """The memory feature's share of one app: its validated config, the services, and the
    recall uses noted but not written yet (:mod:`tmy.memory.uses`)."""

    config: MemoryConfig
    services: Services
    uses: Uses = field(default_factory=Uses)


def memory_of(services: Services) -> MemoryRuntime:
    """The app's memory runtime (``services.state["memory"]``, set by the extension's lifespan)."""
    runtime = services.state.get(STATE_KEY)
    if not isinstance(runtime, MemoryRuntime):
        raise ExecutorError("the memory extension is not installed in this app")
    return runtime
