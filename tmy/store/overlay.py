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
* Boards: ``rank_sync`` reads the value through the overlay and keeps the
  member's new entry (or its removal) here; ``rank_top``, ``rank_of``,
  ``rank_entry`` and ``rank_above`` layer these entries over the real store's
  board (a member's real entry, needed to rank it, is read when the overlay
  first touches it). :meth:`board_syncs` lists the syncs made, so a caller that
  commits the overlay's writes (a scheduled run) can sync the real boards after.
* The lexical index (``index_*``, :mod:`tmy.store.textindex`): reads go to the
  real store; writes are kept as a list (:meth:`index_writes`), applied nowhere —
  an explanation never changes the real index (its own REMEMBERs are not
  recalled by its later steps), and a caller that commits the overlay's writes
  replays them on the real store after its commit (:meth:`replay_index`).
* ``snapshot`` is the real store's with the overlay's writes laid over it;
  ``restore`` writes into the overlay (a dry run); with ``replace`` the real
  store's keys and boards are hidden from then on, as if deleted.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from tmy.errors import StoreError
from tmy.store.base import MISSING, Snapshot, Store, rank_score, score_out
from tmy.store.board_keys import board_value_key
from tmy.store.codec import check_board, check_key, check_ttl, decode, encode
from tmy.store.index_log import IndexLog
from tmy.store.leases import KeyedLocks, Lease, check_fence, new_token
from tmy.store.snapshot import checked_ranks, encoded_entries, sorted_snapshot

R = TypeVar("R")

_DELETED = None  # marker for "deleted in the overlay" (a stored value is always bytes)
_UNKNOWN: Any = object()  # a board member's real entry, not read yet


@dataclass(slots=True)
class _Entry:
    """A board member as the overlay has it: score (None: removed here), name, and its
    entry on the real board when the overlay first touched it (None: absent)."""

    score: float | None
    name: str | None
    real: Any  # tuple[float, str | None] | None | _UNKNOWN


class OverlayStore(IndexLog):
    """``real`` for reading, memory for writing (see the module docstring)."""

    one_slot_commits = False  # its commits stay in memory

    def __init__(self, real: Store) -> None:
        self.real = real
        self.max_value_bytes = real.max_value_bytes  # refuse what the real store would
        # key -> (encoded value, or None when deleted here; absolute expiry or None)
        self._mine: dict[str, tuple[bytes | None, float | None]] = {}
        self._updates = KeyedLocks()
        self._leases = KeyedLocks()
        self._boards: dict[str, dict[str, _Entry]] = {}
        self._syncs: list[tuple[str, str, str, str | None]] = []
        self._cleared = False  # a replacing restore hid the real store's keys and boards

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
        self._boards.clear()
        self._syncs.clear()
        self._cleared = False

    def board_syncs(self) -> list[tuple[str, str, str, str | None]]:
        """The ``rank_sync(board, member, key, name)`` calls made on the overlay, in order."""
        return list(self._syncs)

    async def ping(self) -> None:
        await self.real.ping()

    async def get(self, key: str) -> Any:
        check_key(key)
        mine, value = self._own(key)
        if mine or self._cleared:
            return value if mine else MISSING
        return await self.real.get(key)

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
        if ask and not self._cleared:
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

    async def claim(self, key: str, ttl: float) -> bool:
        """Straight to the real store: a claim decides now, for every process, so it is
        not held back with the run's buffered writes (a discarded run keeps its claims)."""
        return await self.real.claim(key, ttl)

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
        found = set() if self._cleared else set(await self.real.keys(prefix))
        now = time.time()
        for key, (raw, expires) in self._mine.items():
            if not key.startswith(prefix):
                continue
            if raw is _DELETED or (expires is not None and expires <= now):
                found.discard(key)
            else:
                found.add(key)
        return sorted(found)

    # -- snapshot and restore -------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """The real store's snapshot with the overlay's writes and board entries laid over it."""
        real = Snapshot() if self._cleared else await self.real.snapshot()
        entries = {key: (value, ttl) for key, value, ttl in real.entries}
        now = time.time()
        for key, (raw, expires) in self._mine.items():
            if raw is _DELETED or (expires is not None and expires <= now):
                entries.pop(key, None)
            else:
                entries[key] = (decode(raw, key), None if expires is None else expires - now)
        ranks = {(b, m): (score, name) for b, m, score, name in real.ranks}
        for board, members in self._boards.items():
            for member, entry in members.items():
                if entry.score is None:
                    ranks.pop((board, member), None)
                else:
                    ranks[board, member] = (entry.score, entry.name)
        return sorted_snapshot(
            [(k, v, ttl) for k, (v, ttl) in entries.items()],
            [(b, m, score, name) for (b, m), (score, name) in ranks.items()],
            point_in_time=real.point_in_time,
        )

    async def restore(self, snapshot: Snapshot, *, replace: bool) -> int:
        """Write ``snapshot`` into the overlay only (checked as a real store would)."""
        rows = encoded_entries(snapshot, self.max_value_bytes)
        ranks = checked_ranks(snapshot)
        if replace:
            self._mine.clear()
            self._boards.clear()
            self._cleared = True
        now = time.time()
        for key, raw, ttl in rows:
            self._mine[key] = (raw, None if ttl is None else now + ttl)
        for board, member, score, name in ranks:
            members = self._boards.setdefault(board, {})
            old = members.get(member)
            real = old.real if old is not None else None if self._cleared else _UNKNOWN
            members[member] = _Entry(score, name, real)
        for board, member, _, _ in ranks:  # each entry as its (restored) value has it
            key = board_value_key(board, member)
            if key is not None:
                await self.rank_sync(board, member, key)
        return len(rows)

    # -- boards ---------------------------------------------------------------------------------

    async def _real_entry(self, board: str, member: str) -> tuple[float, str | None] | None:
        return None if self._cleared else await self.real.rank_entry(board, member)

    async def _touched(self, board: str) -> dict[str, _Entry]:
        """The board's members the overlay touched, each one's real entry read."""
        members = self._boards.get(board, {})
        for member, entry in members.items():
            if entry.real is _UNKNOWN:
                entry.real = await self._real_entry(board, member)
        return members

    async def rank_sync(
        self, board: str, member: str, key: str, name: str | None = None
    ) -> float | None:
        """Make the overlay's board agree with the value the overlay reads at ``key``."""
        check_board(board, member)
        check_key(key)
        score = rank_score(await self.get(key))
        self._syncs.append((board, member, key, name))
        members = self._boards.setdefault(board, {})
        old = members.get(member)
        if old is None:
            real = await self._real_entry(board, member)
            old = _Entry(*(real or (None, None)), real)
        if score is None:
            members[member] = _Entry(None, None, old.real)
            return None
        members[member] = _Entry(score, old.name if name is None else name, old.real)
        return score_out(score)

    async def rank_top(self, board: str, n: int) -> list[tuple[str, float, str | None]]:
        """The real board's top, with the overlay's entries laid over it."""
        check_board(board)
        if n <= 0:
            return []
        members = self._boards.get(board, {})
        real = [] if self._cleared else await self.real.rank_top(board, n + len(members))
        merged = [(m, float(score), name) for m, score, name in real if m not in members]
        merged += [(m, e.score, e.name) for m, e in members.items() if e.score is not None]
        merged.sort(key=lambda item: (item[1], item[0]), reverse=True)
        return [(m, score_out(score), name) for m, score, name in merged[:n]]

    async def rank_entry(self, board: str, member: str) -> tuple[float, str | None] | None:
        check_board(board, member)
        entry = self._boards.get(board, {}).get(member)
        if entry is None:
            return await self._real_entry(board, member)
        return None if entry.score is None else (score_out(entry.score), entry.name)

    async def rank_above(self, board: str, score: float) -> int:
        """The real board's count above ``score``, corrected by the members touched here."""
        check_board(board)
        above = 0 if self._cleared else await self.real.rank_above(board, score)
        for entry in (await self._touched(board)).values():
            if entry.real is not None and entry.real[0] > score:
                above -= 1
            if entry.score is not None and entry.score > score:
                above += 1
        return above

    async def rank_of(self, board: str, member: str) -> int | None:
        found = await self.rank_entry(board, member)
        return None if found is None else await self.rank_above(board, found[0]) + 1
