"""Long-term memory's state for one app, and how steps and commands reach it.

The memory extension's lifespan (:mod:`tmy.memory.extension`) yields one
:class:`MemoryRuntime` per app; the app keeps it as ``services.state["memory"]``,
read only through :func:`memory_of`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tmy.config.memory import MemoryConfig
from tmy.errors import ExecutorError
from tmy.memory import scoring
from tmy.memory.uses import Uses
from tmy.types import Services

COUNTS_KEPT = 10_000  # summaries' term counts kept (all dropped when full)
STATE_KEY = "memory"  # the extension's name: its lifespan's yield is services.state["memory"]


@dataclass
class MemoryRuntime:
    """The memory feature's share of one app: its validated config, the services, and the
    recall uses noted but not written yet (:mod:`tmy.memory.uses`)."""

    config: MemoryConfig
    services: Services
    uses: Uses = field(default_factory=Uses)
    _counts: dict[str, Counter[str]] = field(default_factory=dict, repr=False)

    def counted(self, text: str) -> Counter[str]:
        """A dialogue summary's term counts, tokenised once per text (a user's summaries are
        scored by every recall; they change only when a conversation ends). Not to mutate."""
        found = self._counts.get(text)
        if found is None:
            if len(self._counts) >= COUNTS_KEPT:
                self._counts.clear()
            found = self._counts[text] = scoring.counts(text)
        return found


def memory_of(services: Services) -> MemoryRuntime:
    """The app's memory runtime (``services.state["memory"]``, set by the extension's lifespan)."""
    runtime = services.state.get(STATE_KEY)
    if not isinstance(runtime, MemoryRuntime):
        raise ExecutorError("the memory extension is not installed in this app")
    return runtime
