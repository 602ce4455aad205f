"""A limit on work in flight whose released slots go to the longest waiter (a round robin)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class FairSlots:
    """A limit on work in flight, granted strictly first come, first served.

    ``asyncio.Semaphore`` lets a task that arrives just as a slot is released
    take it ahead of the tasks already waiting; here a released slot goes to
    the longest waiter, which is what makes :class:`ChatQueues` a round robin.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("FairSlots needs at least one slot")
        self.size = size
        self.free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def busy(self) -> int:
        return self.size - self.free

    async def acquire(self) -> None:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted and cancelled at once: hand it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def try_acquire(self) -> bool:
        """Take a slot now if one is free and nobody waits for one (never jumps the queue)."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the longest waiter
                return
        self.free += 1
