"""Recall use counts: added up in memory and written about once a second, not by every recall.

An entry's ``uses`` and ``used`` (and so its eviction order: least used goes
first) change each time a ``memory:`` step recalls it. Written at once, that is
two store writes in every recall — more than the recall's own reads. So a
recall only notes the entries it used (:meth:`Uses.note`); the memory
extension's lifespan writes what was noted every :data:`FLUSH_EVERY` seconds and
when the app stops (a clean stop loses nothing; a crash loses at most the last
second's counts). REMEMBER and FORGET write an owner's noted uses first, so the
cap's eviction order and a forgotten entry's state never lag this daemon's own
recalls; another daemon's are at most a second behind.

Each entry's count is one atomic ``update`` of its key (the daemons' counts add
up); its eviction order is then written from the entry as it now is.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tmy.errors import TmyError
from tmy.logs import get_logger
from tmy.memory import layout
from tmy.memory.legacy import is_entry
from tmy.store.base import Store

log = get_logger("tmy.memory")

FLUSH_EVERY = 1.0  # seconds between writes of the noted uses


class Uses:
    """The uses noted since the last write: owner key → entry id → (count, last use)."""

    def __init__(self) -> None:
        self._pending: dict[str, dict[str, tuple[int, float]]] = {}

    def note(self, owner: str, ids: set[str], now: float) -> None:
        """Count one use of each of ``ids`` (entries of ``owner``) at ``now``."""
        mine = self._pending.setdefault(owner, {})
        for entry_id in ids:
            count, _ = mine.get(entry_id, (0, 0.0))
            mine[entry_id] = (count + 1, now)

    def pending(self, owner: str | None = None) -> int:
        """How many entries have uses not written yet (of ``owner``, or in all)."""
        if owner is not None:
            return len(self._pending.get(owner, {}))
        return sum(len(ids) for ids in self._pending.values())

    async def flush(self, store: Store, owner: str | None = None) -> None:
        """Write the noted uses (of ``owner`` only, when given) now."""
        owners = [owner] if owner is not None else list(self._pending)
        for key in owners:
            counts = self._pending.pop(key, None)
            if counts:
                await _write(store, key, counts)

    async def run(self, store: Store) -> None:
        """Write the noted uses every :data:`FLUSH_EVERY` seconds, until cancelled."""
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            try:
                await self.flush(store)
            except TmyError as exc:  # a lost count must not stop the next ones
                log.warning("memory.uses_not_written", error=str(exc))

    @contextlib.asynccontextmanager
    async def writing(self, store: Store) -> Any:
        """While open, write the noted uses every second; at the end, write the rest."""
        task = asyncio.get_running_loop().create_task(self.run(store))
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            try:
                await self.flush(store)
            except TmyError as exc:
                log.warning("memory.uses_not_written", error=str(exc))


async def _write(store: Store, owner: str, counts: dict[str, tuple[int, float]]) -> None:
    def bump(current: Any, add: int, when: float) -> tuple[Any, dict[str, Any] | None]:
        if not is_entry(current):
            return current, None
        current["uses"] = int(current.get("uses") or 0) + add
        current["used"] = max(float(current.get("used") or 0), when)
        return current, current

    ids = sorted(counts)
    bumped = await asyncio.gather(
        *(store.update(layout.doc_key(owner, i), lambda c, n=counts[i]: bump(c, *n)) for i in ids)
    )
    orders = {e["id"]: layout.evict_order(e) for e in bumped if e is not None}
    await store.index_order(owner, orders)
