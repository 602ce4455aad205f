"""Claims asked in one pass of the event loop, sent to the store together.

Under load a OneBot daemon de-duplicates dozens of messages per pass of its
event loop, each with :meth:`~tmy.store.base.Store.claim`. Sent one by one, each
is a write transaction of its own on SQLite (a WAL commit) and a round-trip on
Redis; gathered, they are one transaction / one pipeline, and a lone claim
waits for nothing but the next pass of the loop. What each claim answers is the
same either way: the store decides every key on its own, in the order asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

Batch = Sequence[tuple[str, float]]
Send = Callable[[Batch], Awaitable[list[bool]]]
SendNow = Callable[[Batch], list[bool] | None]


class ClaimBatcher:
    """Gathers ``(key, ttl)`` claims until the loop's next pass, then ``send``s them at once.

    ``send`` gets the batch in the order the claims were asked and returns one
    answer per claim; if it raises, every claim of the batch raises the same error.
    ``send_now`` (SQLite, whose calls run on the loop) answers without awaiting,
    or None when it cannot now (the file is locked): then ``send`` is awaited.
    It spares a lone claim a task of its own.
    """

    def __init__(self, send: Send, send_now: SendNow | None = None) -> None:
        self._send = send
        self._send_now = send_now
        self._waiting: list[tuple[str, float, asyncio.Future[bool]]] = []
        self._tasks: set[asyncio.Task[None]] = set()  # senders in flight (kept referenced)

    async def claim(self, key: str, ttl: float) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._waiting.append((key, ttl, future))
        if len(self._waiting) == 1:  # the first of this pass: send them all on the next one
            loop.call_soon(self._flush_soon)
        return await future

    def _flush_soon(self) -> None:
        batch, self._waiting = self._waiting, []
        if self._send_now is not None:
            try:
                answers = self._send_now([(key, ttl) for key, ttl, _ in batch])
            except Exception as exc:
                answers = [exc] * len(batch)  # type: ignore[list-item]
            if answers is not None:
                _answer(batch, answers)
                return
        task = asyncio.get_running_loop().create_task(self._flush(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, batch: list[tuple[str, float, asyncio.Future[bool]]]) -> None:
        try:
            answers = await self._send([(key, ttl) for key, ttl, _ in batch])
        except Exception as exc:
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (the loop is closing): so are the claims
            for *_, future in batch:
                future.cancel()
            raise
        _answer(batch, answers)


def _answer(batch: list[tuple[str, float, asyncio.Future[bool]]], answers: list) -> None:
    for (*_, future), answer in zip(batch, answers, strict=True):
        if future.done():  # its caller may have been cancelled meanwhile
            continue
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)
