"""Leases: the exclusive, cross-process ``Store.lock`` both backends provide.

Inside one process, waiters for a key queue on an ``asyncio.Lock`` (no polling,
first come first served); across processes a lease row or key is taken with a
token, polled for with short, growing sleeps while someone else holds it, and
given back only by its holder. Each backend supplies how to take and give back
its own lease; the waiting, the deadline and the shielded release live here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from tmy.errors import StoreError

log = logging.getLogger("tmy.store")


class KeyedLocks:
    """One ``asyncio.Lock`` per key, created on demand and dropped when idle.

    Both backends serialise same-key work inside a process with these (so local
    contention queues instead of fighting in the database); dropping idle locks
    keeps the map as small as the number of keys in use right now.
    """

    def __init__(self) -> None:
        self._locks: dict[str, list[Any]] = {}  # key -> [Lock, users]

    def __len__(self) -> int:
        return len(self._locks)

    async def acquire(self, key: str, timeout: float | None = None) -> None:
        """Take the lock of ``key``; TimeoutError after ``timeout`` seconds of waiting."""
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            if timeout is None:
                await entry[0].acquire()
            else:
                async with asyncio.timeout(max(timeout, 0.0)):
                    await entry[0].acquire()
        except BaseException:
            self._forget(key, entry)
            raise

    def release(self, key: str) -> None:
        """Give back the lock of ``key`` taken with :meth:`acquire`."""
        entry = self._locks[key]
        entry[0].release()
        self._forget(key, entry)

    def _forget(self, key: str, entry: list[Any]) -> None:
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[key]


@asynccontextmanager
async def hold_lease(
    local: KeyedLocks,
    key: str,
    *,
    where: str,
    ttl: float,
    wait: float,
    take: Callable[[], Awaitable[float | None]],
    give: Callable[[], Awaitable[None]],
) -> AsyncIterator[None]:
    """Hold the lease ``key`` for the body of an ``async with``.

    ``take()`` tries once: None when the lease is now ours, else the longest
    sensible pause (in seconds) before trying again. ``give()`` releases it; it
    runs shielded, so a cancelled holder still gives the lease back.
    """
    deadline = time.monotonic() + wait
    try:
        await local.acquire(key, timeout=wait)
    except TimeoutError:
        raise _timeout(where, key, wait) from None
    try:
        delay = 0.0005
        while (pause := await take()) is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timeout(where, key, wait)
            await asyncio.sleep(min(delay, left, pause))
            delay = min(delay * 2, 0.01)
        try:
            yield
        finally:
            try:
                await asyncio.shield(give())
            except StoreError as exc:
                log.warning("lease %r not released (%s); it expires in %ss", key, exc, ttl)
    finally:
        local.release(key)


def _timeout(where: str, key: str, wait: float) -> StoreError:
    return StoreError(f"{where}: lock {key!r} still held by someone else after {wait:g}s")
