"""tmy.llm.deadline: LLM steps' deadlines on shared loop timers (a thousand steps in flight
were a thousand timers in the loop's heap)."""

from __future__ import annotations

import asyncio

import pytest

from tmy.llm.deadline import Deadlines

GRAIN = 0.01


def deadlines() -> Deadlines:
    return Deadlines(grain=GRAIN, shared_from=0.05)


async def test_a_block_past_its_shared_deadline_ends_with_timeout_error() -> None:
    d = deadlines()
    with pytest.raises(TimeoutError):
        async with d.bound(0.05, 60.0, alone=False):
            await asyncio.sleep(5)
    assert not d.grains.waiting()  # the tick went with its timer


async def test_blocks_ending_in_one_grain_share_one_timer() -> None:
    d = deadlines()
    entered = asyncio.Event()
    count = 0

    async def step() -> str:
        nonlocal count
        try:
            async with d.bound(0.2, 60.0, alone=False):
                count += 1
                if count == 100:
                    entered.set()
                await asyncio.sleep(5)
        except TimeoutError:
            return "deadline"
        return "done"

    tasks = [asyncio.create_task(step()) for _ in range(100)]
    await entered.wait()
    assert 1 <= d.grains.waiting() <= 2  # 100 steps, at most two grains: not 100 timers
    assert await asyncio.gather(*tasks) == ["deadline"] * 100


async def test_a_block_done_in_time_leaves_no_timer_and_no_cancellation() -> None:
    d = deadlines()
    async with d.bound(0.5, 60.0, alone=False):
        await asyncio.sleep(0)
    assert not d.grains.waiting()
    await asyncio.sleep(0.6)  # past the deadline: nothing fires at this task
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    d = deadlines()
    started = asyncio.Event()

    async def step() -> None:
        async with d.bound(5.0, 60.0, alone=False):
            started.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(step())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not d.grains.waiting()


async def test_one_step_of_a_shared_tick_ending_early_leaves_the_others_bounded() -> None:
    d = deadlines()

    async def step(wait: float) -> str:
        try:
            async with d.bound(0.1, 60.0, alone=False):
                await asyncio.sleep(wait)
        except TimeoutError:
            return "deadline"
        return "done"

    assert await asyncio.gather(step(0), step(5)) == ["done", "deadline"]


async def test_short_nested_or_tight_deadlines_keep_a_timer_of_their_own() -> None:
    d = deadlines()
    assert isinstance(d.bound(0.01, 60.0, alone=False), asyncio.Timeout)  # too short
    assert isinstance(d.bound(1.0, 60.0, alone=True), asyncio.Timeout)  # a tool's step
    assert isinstance(d.bound(59.9, 60.0, alone=False), asyncio.Timeout)  # near the step's
    assert not isinstance(d.bound(58.8, 60.0, alone=False), asyncio.Timeout)
