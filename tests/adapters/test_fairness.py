"""tmy.adapters.fairness: per-chat bounded queues served round-robin under an adapter-wide limit.

The adapters' own tests (test_onebot, test_telegram, test_discord_adapter) show the
behaviour end to end against their fakes; these pin down the queue itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from tests.support.log_helpers import read_log
from tmy import metrics
from tmy.adapters.fairness import (
    ChatLanes,
    ChatQueues,
    FairSlots,
    PendingSend,
    PiecewiseSend,
    Step,
)
from tmy.errors import AdapterError


def dropped(adapter: str, what: str) -> float:
    labels = {"adapter": adapter, "what": what}
    return metrics.REGISTRY.get_sample_value("tmy_chat_dropped_total", labels) or 0.0


class Recorder:
    """A work function that records (chat, item) as it starts, optionally held by a gate."""

    def __init__(self) -> None:
        self.order: list[tuple[Hashable, int]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, chat: Hashable, item: int) -> float | None:
        self.order.append((chat, item))
        await self.gate.wait()
        await asyncio.sleep(0)
        return None


async def test_slots_are_granted_first_come_first_served() -> None:
    slots = FairSlots(1)
    await slots.acquire()
    got: list[str] = []

    async def take(name: str) -> None:
        await slots.acquire()
        got.append(name)

    first = asyncio.create_task(take("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(take("second"))
    await asyncio.sleep(0)
    slots.release()
    assert not slots.try_acquire()  # the released slot went to "first", nobody jumps the queue
    await first
    slots.release()
    await second
    assert got == ["first", "second"]


async def test_an_idle_chats_item_starts_at_once_and_the_chats_next_waits_its_turn() -> None:
    work = Recorder()
    work.gate.clear()
    queues: ChatQueues[int] = ChatQueues("t0", "reply", work, per_chat=10, total=100, in_flight=4)
    assert queues.put("a", 0)
    # in flight before any other task ran: no queue, no drain task, never counted as waiting
    assert queues.in_flight == 1 and queues.waiting == 0 and queues.pending("a") == 0
    queues.put("a", 1)
    queues.put("b", 0)
    assert queues.pending("a") == 1 and queues.in_flight == 2  # one at a time per chat
    work.gate.set()
    assert await queues.join(5)
    assert [i for c, i in work.order if c == "a"] == [0, 1]
    queues.put("a", 2)  # the chat went idle: again at once
    assert queues.in_flight == 1 and queues.pending("a") == 0
    assert await queues.join(5)


async def test_an_idle_chat_still_waits_out_its_pacing() -> None:
    work = Recorder()
    queues: ChatQueues[int] = ChatQueues(
        "t0p", "reply", work, per_chat=10, total=100, in_flight=4, interval=0.05
    )
    queues.put("a", 0)
    assert await queues.join(5)
    queues.put("a", 1)  # idle, a slot free, but within the interval after its last send
    assert queues.in_flight == 0 and queues.pending("a") == 1
    assert await queues.join(5)
    assert work.order == [("a", 0), ("a", 1)]


async def test_chats_take_turns_so_a_backlog_does_not_delay_another_chats_first_item() -> None:
    work = Recorder()
    work.gate.clear()
    queues: ChatQueues[int] = ChatQueues("t", "reply", work, per_chat=100, total=1000, in_flight=1)
    for i in range(10):
        queues.put("busy", i)
    await asyncio.sleep(0.01)  # busy's first item is in flight, nine wait
    queues.put("quiet", 0)
    work.gate.set()
    assert await queues.join(5)
    assert work.order.index(("quiet", 0)) <= 2  # not behind busy's whole backlog
    assert [i for c, i in work.order if c == "busy"] == list(range(10))  # in order per chat


async def test_at_the_cap_the_oldest_waiting_item_of_that_chat_is_dropped(log_file: Path) -> None:
    work = Recorder()
    work.gate.clear()
    gone: list[int] = []
    before = dropped("t1", "reply")
    queues: ChatQueues[int] = ChatQueues(
        "t1", "reply", work, per_chat=3, total=1000, in_flight=4, on_drop=gone.append
    )
    for i in range(10):
        queues.put("c", i)
    await asyncio.sleep(0.01)
    assert queues.pending("c") == 3 and queues.in_flight == 1  # one at a time per chat
    assert gone == [1, 2, 3, 4, 5, 6]
    assert dropped("t1", "reply") - before == 6
    work.gate.set()
    assert await queues.join(5)
    assert [i for _, i in work.order] == [0, 7, 8, 9]
    lines = [e for e in read_log(log_file) if e["event"] == "t1.chat_dropped"]
    assert lines[0]["chat"] == "c" and lines[0]["adapter"] == "t1" and lines[0]["what"] == "reply"
    assert sum(e["dropped"] for e in lines) == 6  # the rest are reported when the chat drains


async def test_past_the_total_the_longest_queue_gives_way_to_a_new_chat() -> None:
    work = Recorder()
    work.gate.clear()
    queues: ChatQueues[int] = ChatQueues("t2", "message", work, per_chat=50, total=10, in_flight=1)
    for i in range(11):  # 1 in flight, 10 waiting: the total
        queues.put("flood", i)
    await asyncio.sleep(0.01)
    assert queues.waiting == 10 and queues.full  # a webhook now answers 503
    queues.put("newcomer", 0)
    assert queues.pending("newcomer") == 1 and queues.pending("flood") == 9
    work.gate.set()
    assert await queues.join(5)
    assert ("newcomer", 0) in work.order and ("flood", 1) not in work.order
    assert not queues.full


async def test_a_chat_waiting_to_retry_holds_no_slot() -> None:
    calls: list[str] = []

    async def work(chat: Hashable, item: int) -> float | None:
        calls.append(str(chat))
        if chat == "limited" and calls.count("limited") == 1:
            return 0.3  # a retry-after: call again with the same item later
        return None

    queues: ChatQueues[int] = ChatQueues("t3", "reply", work, per_chat=5, total=10, in_flight=1)
    queues.put("limited", 0)
    await asyncio.sleep(0.01)
    for n in range(3):
        queues.put(f"other{n}", 0)
    assert await queues.join(5)
    # the other chats went while "limited" waited out its pause; then it was called again
    assert calls == ["limited", "other0", "other1", "other2", "limited"]


async def test_many_in_flight_per_chat_and_a_share_left_for_others() -> None:
    work = Recorder()
    work.gate.clear()
    queues: ChatQueues[int] = ChatQueues(
        "t4", "message", work, per_chat=100, total=1000, in_flight=8, per_chat_in_flight=4
    )
    for i in range(20):
        queues.put("busy", i)
    queues.put("quiet", 0)  # starts at once: busy may hold only 4 of the 8 slots
    assert queues.in_flight == 5
    await asyncio.sleep(0.01)
    assert ("quiet", 0) in work.order
    work.gate.set()
    assert await queues.join(5)
    assert len(work.order) == 21


async def test_close_hands_what_waits_to_on_drop() -> None:
    work = Recorder()
    work.gate.clear()
    gone: list[int] = []
    queues: ChatQueues[int] = ChatQueues(
        "t5", "reply", work, per_chat=10, total=100, in_flight=1, on_drop=gone.append
    )
    for i in range(4):
        queues.put("c", i)
    assert not await queues.join(0.05)
    await queues.close()
    # the waiting ones, and the one in flight that close() cancelled before its end
    assert sorted(gone) == [0, 1, 2, 3]
    assert queues.put("c", 9) is False and gone[-1] == 9


class _Send(PendingSend):
    __slots__ = ()
    platform = "fake"


async def test_a_send_paused_between_attempts_fails_when_the_queues_close() -> None:
    """close() cancels an item waiting to be called again: its sender must not wait forever."""
    attempts = 0

    async def flood_wait(chat: Hashable, item: _Send) -> float | None:
        nonlocal attempts
        attempts += 1
        return 30.0  # "retry after 30 s", as a 429 says

    queues: ChatQueues[_Send] = ChatQueues(
        "fake", "reply", flood_wait, per_chat=5, total=50, in_flight=4,
        on_drop=_Send.dropped, on_fail=_Send.failed,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    item = _Send(loop.create_future())
    assert queues.put("c", item)
    async with asyncio.timeout(5):
        while attempts == 0:
            await asyncio.sleep(0.01)
    await queues.close()
    with pytest.raises(AdapterError, match="fake: not sent"):
        async with asyncio.timeout(5):
            await item.done  # type: ignore[misc]


async def test_a_send_step_that_raises_fails_its_sender_with_the_cause() -> None:
    async def unreachable(chat: Hashable, item: _Send) -> float | None:
        raise OSError("Cannot connect to host")  # what aiohttp's connector error is

    queues: ChatQueues[_Send] = ChatQueues(
        "fake", "reply", unreachable, per_chat=5, total=50, in_flight=4,
        on_drop=_Send.dropped, on_fail=_Send.failed,
    )  # fmt: skip
    item = _Send(asyncio.get_running_loop().create_future())
    assert queues.put("c", item)
    with pytest.raises(AdapterError, match="fake: not sent: OSError: Cannot connect to host"):
        async with asyncio.timeout(5):
            await item.done  # type: ignore[misc]
    await queues.close()


class _Reply(PendingSend):
    __slots__ = ("text",)
    platform = "fake"

    def __init__(self, text: str) -> None:
        super().__init__(asyncio.get_running_loop().create_future())
        self.text = text


def _lanes(release: asyncio.Event, sent: list[str]) -> ChatLanes[str, _Reply]:
    """Lanes whose run waits for ``release`` then queues its text as the reply; a reply
    "stuck" meets a retry-after longer than any grace."""

    async def answer(chat: Hashable, text: str) -> float | None:
        await release.wait()
        lanes.outbound.put(chat, _Reply(text))
        return None

    async def send_step(chat: Hashable, reply: _Reply) -> float | None:
        if reply.text == "stuck":
            return 30.0
        sent.append(reply.text)
        reply.finish(None)
        return None

    lanes: ChatLanes[str, _Reply] = ChatLanes(
        "fake", answer, send_step, per_chat=5, total=50, runs=4, runs_per_chat=1, sends=4
    )
    return lanes


async def test_lanes_drain_lets_a_run_and_the_reply_it_queues_go_out() -> None:
    """The graceful stop every adapter shares: a run in flight at stop() queues its reply,
    which goes out within the same grace; nothing new is taken meanwhile."""
    release, sent = asyncio.Event(), []
    lanes = _lanes(release, sent)
    lanes.open()
    lanes.inbound.put("a", "hello")
    assert lanes.waiting() == {"messages": 0, "replies": 0}  # "hello" is in flight
    drained = asyncio.create_task(lanes.drain(5.0))
    await asyncio.sleep(0)
    assert lanes.inbound.put("a", "late") is False
    release.set()
    async with asyncio.timeout(5):
        await drained
    assert sent == ["hello"]


async def test_lanes_drain_drops_a_reply_that_outlasts_the_grace_and_tells_its_sender() -> None:
    release, sent = asyncio.Event(), []
    release.set()
    lanes = _lanes(release, sent)
    stuck = _Reply("stuck")
    lanes.outbound.put("a", stuck)
    assert not await lanes.settle(0.05)
    async with asyncio.timeout(5):
        await lanes.drain(0.05)
    with pytest.raises(AdapterError, match="fake: not sent"):
        await stuck.done  # type: ignore[misc]
    assert lanes.outbound.put("a", _Reply("after")) is False and sent == []


async def test_a_piecewise_send_moves_on_piece_by_piece_and_tells_its_sender_at_the_end() -> None:
    """Each sent piece starts the next with no retries and a short backoff; the last one
    tells whoever waits (the same step in every adapter's send)."""
    out = PiecewiseSend(asyncio.get_running_loop().create_future())
    out.retries = 2
    out.backoff.next(), out.backoff.next()
    assert out.piece_sent(2) == 0.0
    assert (out.index, out.retries, out.backoff.attempt) == (1, 0, 0)
    assert not out.done.done()  # type: ignore[union-attr]
    assert out.piece_sent(2) is None
    assert out.done.done() and out.done.result() is None  # type: ignore[union-attr]


def test_a_piece_is_retried_a_few_times_and_never_after_a_wait_that_would_block_its_chat() -> None:
    out = PiecewiseSend(None)
    assert out.may_retry() and out.may_retry(120.0)
    assert not out.may_retry(121.0)  # a rate limit asking more: the send fails instead
    out.retries = out.max_retries
    assert not out.may_retry()


class Answered:
    """A work that answers with a Future, or a Step (``kind``), ended by :meth:`answer` (a
    send waiting for its answer): no coroutine."""

    def __init__(self, again: list[float | None] | None = None, kind: str = "future") -> None:
        self.order: list[tuple[Hashable, int]] = []
        self.steps: list[asyncio.Future[float | None] | Step] = []
        self.again = again or []
        self.kind = kind

    def __call__(self, chat: Hashable, item: int) -> asyncio.Future[float | None] | Step:
        self.order.append((chat, item))
        step: asyncio.Future[float | None] | Step = (
            Step() if self.kind == "step" else asyncio.get_running_loop().create_future()
        )
        self.steps.append(step)
        return step

    def answer(self, n: int = 0, error: Exception | None = None) -> None:
        step = self.steps[n]
        again = None if error is not None else (self.again.pop(0) if self.again else None)
        if isinstance(step, Step):
            step.failed(error) if error is not None else step.done(again)
        elif error is not None:
            step.set_exception(error)
        else:
            step.set_result(again)


KINDS = pytest.mark.parametrize("kind", ["future", "step"])


@KINDS
async def test_a_work_answering_with_a_future_is_followed_without_a_task(kind: str) -> None:
    work = Answered(kind=kind)
    queues: ChatQueues[int] = ChatQueues("tf", "reply", work, per_chat=10, total=100, in_flight=4)
    tasks = len(asyncio.all_tasks())
    queues.put("a", 0)
    queues.put("a", 1)  # waits: one at a time per chat, in order
    queues.put("b", 0)
    assert len(asyncio.all_tasks()) == tasks + 1  # a's drain only: no task per item in flight
    assert queues.in_flight == 2 and queues.pending("a") == 1
    work.answer(0)
    await asyncio.sleep(0.01)
    assert work.order == [("a", 0), ("b", 0), ("a", 1)]  # a's next once its first was answered
    work.answer(1)
    work.answer(2)
    assert await queues.join(5)
    assert queues.in_flight == 0


@KINDS
async def test_a_future_work_with_more_pieces_goes_on_after_the_chats_pacing(kind: str) -> None:
    work = Answered(again=[0.0, None], kind=kind)
    queues: ChatQueues[int] = ChatQueues(
        "tf2", "reply", work, per_chat=10, total=100, in_flight=1, interval=0.02
    )
    queues.put("a", 0)
    work.answer(0)  # one more piece to go
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert queues.in_flight == 0 and len(work.steps) == 1  # the slot is free while it waits
    await asyncio.sleep(0.05)
    assert work.order == [("a", 0), ("a", 0)]
    work.answer(1)
    assert await queues.join(5)


@KINDS
async def test_a_future_work_that_fails_or_is_cut_by_close_tells_on_fail_and_on_stop(
    log_file: Path, kind: str
) -> None:
    work = Answered(kind=kind)
    failed: list[tuple[int, str]] = []
    stopped: list[int] = []
    dropped_: list[int] = []
    queues: ChatQueues[int] = ChatQueues(
        "tf3", "reply", work, per_chat=10, total=100, in_flight=4,
        on_fail=lambda item, exc: failed.append((item, str(exc))),
        on_stop=stopped.append, on_drop=dropped_.append,
    )  # fmt: skip
    queues.put("a", 0)
    queues.put("b", 1)
    queues.put("b", 2)  # waits behind b's first
    work.answer(0, RuntimeError("socket gone"))
    await asyncio.sleep(0.01)
    assert failed == [(0, "socket gone")] and queues.in_flight == 1
    await queues.close()
    assert stopped == [1] and dropped_ == [2]  # in flight: on_stop; waiting: on_drop
    assert queues.in_flight == 0
    assert any(e["event"] == "tf3.reply_failed" for e in read_log(log_file))


async def test_a_work_that_raises_before_answering_fails_its_item_and_frees_the_slot() -> None:
    failed: list[int] = []

    def broken(chat: Hashable, item: int) -> asyncio.Future[float | None]:
        raise RuntimeError("bad frame")

    queues: ChatQueues[int] = ChatQueues(
        "tf4", "reply", broken, per_chat=10, total=100, in_flight=1,
        on_fail=lambda item, exc: failed.append(item),
    )  # fmt: skip
    assert queues.put("a", 0)  # the caller (a reader, a run) never sees the exception
    assert queues.put("a", 1)
    assert await queues.join(5)
    assert failed == [0, 1] and queues.in_flight == 0


async def test_a_step_ended_before_its_work_returned_it_goes_on_at_once() -> None:
    def refused(chat: Hashable, item: int) -> Step:
        step = Step()
        step.done(None)  # a send refused at once (the socket closed): done already
        return step

    queues: ChatQueues[int] = ChatQueues("tf5", "reply", refused, per_chat=10, total=100,
                                         in_flight=1)  # fmt: skip
    queues.put("a", 0)
    queues.put("a", 1)
    assert await queues.join(5)
    assert queues.in_flight == 0


async def test_a_work_done_at_once_ends_when_put_and_makes_no_task() -> None:
    """A work answering None at once (the OneBot adapter's FAQ answer) is done: its slot
    is free again before put() returns, and no task was made for it."""
    done: list[tuple[Hashable, int]] = []

    def at_once(chat: Hashable, item: int) -> None:
        done.append((chat, item))

    queues: ChatQueues[int] = ChatQueues(
        "tf", "message", at_once, per_chat=5, total=50, in_flight=2
    )
    tasks = len(asyncio.all_tasks())
    for chat in ("a", "b", "c"):
        assert queues.put(chat, 1)
        assert queues.in_flight == 0 and len(asyncio.all_tasks()) == tasks
    assert done == [("a", 1), ("b", 1), ("c", 1)]
    assert await queues.join(0.1)


async def test_a_busy_chats_backlog_of_works_done_at_once_drains_in_order_without_recursing() -> (
    None
):
    """A chat's queued items started by the end of the one before end on a later pass, not
    inside that end: 500 of them would otherwise nest 500 deep (a RecursionError)."""
    order: list[int] = []
    gate = asyncio.Event()

    def work(chat: Hashable, item: int) -> Any:
        if item == 0:  # the first one holds the chat while the rest queue up

            async def first() -> None:
                await gate.wait()
                order.append(0)

            return first()
        order.append(item)
        return None

    queues: ChatQueues[int] = ChatQueues(
        "tf", "message", work, per_chat=600, total=600, in_flight=4
    )  # fmt: skip
    for i in range(500):
        queues.put("c", i)
    gate.set()
    assert await queues.join(10)
    assert order == list(range(500)) and queues.in_flight == 0
