"""The pause before a lost MCP server is connected again: capped exponential, full jitter.

tmy.adapters.base.Backoff's idea; that layer is above this one, so tmy.mcp has its own.
"""

from __future__ import annotations

import random

RETRY_BASE = 0.5  # seconds: the first pause before connecting again
RETRY_CAP = 30.0  # the longest pause between attempts


class Backoff:
    """Capped exponential backoff with full jitter; :meth:`reset` once a connection held."""

    def __init__(self, base: float = RETRY_BASE, cap: float = RETRY_CAP) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return max(self.base / 2, random.uniform(0, ceiling))

    def reset(self) -> None:
        self.attempt = 0
