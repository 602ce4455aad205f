"""tmy.engine.timers: step timeouts and slow-step warnings on loop timers shared by grain
(a thousand steps in flight were thousands of timers in the loop's heap)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.log_helpers import read_log
from tmy import logs
from tmy.engine.timers import STEPS, Deadline, Grains, StepClock


async def test_a_block_past_its_shared_deadline_ends_with_timeout_error() -> None:
    grains = Grains(0.01)
    with pytest.raises(TimeoutError):
        async with Deadline(grains, 0.05):
            await asyncio.sleep(5)
    assert grains.waiting() == 0  # the tick went with its timer


async def test_deadlines_ending_in_one_grain_share_one_timer() -> None:
    grains = Grains(0.05)
    entered = asyncio.Event()
    count = 0

    async def step() -> str:
        nonlocal count
        try:
            async with Deadline(grains, 0.2):
                count += 1
                if count == 100:
                    entered.set()
                await asyncio.sleep(5)
        except TimeoutError:
            return "deadline"
        return "done"

    tasks = [asyncio.create_task(step()) for _ in range(100)]
    await entered.wait()
    assert 1 <= grains.waiting() <= 2  # 100 steps, at most two grains: not 100 timers
    assert await asyncio.gather(*tasks) == ["deadline"] * 100
    assert grains.waiting() == 0


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    grains = Grains(0.01)
    started = asyncio.Event()

    async def step() -> None:
        async with Deadline(grains, 5.0):
            started.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(step())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert grains.waiting() == 0


async def test_a_step_clock_past_its_timeout_ends_with_timeout_error() -> None:
    with pytest.raises(TimeoutError):  # 1 s: shared
        async with StepClock(1.0, None, "r/0", "SLEEP"):
            await asyncio.sleep(5)
    with pytest.raises(TimeoutError):  # shorter: a timer of its own
        async with StepClock(0.05, None, "r/0", "SLEEP"):
            await asyncio.sleep(5)
    assert STEPS.waiting() == 0
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_step_done_in_time_leaves_no_timer_and_logs_nothing(log_file: Path) -> None:
    async with StepClock(60.0, 0.05, "r/0", "SLEEP"):
        await asyncio.sleep(0)
    assert STEPS.waiting() == 0
    await asyncio.sleep(0.15)  # past the warning: nothing fires
    assert [e for e in read_log(log_file) if e["event"] == "step.running"] == []


async def test_a_slow_step_is_logged_once_in_its_own_context(log_file: Path) -> None:
    async def step(trace: str) -> None:
        logs.TRACE.set(trace)
        async with StepClock(60.0, 0.05, f"{trace}/0", "SLEEP"):
            await asyncio.sleep(0.2)

    await asyncio.gather(step("t1"), step("t2"))
    lines = [e for e in read_log(log_file) if e["event"] == "step.running"]
    assert sorted((e["trace_id"], e["uri"], e["seconds"]) for e in lines) == [
        ("t1", "t1/0", 0.05),
        ("t2", "t2/0", 0.05),
    ]
    assert STEPS.waiting() == 0


async def test_a_warning_in_the_timeouts_own_grain_comes_first_then_the_timeout(
    log_file: Path,
) -> None:
    with pytest.raises(TimeoutError):
        async with StepClock(1.0, 0.99, "r/0", "SLEEP"):
            await asyncio.sleep(5)
    assert [e["event"] for e in read_log(log_file)] == ["step.running"]
    assert STEPS.waiting() == 0
