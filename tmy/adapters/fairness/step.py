"""A work's step that ends by a callback: what a send waiting for its answer returns.

A :class:`~tmy.adapters.fairness.queues.ChatQueues` work may answer with a
coroutine (run on a task of its own), an ``asyncio.Future``, or a :class:`Step`.
A Future's callbacks run on a later pass of the event loop (a handle scheduled,
run, and the Future itself allocated: ~1.4 µs a send on the QQ path); a Step
calls the queue's continuation the moment its work calls :meth:`Step.done` or
:meth:`Step.failed` — the answer to a ``send_msg`` frees its slot and starts the
chat's next reply in the same pass that read it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class Stopped(Exception):
    """The queue closed while the step was in flight (``Step.cancel``)."""


STOPPED = Stopped()


class Step:
    """One step of a work, in flight until :meth:`done`, :meth:`failed` or :meth:`cancel`
    (whichever comes first counts; the others are ignored)."""

    __slots__ = ("again", "chat", "error", "finished", "item", "lane", "queue", "run")

    def __init__(self) -> None:
        # only what is read before bind() or an end sets the rest (one Step per reply)
        self.finished = False
        self.queue: Any = None  # the ChatQueues waiting for it, once bound
        self.again: float | None = None

    def done(self, again: float | None) -> None:
        """The step ended: ``None`` when the item is done, else seconds until the work is
        called again with it (another piece of a reply)."""
        if self.finished:
            return
        self.finished = True
        self.again = again
        queue = self.queue
        if queue is not None:  # _end and the queue's _step_ended inline: once per reply
            queue._went_on(self.chat, self.lane, self.item, self.run, again, None)
        else:
            self.error = None  # bind() goes on with it

    def failed(self, error: Exception) -> None:
        """The work raised something it did not handle (a bug): logged by the queue."""
        self._end(None, error)

    def cancel(self) -> None:
        """The queue is closing: the item is stopped (its ``on_stop``)."""
        self._end(None, STOPPED)

    def bind(self, queue: Any, chat: Hashable, lane: Any, item: Any, run: int) -> None:
        """Where the step's end goes (called by the queue once the work returned it)."""
        self.queue, self.chat, self.lane, self.item, self.run = queue, chat, lane, item, run
        if self.finished:  # it ended before the work returned it (a send refused at once)
            queue._step_ended(self)

    def _end(self, again: float | None, error: BaseException | None) -> None:
        if self.finished:
            return
        self.finished = True
        self.again, self.error = again, error
        if self.queue is not None:
            self.queue._step_ended(self)
