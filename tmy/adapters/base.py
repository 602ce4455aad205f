"""The adapter contract: platform events in as Messages, Replies and sends out.

An adapter is started with the engine's ``handle`` and stopped once; in
between it turns its platform's events into :class:`~tmy.message.Message`
objects, answers each with the :class:`~tmy.message.Reply` the engine gives
back, and can **send on its own initiative** to a :class:`Target` (cron rules
and admin commands use that through the daemon's ``send``).

An adapter that needs routes on the daemon's one web server (the OneBot
reverse WebSocket, the OpenAI facade) exposes ``routes()``; the HTTP listener
mounts them before it starts. Every adapter reports its state through
``health()`` for ``GET /healthz``. One adapter's failure (a bad token, a lost
connection, a failed send) is logged with the platform's own error code and
never stops the daemon or the other adapters.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from tmy.message import Message, Reply, Target

Handler = Callable[[Message], Awaitable[Reply]]


@runtime_checkable
class Adapter(Protocol):
    name: str  # the platform name messages carry (``PLATFORM``)

    async def start(self, handle: Handler) -> None:
        """Begin accepting events; return once listening (serve in background tasks).

        A platform that cannot be reached yet (a refused token, a network
        error) is not a failure of ``start``: the adapter keeps retrying in the
        background and says so in ``health()``.
        """

    async def stop(self) -> None:
        """Stop accepting new events; runs in flight are drained by the daemon."""

    async def send(self, target: Target, text: str) -> None:
        """Post ``text`` to ``target``; raise AdapterError naming the platform's error."""

    def health(self) -> dict[str, Any]:
        """``{"state", "last_event", "error", …}`` for ``GET /healthz``."""


class AdapterHealth:
    """The state an adapter reports: connected, reconnecting, failed or stopped.

    ``last_event`` is the wall-clock time of the last event received, so an
    operator can tell a quiet chat from a dead connection.
    """

    __slots__ = ("detail", "error", "last_event", "state")

    def __init__(self, state: str = "starting") -> None:
        self.state = state
        self.error: str | None = None
        self.last_event: float | None = None
        self.detail: dict[str, Any] = {}

    def event(self) -> None:
        self.last_event = time.time()

    def set(self, state: str, error: str | None = None) -> None:
        self.state = state
        self.error = error

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "last_event": None
            if self.last_event is None
            else datetime.fromtimestamp(self.last_event, UTC).isoformat(timespec="seconds"),
            "error": self.error,
        }
        out.update(self.detail)
        return out


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
