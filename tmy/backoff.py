"""The pause before trying again: capped exponential backoff with full jitter.

One definition for every reconnect and retried send — chat platforms' adapters
(tmy.adapters) and MCP servers (tmy.mcp) alike — so it sits in the bottom layer.
"""

from __future__ import annotations

import asyncio
import random


class Backoff:
    """Capped exponential backoff with full jitter, for reconnects and retried sends.

    ``next()`` gives the pause before the next attempt (0..min(cap, base·2ⁿ),
    never below ``base / 2``); ``reset()`` after a success.
    """

    def __init__(self, base: float = 1.0, cap: float = 60.0) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return max(self.base / 2, random.uniform(0, ceiling))

    def reset(self) -> None:
        self.attempt = 0

    async def sleep(self) -> None:
        await asyncio.sleep(self.next())
