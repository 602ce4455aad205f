"""Writes kept in memory and flushed to the store on a timer: the loop that flushes them.

The LLM usage tally and memory's recall use counts both add up in memory and
write every so often. Both need the same care: the flusher is stopped between
flushes, never inside one (a flush cancelled midway has taken its counts, and
its outcome is unknown), and the block's end flushes once more, so a clean stop
loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable


@contextlib.asynccontextmanager
async def flushing_every(
    interval: float, flush: Callable[[], Awaitable[None]]
) -> AsyncIterator[None]:
    """Await ``flush()`` every ``interval`` seconds while the block runs (never while
    ``interval`` is 0: the caller writes as it goes), and once more at its end.

    ``flush`` logs its own failures and keeps what it could not write: the loop
    must outlive any one of them.
    """
    stop = asyncio.Event()

    async def run() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if not stop.is_set():
                await flush()

    task = asyncio.get_running_loop().create_task(run()) if interval > 0 else None
    try:
        yield
    finally:
        stop.set()
        if task is not None:
            await task
        await flush()
