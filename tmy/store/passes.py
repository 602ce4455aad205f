"""Asks of the store gathered over one pass of the event loop, sent to it together.

Under load many coroutines ask the store the same kind of thing in one pass of
the loop: a OneBot daemon de-duplicates dozens of messages, a burst of LLM
answers appends to as many histories. Sent one by one, each is a write
transaction of its own on SQLite (a WAL commit: ~16 µs where a statement in a
shared one is ~3) and a round-trip on Redis; gathered, they are one transaction
or one pipeline, and a lone ask waits for nothing but the next pass of the loop.
What each ask answers is the same either way: the store takes them in the order
asked, each on its own.

An ask whose caller was cancelled before its pass is not sent (nothing of it
reaches the store); once sent, it may land even if its caller goes away, as
any write already on its way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

Q = TypeVar("Q")  # what one caller asks
A = TypeVar("A")  # what it is answered


class Failed:
    """One ask's own failure in a batch's answers: its caller gets ``exc`` raised, the
    batch's other asks their answers (an answer may itself be an exception object)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


Send = Callable[[Sequence[Any]], Awaitable[list[Any]]]
SendNow = Callable[[Sequence[Any]], "list[Any] | None"]


class PassBatcher(Generic[Q, A]):
    """Gathers asks until the loop's next pass, then ``send``s them at once.

    ``send`` gets the batch in the order asked and returns one answer per ask (a
    :class:`Failed` for an ask that failed on its own); if it raises, every ask of
    the batch raises the same error. ``send_now`` (SQLite, whose calls run on the
    loop) answers without awaiting, or None when it cannot now (the file is
    locked): then ``send`` is awaited. It spares a lone ask a task of its own.
    """

    def __init__(self, send: Send, send_now: SendNow | None = None) -> None:
        self._send = send
        self._send_now = send_now
        self._waiting: list[tuple[Q, asyncio.Future[A]]] = []
        self._tasks: set[asyncio.Task[None]] = set()  # senders in flight (kept referenced)

    async def ask(self, query: Q) -> A:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[A] = loop.create_future()
        self._waiting.append((query, future))
        if len(self._waiting) == 1:  # the first of this pass: send them all on the next one
            loop.call_soon(self._flush_soon)
        return await future

    def _flush_soon(self) -> None:
        waiting, self._waiting = self._waiting, []
        batch = [(q, f) for q, f in waiting if not f.done()]  # cancelled callers: not sent
        if not batch:
            return
        if self._send_now is not None:
            try:
                answers = self._send_now([q for q, _ in batch])
            except Exception as exc:
                answers = [Failed(exc)] * len(batch)
            except BaseException as exc:  # KeyboardInterrupt, SystemExit: every ask hears it
                _answer(batch, [Failed(exc)] * len(batch))
                raise
            if answers is not None:
                _answer(batch, answers)
                return
        task = asyncio.get_running_loop().create_task(self._flush(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, batch: list[tuple[Q, asyncio.Future[A]]]) -> None:
        try:
            answers = await self._send([q for q, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (the loop is closing): so are the asks
            for _, future in batch:
                future.cancel()
            raise
        _answer(batch, answers)


def _answer(batch: list[tuple[Any, asyncio.Future[Any]]], answers: list[Any]) -> None:
    for (_, future), answer in zip(batch, answers, strict=True):
        if future.done():  # its caller may have been cancelled meanwhile
            continue
        if type(answer) is Failed:
            exc = answer.exc
            if isinstance(exc, StopIteration):  # a Future refuses it: what a coroutine makes of it
                exc = RuntimeError(f"a store call's function raised StopIteration: {exc!r}")
                exc.__cause__ = answer.exc
            future.set_exception(exc)
        else:
            future.set_result(answer)
