"""One chat's lane in a :class:`~tmy.adapters.fairness.queues.ChatQueues`: what waits, what
is in flight, its drain task, and the drops not yet logged."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Lane(Generic[T]):
    """One chat: what waits, how much of it is in flight, its drain task, drops not yet logged."""

    __slots__ = ("dropped", "items", "logged_at", "running", "task", "wake")

    def __init__(self) -> None:
        self.items: deque[T] = deque()
        self.running = 0  # items of this chat in flight
        # set when one of them ends; made only when the drain waits for one (most chats
        # never do: their item starts at once, and a lane is made per idle chat's message)
        self.wake: asyncio.Event | None = None
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0  # drops since the last log line
        self.logged_at = -1e9

    def log_drops(self, log: Any, queues: Any, chat: Hashable) -> None:
        """The ``<adapter>.chat_dropped`` warning for the drops since the last one."""
        account, name = chat if isinstance(chat, tuple) else ("", chat)
        log.warning(
            f"{queues.adapter}.chat_dropped",
            adapter=queues.adapter,
            chat=str(name),
            account=str(account) or None,
            what=queues.what,
            dropped=self.dropped,
            waiting=len(self.items),
            max_pending_per_chat=queues.per_chat,
            hint=f"this chat's oldest waiting {queues.what}s were dropped: it sends faster "
            "than it can be answered",
        )
        self.dropped = 0
        self.logged_at = time.monotonic()
