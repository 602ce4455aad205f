"""The loopback test adapter: a chat platform that lives inside the test.

It satisfies :class:`tmy.types.Adapter`, so the daemon starts, stops, health-checks
and sends through it exactly as through Telegram or OneBot: ``push`` plays a user
writing to the bot and returns the engine's reply; whatever the daemon sends on its
own initiative (a scheduled rule's post, ``app.send``, an admin command) lands in
``sent``, and ``pop`` waits for the next such message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tmy.errors import AdapterError
from tmy.message import Message, Outgoing, Reply, Target
from tmy.types import Handler, Route


@dataclass(frozen=True)
class Sent:
    """One message the daemon sent on its own: where to, and what."""

    target: Target
    text: str
    outgoing: Outgoing | None = None  # the reply's images, files, mentions, buttons


class LoopbackAdapter:
    """An in-process platform named ``platform`` (``"test"``, as :class:`tmy.testing.Bot` uses)."""

    def __init__(self, platform: str = "test") -> None:
        self.name = platform
        self.sent: list[Sent] = []
        self._handle: Handler | None = None
        self._more = asyncio.Event()

    # -- the Adapter contract -------------------------------------------------------------

    async def start(self, handle: Handler) -> None:
        self._handle = handle

    async def stop(self) -> None:
        self._handle = None

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        if self._handle is None:
            raise AdapterError(f"{self.name}: not started")
        self.sent.append(Sent(target, text, outgoing))
        self._more.set()

    def health(self) -> dict[str, Any]:
        return {"state": "connected" if self._handle is not None else "stopped"}

    def routes(self) -> list[Route]:
        return []

    # -- what a test does with it ---------------------------------------------------------

    async def push(
        self, text: str, *, user: str = "tester", chat: str = "", **fields: Any
    ) -> Reply:
        """A user writes ``text`` (``chat=""``: their private chat); the engine's reply."""
        if self._handle is None:
            raise AdapterError(f"{self.name}: not started (use 'async with serving(...)')")
        return await self._handle(Message(text, user=user, chat=chat, platform=self.name, **fields))

    async def pop(self, timeout: float = 10.0) -> Sent:
        """The oldest message the daemon sent on its own, waiting up to ``timeout`` seconds
        for one (TimeoutError when none comes)."""
        async with asyncio.timeout(timeout):
            while not self.sent:
                self._more.clear()
                await self._more.wait()
        return self.sent.pop(0)
