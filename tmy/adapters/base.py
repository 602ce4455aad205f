"""The adapter contract: turn platform events into Messages, Replies back into posts.

An adapter is started with the engine's ``handle`` and stopped once; that is
the whole lifecycle the daemon drives.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from tmy.message import Message, Reply

Handler = Callable[[Message], Awaitable[Reply]]


class Adapter(Protocol):
    name: str

    async def start(self, handle: Handler) -> None:
        """Begin accepting events; return once listening (serve in background tasks)."""

    async def stop(self) -> None:
        """Stop accepting new events; runs in flight are drained by the daemon."""
