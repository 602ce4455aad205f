"""Concurrent history reads joined into one ``get_many`` per event-loop turn.

Every LLM step with ``history:`` reads its conversation (the history and a
pending ``STEP_SUMMARY``) before it asks the model. When many conversations
start at once — 1,000 users writing in the same second — each read was a store
call of its own: a SQLite statement, or on Redis a round-trip whose client-side
cost (packing, parsing, the store's lanes) was about a fifth of a call's CPU.
:class:`ReadBatch` collects the keys every step asks for during one turn of the
event loop and reads them with one ``get_many`` (the store splits it as it
needs), then hands each step its own values. A step alone still makes one read;
the values are what the store held when the batch was read, as before.
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
    """One pending batch per store; it is read once the current loop turn has run."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[Store, _Batch]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # kept referenced until done

    async def get_many(self, store: Store, keys: Sequence[str]) -> list[Any]:
        """The values of ``keys`` (``MISSING`` for absent ones), read with other callers'."""
        slot = self._pending.get(id(store))
        if slot is None:
            slot = self._pending[id(store)] = (store, _Batch())
            asyncio.get_running_loop().call_soon(self._start, id(store))
        batch = slot[1]
        batch.keys.update(dict.fromkeys(keys))
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        batch.waiters.append(waiter)
        found = await waiter
        return [found[k] for k in keys]

    def _start(self, store_id: int) -> None:
        store, batch = self._pending.pop(store_id)
        task = asyncio.ensure_future(self._read(store, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _read(store: Store, batch: _Batch) -> None:
        keys = list(batch.keys)
        try:
            values = await store.get_many(keys)
        except Exception as exc:
            for waiter in batch.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        except BaseException:  # cancelled (the loop is closing): so are the steps waiting
            for waiter in batch.waiters:
                waiter.cancel()
            raise
        found = dict(zip(keys, values, strict=True))
        for waiter in batch.waiters:
            if not waiter.done():  # a cancelled step no longer waits
                waiter.set_result(found)
