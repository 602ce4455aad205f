"""An LLM step's deadline on a loop timer it shares with the steps that end near it.

``asyncio.timeout`` gives every step a timer of its own: with a thousand
conversations in flight that is a thousand entries in the event loop's heap,
each push and each cancelled entry's removal a dozen Python-level comparisons
(about 30,000 instructions a step, ``bench/llm_fanout.py``'s profile). Here the
steps whose deadlines fall in the same :data:`GRAIN` of the loop's clock share
one timer, which cancels those still running when it fires; the step then ends
with :class:`TimeoutError`, as ``asyncio.timeout`` would end it.

The shared timer fires up to one grain after the deadline, so only deadlines
long enough for that not to matter take it (:func:`bound`): at least
:data:`SHARED_FROM` seconds, and ending at least :data:`MARGIN` before the step's
own timeout (the engine's, which must not win the race: its error says less).
Shorter ones, and a step inside a tool call (same task as the step that called
it), keep a timer of their own.
"""

from __future__ import annotations

import asyncio
import math
from contextlib import AbstractAsyncContextManager
from typing import Any

GRAIN = 0.05  # seconds: the steps ending within one grain share a timer
SHARED_FROM = 1.0  # shorter deadlines get a timer of their own
MARGIN = 0.2  # seconds the shared timer must leave before the step's own timeout


class _Tick:
    """The steps whose deadlines end in one grain, and the timer that ends them."""

    __slots__ = ("at", "fired", "handle", "loop", "tasks")

    def __init__(self, at: int, loop: asyncio.AbstractEventLoop) -> None:
        self.at = at
        self.loop = loop
        self.tasks: set[asyncio.Task[Any]] = set()
        self.fired: set[asyncio.Task[Any]] = set()
        self.handle: asyncio.TimerHandle | None = None


class Deadlines:
    """The shared timers of one runtime's LLM steps (by grain of the loop's clock)."""

    def __init__(self, grain: float = GRAIN, shared_from: float = SHARED_FROM) -> None:
        self.grain = grain
        self.shared_from = shared_from
        self._ticks: dict[int, _Tick] = {}

    def bound(
        self, seconds: float, step_timeout: float, alone: bool
    ) -> AbstractAsyncContextManager[None]:
        """What ``asyncio.timeout(seconds)`` is to the block, on a shared timer when the
        deadline allows it (``alone``: the caller must have its own, e.g. nested)."""
        if alone or seconds < self.shared_from or step_timeout - seconds < MARGIN + self.grain:
            return asyncio.timeout(seconds)
        return _Bound(self, seconds)

    def _join(self, task: asyncio.Task[Any], seconds: float) -> _Tick:
        loop = asyncio.get_running_loop()
        at = math.ceil((loop.time() + seconds) / self.grain)
        tick = self._ticks.get(at)
        if tick is None or tick.loop is not loop:  # (a tick of a loop closed mid-step: not it)
            tick = self._ticks[at] = _Tick(at, loop)
            tick.handle = loop.call_at(at * self.grain, self._fire, tick)
        tick.tasks.add(task)
        return tick

    def _leave(self, task: asyncio.Task[Any], tick: _Tick) -> bool:
        """Take ``task`` off ``tick``; True when the tick's timer cancelled it."""
        tick.tasks.discard(task)
        if task in tick.fired:
            tick.fired.discard(task)
            return True
        if not tick.tasks and tick.handle is not None:  # the last one left before the end
            tick.handle.cancel()
            tick.handle = None
            if self._ticks.get(tick.at) is tick:
                del self._ticks[tick.at]
        return False

    def _fire(self, tick: _Tick) -> None:
        if self._ticks.get(tick.at) is tick:
            del self._ticks[tick.at]
        tick.handle = None
        for task in tick.tasks:
            if not task.done():
                tick.fired.add(task)
                task.cancel()


class _Bound:
    """``async with``: the block is cancelled at its tick; leaving, that cancellation
    becomes TimeoutError (as ``asyncio.timeout`` turns its own)."""

    __slots__ = ("_cancelling", "_deadlines", "_seconds", "_task", "_tick")

    def __init__(self, deadlines: Deadlines, seconds: float) -> None:
        self._deadlines = deadlines
        self._seconds = seconds

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("an LLM step's deadline needs a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._tick = self._deadlines._join(task, self._seconds)

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        fired = self._deadlines._leave(self._task, self._tick)
        if fired and self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from exc
