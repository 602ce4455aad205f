"""What a ChatQueues work gets from the task it runs on: its own current task (so an
``asyncio.timeout``, or the engine's step timeout, ends the work and never the reader
that put it — on OneBot, the connection), its own context, its failure logged under its
trace id, a cancellation dropping its item; and close() leaving every slot free.

(Written against an eager first step, tried and dropped: a step run outside a task of
its own has the caller's task, or none, for a current task.)
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from tests.support.log_helpers import read_log
from tests.support.steps import one_rule
from tmy import logs
from tmy.adapters.fairness import ChatQueues
from tmy.message import Message, Reply
from tmy.testing import Bot


def _queues(work: Any, **kw: Any) -> ChatQueues[Any]:
    return ChatQueues("fake", "message", work, per_chat=5, total=50, in_flight=4, **kw)


# -- the current task: asyncio.timeout / current_task() in a work's first step -----------------


async def test_a_timeout_entered_in_the_first_step_cancels_the_work_not_the_caller() -> None:
    outcome: list[str] = []

    async def work(chat: Hashable, item: int) -> None:
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(1.0)
            outcome.append("slept")
        except TimeoutError:
            outcome.append("timed out")

    queues = _queues(work)
    stop = asyncio.Event()

    put = asyncio.Event()

    async def reader() -> str:  # a socket reader: hands items over and reads on
        queues.put("c", 1)
        put.set()
        await stop.wait()
        return "read on"

    reading = asyncio.create_task(reader())
    try:
        await put.wait()
        done = await queues.join(0.5)
        assert not reading.done(), "the reader was cancelled by the work's timeout"
        assert done and outcome == ["timed out"]
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    finally:
        stop.set()
        await asyncio.gather(reading, return_exceptions=True)
        await queues.close()


async def test_a_timeout_still_ends_the_work_after_the_putting_task_returned() -> None:
    outcome: list[str] = []

    async def work(chat: Hashable, item: int) -> None:
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(0.6)
            outcome.append("slept")
        except TimeoutError:
            outcome.append("timed out")

    queues = _queues(work)

    async def webhook() -> None:  # a request handler: puts, answers 200, ends
        queues.put("c", 1)

    await asyncio.create_task(webhook())
    try:
        assert await queues.join(0.4), "the work was not timed out"
        assert outcome == ["timed out"]
    finally:
        await queues.close()


async def test_a_work_put_from_a_callback_may_use_a_timeout() -> None:
    outcome: list[str] = []
    failed: list[Exception] = []

    async def work(chat: Hashable, item: int) -> None:
        async with asyncio.timeout(1.0):
            await asyncio.sleep(0)
        outcome.append("ran")

    queues = _queues(work, on_fail=lambda item, exc: failed.append(exc))
    asyncio.get_running_loop().call_soon(queues.put, "c", 1)
    await asyncio.sleep(0)
    try:
        assert await queues.join(0.5)
        assert failed == [] and outcome == ["ran"]
    finally:
        await queues.close()


async def test_current_task_in_a_work_is_its_own() -> None:
    seen: list[asyncio.Task[Any] | None] = []

    async def work(chat: Hashable, item: int) -> None:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())

    queues = _queues(work)
    me = asyncio.current_task()
    queues.put("c", 1)
    try:
        assert await queues.join(0.5)
        assert seen[0] is not me and seen[0] is seen[1]
    finally:
        await queues.close()


# -- the same through the real engine: a step's timeout (StepClock) -----------------------------

SLOW_PLUGIN = """
import asyncio


async def slow(value, cfg, ctx):
    await asyncio.sleep(3)
    return "slept"


def register(registry):
    registry.add("SLOW", slow)
"""


def _plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    (folder / "slow.py").write_text(textwrap.dedent(SLOW_PLUGIN), encoding="utf-8")
    return folder


async def _engine_under_queue(
    tmp_path: Path, step_timeout: float
) -> tuple[bool, list[Reply], bool]:
    """A message whose rule runs a 3 s step under ``step_timeout``, put by a reader task
    into a ChatQueues whose work is the engine (an adapter's inbound queue, as OneBot's):
    (joined within step_timeout + 0.8 s, the replies, the reader still reading)."""
    replies: list[Reply] = []
    async with Bot(
        one_rule("- {plugin: SLOW}"), plugins=_plugins(tmp_path), step_timeout=step_timeout
    ) as bot:
        # the chat's switch verdict cached by a first run (as for any chat that spoke
        # before): the next run reaches its step without awaiting the store
        await bot.ask("go", user="u", chat="c")

        async def answer(chat: Hashable, message: Message) -> None:
            replies.append(await bot.engine.handle(message))

        queues = _queues(answer)
        stop = asyncio.Event()

        put = asyncio.Event()

        async def reader() -> None:
            queues.put("c", Message("go", user="u", chat="c", platform="test"))
            put.set()
            await stop.wait()

        reading = asyncio.create_task(reader())
        try:
            await put.wait()
            joined = await queues.join(step_timeout + 0.8)
            alive = not reading.done()
        finally:
            stop.set()
            await asyncio.gather(reading, return_exceptions=True)
            await queues.close()
    return joined, replies, alive


async def test_engine_step_timeout_short_ends_the_run_not_the_reader(tmp_path: Path) -> None:
    joined, replies, alive = await _engine_under_queue(tmp_path, 0.3)
    assert alive, "the step timeout cancelled the task that put the message"
    assert joined and len(replies) == 1 and "timed out" in (replies[0].error or "")


async def test_engine_step_timeout_shared_ends_the_run_not_the_reader(tmp_path: Path) -> None:
    joined, replies, alive = await _engine_under_queue(tmp_path, 1.0)
    assert alive, "the step timeout cancelled the task that put the message"
    assert joined and len(replies) == 1 and "timed out" in (replies[0].error or "")


# -- a cancellation raised in the first step -----------------------------------------------------


async def test_a_work_cancelled_in_its_first_step_is_dropped_not_raised_into_put() -> None:
    dropped: list[int] = []
    ran: list[int] = []
    gone = asyncio.get_running_loop().create_future()
    gone.cancel()

    async def work(chat: Hashable, item: int) -> None:
        if item == 1:
            await gone  # done already: raises CancelledError without suspending
        ran.append(item)

    queues = _queues(work, on_drop=dropped.append)
    try:
        try:
            queues.put("c", 1)
        except asyncio.CancelledError:
            raise AssertionError("put() raised the work's CancelledError") from None
        queues.put("c", 2)
        assert await queues.join(0.5), "the chat stayed busy"
        assert ran == [2] and queues.in_flight == 0
    finally:
        await queues.close()


# -- close() --------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # see below
async def test_close_gives_back_the_slots_of_tasks_cancelled_before_their_first_step() -> None:
    # (without 2deaaa1 the works of those tasks are also never awaited: RuntimeWarnings)
    gate = asyncio.Event()

    async def work(chat: Hashable, item: int) -> None:
        await gate.wait()

    queues = _queues(work)
    for chat in ("a", "b", "c"):
        queues.put(chat, 1)  # each on a task not yet stepped (eager: one that suspended)
    assert queues.in_flight == 3
    await queues.close()
    assert queues.in_flight == 0 and queues.slots.free == queues.slots.size


# -- the failure's log line: in the work's context -----------------------------------------------


async def test_a_failure_is_logged_with_the_works_trace_id(log_file: Path) -> None:
    async def work(chat: Hashable, item: int) -> None:
        logs.bind_trace("trace-of-item")
        raise ValueError("boom")

    queues = ChatQueues("fake", "reply", work, per_chat=5, total=50, in_flight=4)
    queues.put("c", 1)
    try:
        assert await queues.join(0.5)
    finally:
        await queues.close()
    lines = [line for line in read_log(log_file) if line.get("event") == "fake.reply_failed"]
    assert len(lines) == 1 and lines[0].get("trace_id") == "trace-of-item"


# -- checked and found to behave as a task (no mark) ----------------------------------------------


async def test_context_set_in_the_first_step_is_seen_after_resuming_and_not_by_the_caller() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("v", default="caller")
    seen: list[str] = []

    async def work(chat: Hashable, item: int) -> None:
        var.set(f"w{item}")
        await asyncio.sleep(0)  # a bare yield (None)
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, None)
        await fut
        seen.append(var.get())

    queues = _queues(work)
    queues.put("c", 1)
    assert var.get() == "caller"
    assert await queues.join(0.5)
    assert seen == ["w1"]
    await queues.close()


async def test_a_work_putting_into_its_own_chat_does_not_recurse_and_keeps_order() -> None:
    order: list[int] = []
    queues: ChatQueues[int]

    async def work(chat: Hashable, item: int) -> None:
        order.append(item)
        if item < 5:
            queues.put(chat, item + 1)

    queues = _queues(work)
    queues.put("c", 1)
    assert await queues.join(0.5)
    assert order == [1, 2, 3, 4, 5] and queues.in_flight == 0 and queues.slots.free == 4
    await queues.close()


# -- end to end: OneBot's WebSocket reader runs the engine's first step -------------------------


async def test_onebot_a_step_timeout_does_not_end_the_connection(tmp_path: Path) -> None:
    from tests.support.onebot_fake import loopback, text

    def said(action: dict[str, Any]) -> str:
        return "".join(
            s["data"]["text"] for s in action["params"]["message"] if s["type"] == "text"
        )

    async with (
        Bot(one_rule("- {plugin: SLOW}"), plugins=_plugins(tmp_path), step_timeout=0.3) as bot,
        loopback(bot.engine.handle) as (adapter, impl),  # no store: put by the reader itself
    ):
        await impl.group([text("go 1")], message_id=1)  # the chat's first run (its switch)
        assert "timed out" in said(await impl.next_action(timeout=3))
        await impl.group([text("go 2")], message_id=2)  # a first step that reaches the step
        answer = await impl.next_action(timeout=3)
        assert "timed out" in said(answer)
        assert adapter.health()["self_ids"], "the connection dropped"
