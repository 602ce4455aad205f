"""Per-chat queues served fairly: one busy chat cannot starve the others.

**Why.** Under one adapter-wide limit on everything held (waiting, running, paced),
one group at 10 messages/s with replies paced 0.5 s apart filled the limit with its
own paced replies in two minutes; then every other group's messages were dropped.

**What this does.** An adapter keeps two :class:`ChatQueues`: one for
messages waiting to run in the engine (``what="message"``) and one for
replies waiting to be sent (``what="reply"``). Each chat has its own FIFO
queue and, while items wait in it, its own drain task (an item for a chat
with nothing waiting or in flight starts at once when a slot is free: on a task
of its own, or none when the work answers with a Future (a send awaiting its answer)):

* **Bounded per chat.** At most ``per_chat`` items wait in one chat; at the
  cap the oldest waiting item of that chat is dropped, with a warning
  ``<adapter>.chat_dropped`` naming the adapter and the chat (at most one line
  per chat every :data:`LOG_EVERY` seconds, carrying the count) and
  ``metrics.chat_dropped(adapter, what)`` for each one.
* **Bounded in total.** All chats together hold at most ``total`` waiting
  items; past that the oldest item of the *longest* queue is dropped, so a
  chat that has nothing waiting always gets in while another floods.
* **Only work in flight counts toward the adapter-wide limit.** ``in_flight``
  slots are held only while an item is being worked on (a run in the engine,
  one send request). A chat waiting for its pacing (``interval`` after its
  previous send, or a platform's retry-after) holds no slot.
* **Fair.** Each chat's drain task is at most one waiter for a slot, and slots
  are granted first come, first served (:class:`FairSlots`), so with N chats
  that have work each gets every N-th slot: a round robin. One chat also uses
  at most ``per_chat_in_flight`` slots at once, so a chat whose runs are slow
  (an LLM) leaves the other slots to the other chats.

Items in flight are neither counted as waiting nor droppable. ``interval``
paces one chat's items (a reply's pieces too): the next starts at least
``interval`` seconds after the previous one ended; with ``per_chat_in_flight``
of 1 the chat's items run one after another, in order.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from tmy import metrics
from tmy.adapters.fairness.draining import Draining
from tmy.adapters.fairness.lane import Lane
from tmy.adapters.fairness.slots import FairSlots
from tmy.adapters.fairness.step import Step
from tmy.logs import get_logger

T = TypeVar("T")

_CALL: Any = object()  # ChatQueues._run: the work is still to be asked
LOG_EVERY = 10.0  # seconds between two chat_dropped lines of one chat (the count is carried)
MAX_READY_ENTRIES = 4096  # per-chat pacing times kept before past ones are forgotten

# work(chat, item): None when the item is done; seconds to wait before calling it again
# with the same item (another piece of a reply, a platform's retry-after) otherwise. A
# coroutine runs on a task of its own; a Future is followed by a callback, no task; a Step
# (a send waiting for its answer: tmy.adapters.fairness.step) goes on when it ends, no task
# and no pass of the loop; None returned at once: done, no task (a FAQ answer).
Work = Callable[[Hashable, T], Awaitable[float | None] | Step | None]


class ChatQueues(Draining[T]):
    """Per-chat bounded queues with fair, adapter-wide-limited service; see the module docstring.

    A chat is any hashable key; an ``(account, chat)`` tuple is logged as its two parts.
    """

    def __init__(
        self,
        adapter: str,
        what: str,
        work: Work[T],
        *,
        per_chat: int,
        total: int,
        in_flight: int,
        per_chat_in_flight: int = 1,
        interval: float = 0.0,
        on_drop: Callable[[T], None] | None = None,
        on_fail: Callable[[T, Exception], None] | None = None,
        on_stop: Callable[[T], None] | None = None,
    ) -> None:
        if per_chat < 1 or total < 1 or per_chat_in_flight < 1:
            raise ValueError("ChatQueues bounds must be at least 1")
        self.adapter = adapter
        self.what = what  # "message" or "reply": the metric's label and the log's wording
        self.per_chat = per_chat
        self.total = total
        self.per_chat_in_flight = per_chat_in_flight
        self.interval = interval
        self.slots = FairSlots(in_flight)
        self._work = work
        # on_drop(item): the item will not be worked on to its end — dropped from a full
        # queue, still waiting at close(), or cancelled by close() while in flight (a send
        # waiting between two attempts must not leave its sender waiting forever)
        self._on_drop = on_drop
        # on_fail(item, exc): the work function raised (a network error it did not expect)
        self._on_fail = on_fail
        # on_stop(item): close() cancelled it while a work's Future had it in flight (the
        # adapter's own words for that, as its coroutine would say them); else on_drop
        self._on_stop = on_stop
        self._log = get_logger(f"tmy.adapter.{adapter}")
        self._lanes: dict[Hashable, Lane[T]] = {}
        self._ready_at: dict[Hashable, float] = {}  # chat -> monotonic time its next item may start
        # items in flight (their tasks, or the Futures their works answered), by run number
        self._runs: dict[int, asyncio.Task[None] | asyncio.Future[Any] | Step] = {}
        self._tasked: dict[int, tuple[Any, ...]] = {}  # runs on a task: Draining._task
        self._asking: set[Hashable] = set()  # chats whose work put() is asking (_at_once)
        self._run_ids = itertools.count()
        self._waiting = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._room = asyncio.Event()  # set while fewer than ``total`` items wait
        self._room.set()
        self.accepting = True

    # -- what adapters call ----------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Items waiting (not in flight) in all chats together."""
        return self._waiting

    @property
    def full(self) -> bool:
        """``total`` items wait: a source that can be asked to deliver again later (a
        webhook's 503) should be; one that cannot waits for :meth:`room`."""
        return self._waiting >= self.total

    @property
    def in_flight(self) -> int:
        return self.slots.busy

    def pending(self, chat: Hashable) -> int:
        """Items of ``chat`` waiting (not in flight)."""
        lane = self._lanes.get(chat)
        return len(lane.items) if lane is not None else 0

    async def room(self) -> None:
        """Return once fewer than ``total`` items wait (for sources that can hold back)."""
        await self._room.wait()

    def put(self, chat: Hashable, item: T) -> bool:
        """Queue ``item`` for ``chat``; False when not accepting (then ``on_drop`` got it).

        At the chat's cap (or the total cap) an older item is dropped instead, as
        the module docstring says; the new item is always kept.
        """
        if not self.accepting:
            if self._on_drop is not None:
                self._on_drop(item)
            return False
        lane = self._lanes.get(chat)
        if lane is None and chat in self._asking:  # its work, being asked, put it again:
            lane = self._lane(chat)  # it waits behind that item, which counts as running
            lane.running += 1
        elif lane is None:
            # an idle chat, a free slot nobody waits for, its pacing past: it never waits
            # (FairSlots.try_acquire and _paced inline: the path of nearly every item)
            slots = self.slots
            if self._waiting < self.total and slots.free > 0 and not slots._waiters:
                ready_at = self._ready_at.get(chat)
                if ready_at is None or ready_at <= time.monotonic():
                    slots.free -= 1
                    self._at_once(chat, item)
                    return True
            lane = self._lane(chat)
        if len(lane.items) >= self.per_chat:
            self._drop_oldest(chat, lane)
        elif self._waiting >= self.total:
            victim, longest = max(self._lanes.items(), key=lambda kv: len(kv[1].items))
            if len(longest.items) > len(lane.items):
                self._drop_oldest(victim, longest)
            else:
                self._drop_oldest(chat, lane)
        lane.items.append(item)
        self._waiting += 1
        if self._waiting >= self.total:
            self._room.clear()
        self._start_ready(chat, lane)
        if lane.items and lane.task is None:
            lane.task = asyncio.get_running_loop().create_task(self._drain(chat, lane))
        return True

    async def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until nothing waits or runs; True if it got there."""
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop: cancel what is in flight, hand what still waits to ``on_drop`` (no metric)."""
        self.accepting = False
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        for run in list(self._runs.values()):
            if type(run) is Step:
                run.cancel()  # its item is stopped now (on_stop)
            elif isinstance(run, asyncio.Handle):  # an end due on the next pass: _unstarted's
                run.cancel()
            else:
                tasks.append(run)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._unstarted()
        self._runs.clear()
        for lane in self._lanes.values():
            while lane.items:
                item = lane.items.popleft()
                if self._on_drop is not None:
                    self._on_drop(item)
        self._lanes.clear()
        self._waiting = 0
        self._idle.set()
        self._room.set()

    # -- the drain ---------------------------------------------------------------------------------

    def _start_ready(self, chat: Hashable, lane: Lane[T]) -> None:
        """Start at once what may start now: a slot free with nobody waiting, the chat's own
        room and pacing allowing. (A socket reader can hand over a whole burst before any
        other task runs; without this the burst would meet the cap while slots stood idle.)"""
        while (
            lane.items
            and lane.running < self.per_chat_in_flight
            and self._paced(chat)
            and self.slots.try_acquire()
        ):
            self._start(chat, lane)

    def _paced(self, chat: Hashable) -> bool:
        """True when the chat's pacing lets its next item start now."""
        ready_at = self._ready_at.get(chat)
        return ready_at is None or ready_at <= time.monotonic()

    def _start(self, chat: Hashable, lane: Lane[T]) -> None:
        """Take the chat's oldest item into flight (a slot is already held for it)."""
        item = lane.items.popleft()
        self._took()
        self._run(chat, lane, item)

    def _at_once(self, chat: Hashable, item: T) -> None:
        """An idle chat's item, its slot held: without pacing its work is asked before any
        lane is made — one done at once (None) takes no lane, run number or end — then
        it goes on as :meth:`_run` has it."""
        step = _CALL
        if self.interval <= 0:
            asking = self._asking
            asking.add(chat)
            try:
                step = self._call(chat, item)
            finally:
                asking.discard(chat)
            lane = self._lanes.get(chat)
            if lane is None:
                if step is None:
                    self.slots.release()
                    return
            else:  # a put of this chat while it was asked made it, counting this item in
                lane.running -= 1
        self._run(chat, self._lane(chat), item, at_once=True, step=step)

    def _lane(self, chat: Hashable) -> Lane[T]:
        """``chat``'s lane, made when it has none (the queue is then no longer idle)."""
        lane = self._lanes.get(chat)
        if lane is None:
            if not self._lanes:
                self._idle.clear()
            lane = self._lanes[chat] = Lane()
        return lane

    def _call(self, chat: Hashable, item: T) -> Any:
        """The work's answer for ``item``; one that raised is a Future failed with it."""
        try:
            return self._work(chat, item)
        except Exception as exc:  # a work answering with a Future failed before it: the same
            step = asyncio.get_running_loop().create_future()
            step.set_exception(exc)
            return step

    def _run(
        self, chat: Hashable, lane: Lane[T], item: T, at_once: bool = False, step: Any = _CALL
    ) -> None:
        """Put ``item`` in flight (a slot is already held for it): a work that answers with
        a Future is followed by a callback; a coroutine runs on its own task; None (done)
        ends it now when ``at_once`` (an idle chat's item, put), else on the next pass.
        ``step``: the work's answer when put() already asked it (else :data:`_CALL`)."""
        lane.running += 1
        run = next(self._run_ids)
        if step is _CALL:
            step = self._call(chat, item)
        if step is None:  # done at once (a reply the engine gave without awaiting)
            if at_once:
                self._went_on(chat, lane, item, run, None, None)
            else:  # a run's end started it: its own end on a later pass (a chain recursing)
                later = asyncio.get_running_loop().call_soon(
                    self._went_on, chat, lane, item, run, None, None
                )
                self._runs[run] = later  # type: ignore[assignment]
                self._tasked[run] = (chat, lane, item, None)  # close() ends it if cancelled
            return
        if type(step) is Step:
            self._runs[run] = step  # type: ignore[assignment]
            step.bind(self, chat, lane, item, run)
            return
        if isinstance(step, asyncio.Future):
            self._runs[run] = step
            step.add_done_callback(lambda done: self._stepped(chat, lane, item, run, done))
            return
        self._task(chat, lane, item, run, self._execute(chat, lane, item, run, step), step)

    def _ended(
        self,
        chat: Hashable,
        lane: Lane[T],
        item: T,
        run: int,
        ended: bool,
        stopped: bool = False,
    ) -> None:
        """An item left flight: done (``ended``) or cancelled; its chat goes on or retires."""
        self._runs.pop(run, None)
        self._tasked.pop(run, None)
        if not ended:  # cancelled before its end
            drop = self._on_stop if stopped and self._on_stop is not None else self._on_drop
            if drop is not None:
                drop(item)
        lane.running -= 1
        if lane.wake is not None:
            lane.wake.set()
        if lane.task is None:
            if lane.items:
                if self.accepting:
                    self._start_ready(chat, lane)
                    if lane.items:
                        lane.task = asyncio.create_task(self._drain(chat, lane))
            elif not lane.running and not lane.dropped:  # _retire's usual case, inline
                lanes = self._lanes
                if lanes.get(chat) is lane:
                    del lanes[chat]
                if not lanes:
                    self._idle.set()
                return
            self._retire(chat, lane)

    # -- bookkeeping -------------------------------------------------------------------------------

    def _took(self) -> None:
        self._waiting -= 1
        if self._waiting < self.total:
            self._room.set()

    def _pace(self, chat: Hashable, ready_at: float) -> None:
        ready = self._ready_at
        if chat not in ready and len(ready) >= MAX_READY_ENTRIES:
            now = time.monotonic()
            for key in [k for k, t in ready.items() if t <= now]:
                del ready[key]
        ready[chat] = ready_at

    def _retire(self, chat: Hashable, lane: Lane[T]) -> None:
        """Forget a chat that has nothing waiting or in flight (logging drops not yet logged)."""
        if lane.items or lane.running or lane.task is not None:
            return
        if lane.dropped:
            lane.log_drops(self._log, self, chat)
        if self._lanes.get(chat) is lane:
            del self._lanes[chat]
        if not self._lanes:
            self._idle.set()

    def _drop_oldest(self, chat: Hashable, lane: Lane[T]) -> None:
        item = lane.items.popleft()
        self._took()
        metrics.chat_dropped(self.adapter, self.what)
        lane.dropped += 1
        if time.monotonic() - lane.logged_at >= LOG_EVERY:
            lane.log_drops(self._log, self, chat)
        if self._on_drop is not None:
            self._on_drop(item)
