"""Loop timers shared by the steps whose deadlines end in the same grain of the loop's clock.

``asyncio.timeout`` and ``loop.call_later`` give every step a timer of its own:
with a thousand steps in flight that is thousands of entries in the event loop's
heap, each push and each cancelled entry's removal a dozen Python-level
comparisons (sharing them took an LLM message from 917,778 to 889,788 instructions
with 300 conversations in flight, ``bench/llm_callgrind.py``'s mock). Here the
waiters whose delays end in the same :data:`GRAIN` share one timer
(:class:`Grains`), which calls each waiter still there when it fires.

A shared timer fires up to one grain late, so :func:`step_clock` keeps
``asyncio.timeout`` for step timeouts under :data:`SHARED_FROM` seconds (a short
timeout's length matters); the slow-step warning (``log.slow_step``, a log line)
always shares. :mod:`tmy.llm.deadline` puts an LLM step's own deadline on the
same kind of timer.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from typing import Any, Protocol

from tmy import logs

GRAIN = 0.05  # seconds: the waiters ending within one grain share a timer
SHARED_FROM = 1.0  # step timeouts shorter than this keep a timer of their own


class Waiter(Protocol):
    def fire(self, tick: Tick) -> None:
        """The tick's timer fired while this waiter was on it."""


class Tick:
    """The waiters whose delays end in one grain, and the timer that calls them."""

    __slots__ = ("at", "handle", "loop", "ticks", "waiters")

    def __init__(self, at: int, loop: asyncio.AbstractEventLoop, ticks: dict[int, Tick]) -> None:
        self.at = at
        self.loop = loop
        self.ticks = ticks  # the loop's ticks by grain, this one among them until it ends
        self.waiters: set[Waiter] = set()
        self.handle: asyncio.TimerHandle | None = None


class Grains:
    """Shared timers, one per grain of each running loop's clock that has waiters."""

    def __init__(self, grain: float = GRAIN) -> None:
        self.grain = grain
        self._loops: dict[asyncio.AbstractEventLoop, dict[int, Tick]] = {}

    def join(self, delay: float, waiter: Waiter) -> Tick:
        """Put ``waiter`` on the tick ending ``delay`` seconds from now (at most a grain later)."""
        loop = asyncio.get_running_loop()
        ticks = self._loops.get(loop)
        if ticks is None:
            ticks = self._loops[loop] = {}
        at = math.ceil((loop.time() + delay) / self.grain)
        tick = ticks.get(at)
        if tick is None:
            tick = ticks[at] = Tick(at, loop, ticks)
            tick.handle = loop.call_at(at * self.grain, self._fire, tick)
        tick.waiters.add(waiter)
        return tick

    def leave(self, tick: Tick, waiter: Waiter) -> None:
        """Take ``waiter`` off ``tick``; the last one to leave before it fires stops its timer."""
        waiters = tick.waiters
        waiters.discard(waiter)
        if not waiters and tick.handle is not None:
            tick.handle.cancel()
            tick.handle = None
            self._drop(tick)

    def waiting(self) -> int:
        """Ticks whose timers are still set, in all loops (what a test checks is cleaned up)."""
        return sum(len(ticks) for ticks in self._loops.values())

    def _drop(self, tick: Tick) -> None:
        ticks = tick.ticks
        if ticks.get(tick.at) is tick:
            del ticks[tick.at]
            if not ticks and self._loops.get(tick.loop) is ticks:
                del self._loops[tick.loop]

    def _fire(self, tick: Tick) -> None:
        tick.handle = None
        self._drop(tick)
        waiters, tick.waiters = tick.waiters, set()
        for waiter in waiters:
            waiter.fire(tick)


class Deadline:
    """``async with``: what ``asyncio.timeout(seconds)`` is to the block, on a shared timer.
    The block is cancelled at its tick; leaving, that cancellation becomes TimeoutError."""

    __slots__ = ("_cancelling", "_fired", "_grains", "_seconds", "_task", "_tick")

    def __init__(self, grains: Grains, seconds: float) -> None:
        self._grains = grains
        self._seconds = seconds
        self._fired = False

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline needs a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._tick = self._grains.join(self._seconds, self)

    def fire(self, tick: Tick) -> None:
        if not self._task.done():
            self._fired = True
            self._task.cancel()

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self._grains.leave(self._tick, self)
        fired = self._fired and self._task.uncancel() <= self._cancelling  # (uncancel first)
        if fired and kind is asyncio.CancelledError:
            raise TimeoutError from exc


STEPS = Grains()  # the engine's step timeouts and slow-step warnings


class StepClock:
    """``async with``: a step's timeout (a :class:`Deadline` on :data:`STEPS`, or
    ``asyncio.timeout`` under :data:`SHARED_FROM` seconds) and its slow-step warning
    (``step.running``, logged in the step's context: its trace_id) around the executor
    call."""

    __slots__ = ("_after", "_context", "_end", "_plugin", "_slow", "_uri")

    def __init__(self, timeout: float, slow_after: float | None, uri: str, plugin: str) -> None:
        """``slow_after``: seconds after which a step still running is logged (None: never)."""
        # a short timeout's length matters: a timer of its own
        self._end = asyncio.timeout(timeout) if timeout < SHARED_FROM else Deadline(STEPS, timeout)
        self._after = slow_after
        self._uri = uri
        self._plugin = plugin
        self._slow: Tick | None = None

    async def __aenter__(self) -> None:
        await self._end.__aenter__()
        if self._after is not None:
            self._context = contextvars.copy_context()
            self._slow = STEPS.join(self._after, self)

    def fire(self, tick: Tick) -> None:
        """The slow-step tick: the step is still running."""
        self._context.run(_still_running, self._uri, self._plugin, self._after)

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self._slow is not None:
            STEPS.leave(self._slow, self)
        await self._end.__aexit__(kind, exc, tb)


def _still_running(uri: str, plugin: str, after: float) -> None:
    """A step that has not finished ``after`` seconds in: logged so a hung step is visible
    (the run's own line comes only when it ends). Runs in the step's context: same trace_id."""
    logs.emit("info", "step.running", uri=uri, plugin=plugin, seconds=after)
