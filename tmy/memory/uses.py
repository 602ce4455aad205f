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
from collections.abc import Callable
from typing import Any

from tmy.errors import TmyError
from tmy.logs import get_logger
from tmy.memory import layout
from tmy.memory.legacy import is_entry
from tmy.store.base import Store
from tmy.store.periodic import flushing_every

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

    async def count(
        self, store: Store, app_store: Store, owner: str, ids: set[str], now: float
    ) -> None:
        """Count one use of each of ``ids``, recalled by a run on ``store``: noted, when that
        is the app's store (``app_store``); else written to ``store`` at once — an overlay
        (explain, ``ctx``, a dry run: its writes are dropped) or a scheduled run's buffer
        (committed with the run). Noted, they reached the real store from a dry run."""
        if store is app_store:
            self.note(owner, ids, now)
            return
        try:
            await _write(store, owner, {i: (1, now) for i in ids}, lambda lost: None)
        except TmyError as exc:  # a recall does not fail for its use counts
            log.warning("memory.uses_not_written", error=str(exc))

    def pending(self, owner: str | None = None) -> int:
        """How many entries have uses not written yet (of ``owner``, or in all)."""
        if owner is not None:
            return len(self._pending.get(owner, {}))
        return sum(len(ids) for ids in self._pending.values())

    async def flush(self, store: Store, owner: str | None = None) -> None:
        """Write the noted uses (of ``owner`` only, when given) now. The counts of entries
        whose write failed (or was cancelled) are noted again, for the next flush; the
        first failure is then raised."""
        owners = [owner] if owner is not None else list(self._pending)
        error: BaseException | None = None
        for key in owners:
            counts = self._pending.pop(key, None)
            if not counts:
                continue
            try:
                await _write(store, key, counts, lambda lost, k=key: self._put_back(k, lost))
            except TmyError as exc:
                error = error or exc
        if error is not None:
            raise error

    def _put_back(self, owner: str, counts: dict[str, tuple[int, float]]) -> None:
        """Note again ``counts`` that were not written (added to any noted meanwhile)."""
        mine = self._pending.setdefault(owner, {})
        for entry_id, (count, when) in counts.items():
            now_count, now_when = mine.get(entry_id, (0, 0.0))
            mine[entry_id] = (now_count + count, max(now_when, when))

    async def _flush_logged(self, store: Store) -> None:
        try:
            await self.flush(store)
        except TmyError as exc:  # the counts are kept for the next write
            log.warning("memory.uses_not_written", error=str(exc), pending=self.pending())

    @contextlib.asynccontextmanager
    async def writing(self, store: Store) -> Any:
        """While open, write the noted uses every second; at the end, write the rest
        (stopped between writes, never inside one: a write cancelled midway had taken its
        counts, and they were lost)."""
        async with flushing_every(FLUSH_EVERY, lambda: self._flush_logged(store)):
            yield self


async def _write(
    store: Store,
    owner: str,
    counts: dict[str, tuple[int, float]],
    put_back: Callable[[dict[str, tuple[int, float]]], None],
) -> None:
    """Add ``counts`` to the entries (one atomic update each), then write their order.
    ``put_back`` gets the counts of the updates that failed or did not finish (those that
    were written stay written: handing them back would count them twice)."""

    def bump(current: Any, add: int, when: float) -> tuple[Any, dict[str, Any] | None]:
        if not is_entry(current):
            return current, None
        current["uses"] = int(current.get("uses") or 0) + add
        current["used"] = max(float(current.get("used") or 0), when)
        return current, current

    ids = sorted(counts)
    tasks = [
        asyncio.ensure_future(
            store.update(layout.doc_key(owner, i), lambda c, n=counts[i]: bump(c, *n))
        )
        for i in ids
    ]
    try:
        await asyncio.wait(tasks)
    finally:
        failed = [
            i
            for i, t in zip(ids, tasks, strict=True)
            if not t.done() or t.cancelled() or t.exception()
        ]
        for t in tasks:
            t.cancel()
        if failed:
            put_back({i: counts[i] for i in failed})
    for t in tasks:
        if t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
    orders = {e["id"]: layout.evict_order(e) for e in (t.result() for t in tasks) if e is not None}
    await store.index_order(owner, orders)
