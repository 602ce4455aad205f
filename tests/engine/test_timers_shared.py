"""The shared step timers (tmy/engine/timers.py): a step is never cancelled before
its timeout, a short timeout keeps its own timer, a finished or cancelled step's entry goes
(no cancel of a later block on the same task), an outside cancel coinciding with the timer
stays a cancel, nested clocks. Times are only checked from below (never early)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tmy.engine.timers import GRAIN, STEPS, Grains, StepClock, Tick

pytestmark = pytest.mark.slow  # each waits past a 1 s timeout


async def timed_out_after(timeout: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        async with StepClock(timeout, None, "r/0", "SLEEP"):
            await asyncio.sleep(30)
    return loop.time() - start


async def test_a_shared_timeout_never_fires_early() -> None:
    timeouts = [1.0, 1.001, 1.0249, 1.025, 1.049, 1.05, 1.0501, 1.33]
    elapsed = await asyncio.gather(*(timed_out_after(t) for t in timeouts))
    for timeout, took in zip(timeouts, elapsed, strict=True):
        assert took >= timeout, (timeout, took)
    assert STEPS.waiting() == 0


async def test_a_short_timeout_has_its_own_timer_and_is_not_early() -> None:
    assert await timed_out_after(0.3) >= 0.3
    assert await timed_out_after(0.999) >= 0.999
    assert STEPS.waiting() == 0


async def test_a_step_ending_just_before_its_timeout_is_not_cancelled() -> None:
    async def step(timeout: float) -> str:
        async with StepClock(timeout, None, "r/0", "SLEEP"):
            await asyncio.sleep(timeout - 0.04)
        return "done"

    assert await asyncio.gather(*(step(1.0 + i / 97) for i in range(8))) == ["done"] * 8
    assert STEPS.waiting() == 0


async def test_a_finished_steps_timer_does_not_cancel_the_next_block_of_its_task() -> None:
    async with StepClock(1.0, 0.5, "r/0", "SLEEP"):
        await asyncio.sleep(0)
    assert STEPS.waiting() == 0
    async with StepClock(30.0, None, "r/1", "SLEEP"):
        await asyncio.sleep(1.2)  # past the first block's timeout: not cancelled
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert STEPS.waiting() == 0


async def test_a_cancelled_step_leaves_no_entry_and_stays_cancelled() -> None:
    started = asyncio.Event()

    async def step() -> None:
        async with StepClock(5.0, 1.0, "r/0", "SLEEP"):
            started.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(step())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert STEPS.waiting() == 0


class Canceller:
    """A waiter on a shared tick that cancels a task from outside as the tick fires."""

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task

    def fire(self, tick: Tick) -> None:
        self.task.cancel()


async def test_an_outside_cancel_in_the_timeouts_own_tick_stays_a_cancel() -> None:
    """The task is cancelled from outside at the very moment its timeout fires: like
    asyncio.timeout, the block ends with CancelledError (not TimeoutError, which would
    swallow the outside cancel)."""
    entered = asyncio.Event()
    clock = StepClock(1.0, None, "r/0", "SLEEP")

    async def step() -> str:
        try:
            async with clock:
                entered.set()
                await asyncio.sleep(30)
        except TimeoutError:
            return "timeout"
        return "done"

    task = asyncio.create_task(step())
    await entered.wait()
    canceller = Canceller(task)
    tick = clock._end._tick  # its Deadline's tick
    assert tick is not None
    loop = asyncio.get_running_loop()
    assert STEPS.join(tick.at * GRAIN - loop.time() - GRAIN / 10, canceller) is tick  # its tick
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.1)
    assert STEPS.waiting() == 0


async def test_nested_clocks_inner_times_out_outer_goes_on() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with StepClock(3.0, None, "r/0", "RUN"):
        with pytest.raises(TimeoutError):
            async with StepClock(1.0, None, "s/0", "SLEEP"):
                await asyncio.sleep(30)
        assert loop.time() - start >= 1.0
        await asyncio.sleep(0.2)  # the outer one is not cancelled by the inner's timer
    with pytest.raises(TimeoutError):  # and the outer still times out, not early
        async with StepClock(1.0, None, "r/1", "RUN"), StepClock(3.0, None, "s/1", "SLEEP"):
            await asyncio.sleep(30)
    assert STEPS.waiting() == 0
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_fired_tick_left_late_and_a_new_tick_of_the_same_grain() -> None:
    grains = Grains(0.05)

    class Noted:
        fired = 0

        def fire(self, tick: Tick) -> None:
            self.fired += 1

    first = Noted()
    tick = grains.join(0.01, first)
    await asyncio.sleep(0.1)
    assert first.fired == 1 and grains.waiting() == 0
    second = Noted()
    again = grains.join(0.01, second)
    grains.leave(tick, first)  # leaving the fired tick late touches nothing else
    assert grains.waiting() == 1
    grains.leave(again, second)
    assert grains.waiting() == 0 and second.fired == 0
