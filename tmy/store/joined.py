"""Concurrent reads joined into one ``get_many`` per event-loop turn.

Reads that many runs make at once — every LLM step's conversation history, the
chat switch of every chat not seen for a while — were a store call each: a
SQLite statement, or on Redis a round-trip whose client-side cost (packing,
parsing, the store's lanes) was about a fifth of an LLM call's CPU when 1,000
conversations start in the same second. :class:`ReadBatch` collects the keys
every caller asks for during one turn of the event loop and reads them with one
``get_many`` (the store splits it as it needs), then hands each caller its own
values. A caller alone still makes one read; the values are what the store held
when the batch was read.

The first caller of a turn leads: it yields once (the other callers of the turn
join its batch), reads, and hands the others their values — no task and no
future of its own (a read alone cost ~26 µs more through a task and a future,
a third of a sequential conversation's history read). A leader cancelled
before its read is done passes the batch to a task, so the callers that joined
it are still answered. A failed read fails every caller of its batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tmy.store.base import Store


class _Batch:
    __slots__ = ("keys", "waiters")

    def __init__(self) -> None:
        self.keys: dict[str, None] = {}  # ordered, without repeats
        self.waiters: list[asyncio.Future[dict[str, Any]]] = []


class ReadBatch:
    """One pending batch per store, read by its first caller once the loop turn has run."""

    def __init__(self) -> None:
        self._pending: dict[int, _Batch] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # kept referenced until done

    async def get_many(self, store: Store, keys: Sequence[str]) -> list[Any]:
        """The values of ``keys`` (``MISSING`` for absent ones), read with other callers'."""
        batch = self._pending.get(id(store))
        if batch is not None:  # a leader reads this turn's batch: join it
            batch.keys.update(dict.fromkeys(keys))
            waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            batch.waiters.append(waiter)
            found = await waiter
            return [found[k] for k in keys]
        batch = self._pending[id(store)] = _Batch()
        batch.keys.update(dict.fromkeys(keys))
        try:
            await asyncio.sleep(0)  # the other steps of this turn join the batch
        except BaseException:
            self._pending.pop(id(store), None)
            self._hand_over(store, batch)
            raise
        del self._pending[id(store)]
        wanted = list(batch.keys)
        try:
            values = await store.get_many(wanted)
        except Exception as exc:
            _fail(batch, exc)
            raise
        except BaseException:  # this step was cancelled mid-read: the others read again
            self._hand_over(store, batch)
            raise
        found = dict(zip(wanted, values, strict=True))
        _answer(batch, found)
        return [found[k] for k in keys]

    def _hand_over(self, store: Store, batch: _Batch) -> None:
        """A task reads ``batch`` for the steps that joined it (its leader is gone)."""
        if not batch.waiters:
            return
        task = asyncio.ensure_future(self._read(store, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _read(store: Store, batch: _Batch) -> None:
        keys = list(batch.keys)
        try:
            values = await store.get_many(keys)
        except Exception as exc:
            _fail(batch, exc)
            return
        except BaseException:  # cancelled (the loop is closing): so are the steps waiting
            for waiter in batch.waiters:
                waiter.cancel()
            raise
        _answer(batch, dict(zip(keys, values, strict=True)))


def _fail(batch: _Batch, exc: Exception) -> None:
    for waiter in batch.waiters:
        if not waiter.done():
            waiter.set_exception(exc)


def _answer(batch: _Batch, found: dict[str, Any]) -> None:
    for waiter in batch.waiters:
        if not waiter.done():  # a cancelled step no longer waits
            waiter.set_result(found)
