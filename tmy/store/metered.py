"""A store wrapper that times every operation into the Prometheus metrics.

``metered(store)`` wraps any :class:`~tmy.store.base.Store`: each call of
``open``, ``close``, ``ping``, ``get``, ``get_many``, ``set``, ``delete``,
``update``, ``claim``, ``keys``, ``snapshot``, ``restore`` and the board operations
(``rank_sync``, ``rank_top``, ``rank_of``, ``rank_entry``, ``rank_above``) and the
lexical index (``index_put``, ``index_remove``, ``index_order``, ``index_drop``: writes;
``index_stats``, ``index_search``, ``index_lowest``) is
observed in ``tmy_store_op_seconds{op=…}``; one that
raises :class:`~tmy.errors.StoreError` also counts in
``tmy_store_errors_total{op=…}`` and is re-raised unchanged. ``lock(…)``
times the acquire as op ``lock`` (not the time the lease is held); ``commit``
is op ``commit``. Anything else (``url``, backend-specific attributes) passes
through to the wrapped store.

It also remembers the last write (``set``, ``delete``, ``update``, ``claim``, ``commit``,
``restore``, ``rank_sync``)
that failed in the store — "database or disk is full", Redis OOM or
unreachable — until a later write succeeds, and ``ping`` then fails with
``StoreError("last write failed: …")``: a store that answers reads but refuses
every write is not healthy, and ``/healthz`` reports it. Refusals that say
nothing about the store's health — a value no store can hold
(:class:`~tmy.errors.ValueRefused`), a lost lease
(:class:`~tmy.errors.LeaseLost`) — are not remembered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from time import perf_counter
from types import TracebackType
from typing import Any, TypeVar

from tmy import metrics
from tmy.errors import LeaseLost, StoreError, ValueRefused
from tmy.store.base import Snapshot, Store
from tmy.store.leases import Lease
from tmy.store.textindex import POSTINGS_BUDGET, IndexDoc, IndexHits, IndexStats

R = TypeVar("R")

# one histogram child / error counter per op, resolved once (a call pays no label lookup)
_OPS = (
    "open",
    "close",
    "ping",
    "get",
    "get_many",
    "set",
    "delete",
    "update",
    "claim",
    "commit",
    "keys",
    "lock",
    "snapshot",
    "restore",
    "rank_sync",
    "rank_top",
    "rank_of",
    "rank_entry",
    "rank_above",
    "index_put",
    "index_remove",
    "index_order",
    "index_drop",
    "index_stats",
    "index_search",
    "index_lowest",
)


class MeteredStore:
    """``store`` with every operation timed (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.inner = store
        self._seconds = {op: metrics.STORE_OP_SECONDS.labels(op) for op in _OPS}
        self._errors = {op: metrics.STORE_ERRORS.labels(op) for op in _OPS}
        self.last_write_error: str | None = None  # see the module docstring

    def _write_failed(self, exc: StoreError) -> None:
        if not isinstance(exc, ValueRefused | LeaseLost):
            self.last_write_error = str(exc)

    def _write_ok(self) -> None:
        self.last_write_error = None

    def __repr__(self) -> str:
        return f"MeteredStore({self.inner!r})"

    @property
    def url(self) -> str:
        """The wrapped store's URL."""
        return self.inner.url

    @property
    def max_value_bytes(self) -> int:
        """The wrapped store's value limit."""
        return self.inner.max_value_bytes

    @property
    def one_slot_commits(self) -> bool:
        """Whether the wrapped store commits one hash slot at a time."""
        return self.inner.one_slot_commits

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes this wrapper lacks; ``inner`` itself is always set
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def open(self) -> None:
        started = perf_counter()
        try:
            await self.inner.open()
        except StoreError:
            self._errors["open"].inc()
            raise
        finally:
            self._seconds["open"].observe(perf_counter() - started)

    async def close(self) -> None:
        started = perf_counter()
        try:
            await self.inner.close()
        except StoreError:
            self._errors["close"].inc()
            raise
        finally:
            self._seconds["close"].observe(perf_counter() - started)

    async def ping(self) -> None:
        started = perf_counter()
        try:
            await self.inner.ping()
            if self.last_write_error is not None:
                raise StoreError(f"last write failed: {self.last_write_error}")
        except StoreError:
            self._errors["ping"].inc()
            raise
        finally:
            self._seconds["ping"].observe(perf_counter() - started)

    async def get(self, key: str) -> Any:
        started = perf_counter()
        try:
            return await self.inner.get(key)
        except StoreError:
            self._errors["get"].inc()
            raise
        finally:
            self._seconds["get"].observe(perf_counter() - started)

    async def get_many(self, keys: Sequence[str]) -> list[Any]:
        started = perf_counter()
        try:
            return await self.inner.get_many(keys)
        except StoreError:
            self._errors["get_many"].inc()
            raise
        finally:
            self._seconds["get_many"].observe(perf_counter() - started)

    async def set(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        started = perf_counter()
        try:
            await self.inner.set(key, value, ttl=ttl)
            self._write_ok()
        except StoreError as exc:
            self._errors["set"].inc()
            self._write_failed(exc)
            raise
        finally:
            self._seconds["set"].observe(perf_counter() - started)

    async def delete(self, key: str) -> bool:
        started = perf_counter()
        try:
            result = await self.inner.delete(key)
            self._write_ok()
            return result
        except StoreError as exc:
            self._errors["delete"].inc()
            self._write_failed(exc)
            raise
        finally:
            self._seconds["delete"].observe(perf_counter() - started)

    async def update(
        self,
        key: str,
        fn: Callable[[Any], tuple[Any, R]],
        *,
        ttl: float | None = None,
    ) -> R:
        started = perf_counter()
        try:
            result = await self.inner.update(key, fn, ttl=ttl)
            self._write_ok()
            return result
        except StoreError as exc:
            self._errors["update"].inc()
            self._write_failed(exc)
            raise
        finally:
            self._seconds["update"].observe(perf_counter() - started)

    async def claim(self, key: str, ttl: float) -> bool:
        return await self._timed("claim", self.inner.claim(key, ttl), write=True)

    async def claim_many(self, keys: Sequence[str], ttl: float) -> list[bool]:
        """The wrapped store's ``claim_many`` (one claim at a time on a store without one),
        observed as op ``claim``."""
        many = getattr(self.inner, "claim_many", None)
        if many is not None:
            return await self._timed("claim", many(keys, ttl), write=True)
        return list(await asyncio.gather(*(self.claim(key, ttl) for key in keys)))

    async def commit(
        self, writes: Sequence[tuple[str, Any, float | None]], *, fence: Sequence[Lease] = ()
    ) -> None:
        started = perf_counter()
        try:
            await self.inner.commit(writes, fence=fence)
            self._write_ok()
        except StoreError as exc:
            self._errors["commit"].inc()
            self._write_failed(exc)
            raise
        finally:
            self._seconds["commit"].observe(perf_counter() - started)

    async def keys(self, prefix: str) -> list[str]:
        started = perf_counter()
        try:
            return await self.inner.keys(prefix)
        except StoreError:
            self._errors["keys"].inc()
            raise
        finally:
            self._seconds["keys"].observe(perf_counter() - started)

    async def _timed(self, op: str, call: Awaitable[R], *, write: bool = False) -> R:
        """``call`` observed as ``op`` (a write's failure remembered, see the module doc)."""
        started = perf_counter()
        try:
            result = await call
            if write:
                self._write_ok()
            return result
        except StoreError as exc:
            self._errors[op].inc()
            if write:
                self._write_failed(exc)
            raise
        finally:
            self._seconds[op].observe(perf_counter() - started)

    async def snapshot(self) -> Snapshot:
        return await self._timed("snapshot", self.inner.snapshot())

    async def restore(self, snapshot: Snapshot, *, replace: bool) -> int:
        return await self._timed(
            "restore", self.inner.restore(snapshot, replace=replace), write=True
        )

    async def rank_sync(
        self, board: str, member: str, key: str, name: str | None = None
    ) -> float | None:
        call = self.inner.rank_sync(board, member, key, name)
        return await self._timed("rank_sync", call, write=True)

    async def rank_top(self, board: str, n: int) -> list[tuple[str, float, str | None]]:
        return await self._timed("rank_top", self.inner.rank_top(board, n))

    async def rank_of(self, board: str, member: str) -> int | None:
        return await self._timed("rank_of", self.inner.rank_of(board, member))

    async def rank_entry(self, board: str, member: str) -> tuple[float, str | None] | None:
        return await self._timed("rank_entry", self.inner.rank_entry(board, member))

    async def rank_above(self, board: str, score: float) -> int:
        return await self._timed("rank_above", self.inner.rank_above(board, score))

    async def index_put(self, ns: str, docs: Sequence[IndexDoc]) -> None:
        await self._timed("index_put", self.inner.index_put(ns, docs), write=True)

    async def index_remove(self, ns: str, docs: Sequence[str]) -> int:
        return await self._timed("index_remove", self.inner.index_remove(ns, docs), write=True)

    async def index_order(self, ns: str, orders: Mapping[str, float]) -> None:
        await self._timed("index_order", self.inner.index_order(ns, orders), write=True)

    async def index_drop(self, ns: str) -> int:
        return await self._timed("index_drop", self.inner.index_drop(ns), write=True)

    async def index_stats(self, ns: str, terms: Sequence[str] = ()) -> IndexStats:
        return await self._timed("index_stats", self.inner.index_stats(ns, terms))

    async def index_search(
        self, ns: str, terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> IndexHits:
        return await self._timed("index_search", self.inner.index_search(ns, terms, budget=budget))

    async def index_search_many(
        self, namespaces: Sequence[str], terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> list[IndexHits]:
        call = self.inner.index_search_many(namespaces, terms, budget=budget)
        return await self._timed("index_search", call)

    async def index_lowest(
        self, ns: str, n: int, *, term: str | None = None
    ) -> list[tuple[str, float]]:
        return await self._timed("index_lowest", self.inner.index_lowest(ns, n, term=term))

    def lock(
        self, key: str, *, ttl: float | None = None, wait: float = 30.0
    ) -> AbstractAsyncContextManager[Lease]:
        try:
            inner = self.inner.lock(key, ttl=ttl, wait=wait)
        except StoreError:  # a bad key or ttl is refused before anything is awaited
            self._errors["lock"].inc()
            raise
        return _TimedLock(inner, self._seconds["lock"], self._errors["lock"])


class _TimedLock:
    """The wrapped store's lock context, its acquire (``__aenter__``) timed."""

    __slots__ = ("_errors", "_inner", "_seconds")

    def __init__(
        self, inner: AbstractAsyncContextManager[Lease], seconds: Any, errors: Any
    ) -> None:
        self._inner = inner
        self._seconds = seconds
        self._errors = errors

    async def __aenter__(self) -> Lease:
        started = perf_counter()
        try:
            return await self._inner.__aenter__()
        except StoreError:
            self._errors.inc()
            raise
        finally:
            self._seconds.observe(perf_counter() - started)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)


def metered(store: Store) -> Store:
    """``store`` wrapped in a :class:`MeteredStore` (a store already wrapped is returned as is)."""
    if isinstance(store, MeteredStore):
        return store
    return MeteredStore(store)  # type: ignore[return-value]
