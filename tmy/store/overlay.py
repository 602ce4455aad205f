"""A store that reads through to a real one and keeps every write to itself.

``OverlayStore(real)`` is what ``explain`` runs a message against: the run
sees the real variables, sessions and counters, but whatever it writes —
``set``, ``update``, ``delete``, list modes, usage counters, sessions — stays
in this object's memory and is gone when it is dropped. The real store is only
ever read (``get``, ``get_many``, ``keys``, ``ping``).

* Reads of a key the overlay wrote (or deleted) come from the overlay; every
  other key falls through to the real store.
* Values go through the same codec as the real backends, so a value either
  backend would refuse is refused here too, and each read hands out a fresh
  copy (as a real store does).
* ``update`` is atomic inside the overlay (a per-key ``asyncio`` lock around
  read, ``fn`` and write); it cannot be atomic with the real store, which it
  never writes.
* ``lock`` is a local ``asyncio`` lock: it neither waits for nor blocks the
  real store's leases, so an explanation never stalls a live run. Its
  :class:`~tmy.store.leases.Lease` never expires; ``commit`` applies its
  writes to the overlay together (a fence fails only for a lease marked lost).
* ``ttl`` is honoured for what the overlay holds; ``update`` without ``ttl``
  keeps the expiry the overlay knows (a key it takes from the real store is
  treated as not expiring: an overlay lives for one explanation).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

from tmy.errors import StoreError
from tmy.store.base import MISSING, Store
from tmy.store.codec import check_key, check_ttl, decode, encode
from tmy.store.leases import KeyedLocks, Lease, check_fence, new_token

R = TypeVar("R")

_DELETED = None  # marker for "deleted in the overlay" (a stored value is always bytes)


class OverlayStore:
    """``real`` for reading, memory for writing (see the module docstring)."""

    one_slot_commits = False  # its commits stay in memory

    def __init__(self, real: Store) -> None:
        self.real = real
        self.max_value_bytes = real.max_value_bytes  # refuse what the real store would
        # key -> (encoded value, or None when deleted here; absolute expiry or None)
        self._mine: dict[str, tuple[bytes | None, float | None]] = {}
        self._updates = KeyedLocks()
        self._leases = KeyedLocks()

    def __repr__(self) -> str:
        return f"OverlayStore({self.real!r}, {len(self._mine)} keys written)"

    @property
    def url(self) -> str:
        return self.real.url

    # -- what the overlay holds -----------------------------------------------------------------

    def written(self) -> dict[str, Any]:
        """What the run wrote: key -> value (``MISSING`` for a key it deleted); expired left out."""
        now = time.time()
        out: dict[str, Any] = {}
        for key, (raw, expires) in sorted(self._mine.items()):
            if expires is not None and expires <= now:
                continue
            out[key] = MISSING if raw is _DELETED else decode(raw, key)
        return out

    def _own(self, key: str) -> tuple[bool, Any]:
        """(True, value) when the overlay decides ``key``; (False, None) to ask the real store."""
        entry = self._mine.get(key)
        if entry is None:
            return False, None
        raw, expires = entry
        if raw is _DELETED or (expires is not None and expires <= time.time()):
            return True, MISSING
        return True, decode(raw, key)

    def _put(self, key: str, value: Any, expires: float | None) -> None:
        if value is MISSING:
            self._mine[key] = (_DELETED, None)
        else:
            self._mine[key] = (encode(value, key, self.max_value_bytes), expires)

    # -- the Store protocol ---------------------------------------------------------------------

    async def open(self) -> None:
        """Nothing to open: the real store is opened (and closed) by its owner."""

    async def close(self) -> None:
        """Forget what was written; the real store stays open."""
        self.discard()

    def discard(self) -> None:
        """Forget what was written, at once (no I/O: the real store is never written)."""
        self._mine.clear()

    async def ping(self) -> None:
        await self.real.ping()

    async def get(self, key: str) -> Any:
        check_key(key)
        mine, value = self._own(key)
        return value if mine else await self.real.get(key)

    async def get_many(self, keys: Sequence[str]) -> list[Any]:
        out: list[Any] = [MISSING] * len(keys)
        ask: list[int] = []
        for i, key in enumerate(keys):
            check_key(key)
            mine, value = self._own(key)
            if mine:
                out[i] = value
            else:
                ask.append(i)
        if ask:
            got = await self.real.get_many([keys[i] for i in ask])
            for i, value in zip(ask, got, strict=True):
                out[i] = value
        return out

    async def set(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        check_key(key)
        expires = None if ttl is None else time.time() + check_ttl(ttl)
        self._put(key, value, expires)

    async def delete(self, key: str) -> bool:
        check_key(key)
        existed = await self.get(key) is not MISSING
        self._mine[key] = (_DELETED, None)
        return existed

    async def update(
        self,
        key: str,
        fn: Callable[[Any], tuple[Any, R]],
        *,
        ttl: float | None = None,
    ) -> R:
        check_key(key)
        if ttl is not None:
            check_ttl(ttl)
        await self._updates.acquire(key)
        try:
            current = await self.get(key)  # a fresh copy: fn may change it
            new, result = fn(current)
            if ttl is not None:
                expires = time.time() + ttl
            else:
                entry = self._mine.get(key)
                expires = entry[1] if entry is not None and entry[0] is not _DELETED else None
            self._put(key, new, expires)
            return result
        finally:
            self._updates.release(key)

    async def commit(
        self, writes: Sequence[tuple[str, Any, float | None]], *, fence: Sequence[Lease] = ()
    ) -> None:
        """Apply ``writes`` to the overlay together (each value checked first)."""
        check_fence(fence)
        staged = []
        now = time.time()
        for key, value, ttl in writes:
            check_key(key)
            expires = None if ttl is None else now + check_ttl(ttl)
            raw = MISSING if value is MISSING else encode(value, key, self.max_value_bytes)
            staged.append((key, raw, expires))
        for key, raw, expires in staged:
            self._mine[key] = (_DELETED, None) if raw is MISSING else (raw, expires)

    def lock(
        self, key: str, *, ttl: float | None = None, wait: float = 30.0
    ) -> AbstractAsyncContextManager[Lease]:
        check_key(key)
        if ttl is not None:
            check_ttl(ttl)
        return self._lease(key, ttl or 5.0, wait)

    @asynccontextmanager
    async def _lease(self, key: str, ttl: float, wait: float) -> AsyncIterator[Lease]:
        try:
            await self._leases.acquire(key, timeout=wait)
        except TimeoutError:
            raise StoreError(f"lock {key!r} still held after waiting {wait:g} s") from None
        try:
            yield Lease(key, new_token(), ttl)  # local only: never expires
        finally:
            self._leases.release(key)

    async def keys(self, prefix: str) -> list[str]:
        found = set(await self.real.keys(prefix))
        now = time.time()
        for key, (raw, expires) in self._mine.items():
            if not key.startswith(prefix):
                continue
            if raw is _DELETED or (expires is not None and expires <= now):
                found.discard(key)
            else:
                found.add(key)
        return sorted(found)
