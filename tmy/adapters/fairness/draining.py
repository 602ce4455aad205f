"""The task-driven half of :class:`~tmy.adapters.fairness.queues.ChatQueues`.

A chat whose next item cannot start at once (no free slot, its pacing, its own
in-flight cap) gets a drain task that waits for each in turn; an item whose work
is a coroutine, or which has more to do after a pause, runs on a task of its own.
(The usual item needs neither: it starts when put, and a work answering with a
Future or a :class:`~tmy.adapters.fairness.step.Step` is followed by a callback —
:meth:`Draining._went_on`, a step's end without a task, is here too — and one answering
None, done at once, is over before ``put`` returns.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tmy.adapters.fairness.lane import Lane
from tmy.adapters.fairness.step import STOPPED, Step

if TYPE_CHECKING:
    from tmy.adapters.fairness.slots import FairSlots

T = TypeVar("T")


class Draining(Generic[T]):
    """:meth:`_drain` and :meth:`_execute`, on the queue's own state and bookkeeping
    (ChatQueues sets the one and has the other: ``_paced``, ``_start``, ``_pace``,
    ``_ended``, ``_retire``), and the tasks items go on on (:meth:`_task`)."""

    slots: FairSlots
    per_chat_in_flight: int
    interval: float
    adapter: str
    what: str
    _ready_at: dict[Hashable, float]
    _runs: dict[int, Any]
    _tasked: dict[int, tuple[Any, ...]]
    _work: Callable[[Hashable, T], Any]
    _on_fail: Callable[[T, Exception], None] | None
    _log: Any

    def _task(
        self,
        chat: Hashable,
        lane: Lane[T],
        item: T,
        run: int,
        coro: Coroutine[Any, Any, None],
        work: Any = None,
    ) -> None:
        """Go on with ``item`` on a task (the loop's own create_task: no name to format),
        kept for :meth:`_unstarted`. ``work``: the work's awaitable ``coro`` awaits first.
        It leaves ``_runs`` and ``_tasked`` in ``_ended``."""
        self._runs[run] = asyncio.get_running_loop().create_task(coro)
        self._tasked[run] = (chat, lane, item, work)

    def _unstarted(self) -> None:
        """After close() cancelled every task: those cancelled before their first step
        never ran ``_execute``'s end — their items end here (dropped), their works are
        closed unawaited — and no slot is left held (a queue opened again has them all)."""
        for run, (chat, lane, item, work) in list(self._tasked.items()):
            if asyncio.iscoroutine(work):
                work.close()
            self._ended(chat, lane, item, run, ended=False)
        self.slots.free = self.slots.size

    def _stepped(
        self, chat: Hashable, lane: Lane[T], item: T, run: int, step: asyncio.Future[Any]
    ) -> None:
        """A work's Future ended: what ``_execute`` does after an awaited step, without a
        task (one is made only when the item has more to do)."""
        if step.cancelled():  # close() while in flight
            self._went_on(chat, lane, item, run, None, STOPPED)
            return
        error = step.exception()
        self._went_on(chat, lane, item, run, None if error else step.result(), error)

    def _step_ended(self, step: Step) -> None:
        """A work's :class:`Step` ended (at once: the answer that ended it is being read)."""
        self._went_on(step.chat, step.lane, step.item, step.run, step.again, step.error)

    def _went_on(
        self,
        chat: Hashable,
        lane: Lane[T],
        item: T,
        run: int,
        again: float | None,
        error: BaseException | None,
    ) -> None:
        """After a step that ran without a task: free its slot; the item is done, stopped,
        failed, or (more to do) goes on on a task of its own after its pause."""
        slots = self.slots
        if slots._waiters:
            slots.release()
        else:  # FairSlots.release inline: nobody waits for the slot
            slots.free += 1
        if error is None and again is None and self.interval <= 0:  # done, nothing to pace
            self._ended(chat, lane, item, run, True)
            return
        if error is STOPPED:  # close() while in flight
            self._ended(chat, lane, item, run, ended=False, stopped=True)
            return
        if error is not None:
            self._log.error(f"{self.adapter}.{self.what}_failed", chat=str(chat), exc_info=error)
            again = None
            if self._on_fail is not None and isinstance(error, Exception):
                self._on_fail(item, error)
        pause = max(again or 0.0, self.interval)
        if pause > 0:
            self._pace(chat, time.monotonic() + pause)
        if again is None:
            self._ended(chat, lane, item, run, ended=True)
            return
        self._task(chat, lane, item, run, self._execute(chat, lane, item, run, resume=pause))

    async def _drain(self, chat: Hashable, lane: Lane[T]) -> None:
        """Serve one chat's queue: wait for its pacing, its own room, then a fair slot."""
        try:
            while lane.items:
                delay = self._ready_at.get(chat, 0.0) - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                if lane.running >= self.per_chat_in_flight:
                    if lane.wake is None:
                        lane.wake = asyncio.Event()
                    lane.wake.clear()
                    await lane.wake.wait()
                    continue
                await self.slots.acquire()  # one waiter per chat, served in turn: a round robin
                if lane.items and lane.running < self.per_chat_in_flight and self._paced(chat):
                    self._start(chat, lane)
                else:  # the items were dropped, or started, meanwhile
                    self.slots.release()
        finally:
            lane.task = None
            self._retire(chat, lane)

    async def _execute(
        self,
        chat: Hashable,
        lane: Lane[T],
        item: T,
        run: int,
        step: Awaitable[float | None] | None = None,
        resume: float | None = None,
    ) -> None:
        """Work on one item holding a slot (released while it waits to be called again).
        ``step``: the work's first call, already made; ``resume``: a step already ended,
        go on after this pause (and a slot)."""
        ended = False  # the work function said it is done with the item (or raised)
        try:
            if resume is not None:
                if resume > 0:
                    await asyncio.sleep(resume)
                await self.slots.acquire()
            while True:
                try:
                    again = await (step if step is not None else self._work(chat, item))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._log.exception(f"{self.adapter}.{self.what}_failed", chat=str(chat))
                    again = None
                    if self._on_fail is not None:
                        self._on_fail(item, exc)
                finally:
                    self.slots.release()
                step = None
                pause = max(again or 0.0, self.interval)
                if pause > 0:
                    self._pace(chat, time.monotonic() + pause)
                if again is None:
                    ended = True
                    return
                if pause > 0:
                    await asyncio.sleep(pause)
                await self.slots.acquire()
        finally:
            self._ended(chat, lane, item, run, ended=ended)
