"""The Store protocol: what the engine needs from persistence.

A store is a key → JSON value map with three extra powers the engine relies on:

* ``update`` — an atomic read-modify-write of one key. List modes (SHIFT, POPUP,
  LOOPBACK, LOOPFRONT) and nested ``save`` positions on persistent variables go
  through it, so concurrent runs never lose an update.
* ``lock`` — an exclusive lease on a key shared by every process on the same
  store, for a read → (await executor) → write sequence that cannot be one
  ``update`` call (a step that reads the variable it saves to).
* ``ttl`` on ``set`` — sessions and other short-lived keys expire on their own.
* ``commit`` — several writes applied all together or not at all (one
  transaction / one script), fenced by leases: refused (``LeaseLost``, nothing
  written) when a fencing lease is no longer held by its holder. An atomic
  span's buffered writes and a locked step's write go through it, so a crash
  leaves all or none of them and a paused holder cannot write after its lease
  expired.

Every write is applied at most once, however the transport retries it: a
client library that resends a command whose reply was lost (Redis stalled
past the socket timeout, a connection cut after the command ran) must not
change the data a second time. So a call that returns normally was applied
exactly once; a call that raises :class:`~tmy.errors.StoreError` was applied
once or not at all (its outcome is unknown, never doubled).

Keys are logical, slash-separated strings built by the engine
(``var/global/jokes``, ``var/user/console/alice/visits``, ``hist/…``); each
backend maps them to its own layout. Values are anything JSON can hold; a value
that JSON cannot hold is refused with :class:`~tmy.errors.StoreError` before
anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar, runtime_checkable

from tmy.store.leases import Lease

R = TypeVar("R")


class _Missing:
    """The value of a key that does not exist (distinct from a stored ``null``)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@runtime_checkable
class Store(Protocol):
    """Persistence for variables, histories, sessions, counters and locks."""

    url: str

    @property
    def max_value_bytes(self) -> int:
        """The largest value it stores, in bytes of JSON (``limits.max_value_bytes``): a
        larger one is refused with :class:`~tmy.errors.ValueRefused` before anything is written."""
        ...

    @property
    def one_slot_commits(self) -> bool:
        """True when one :meth:`commit` may touch only one hash slot (a Redis Cluster):
        a caller with keys in several slots commits them one slot at a time."""
        ...

    async def open(self) -> None:
        """Connect / create tables. Raises StoreError when unreachable."""

    async def close(self) -> None:
        """Release connections; idempotent."""

    async def ping(self) -> None:
        """Raise StoreError unless the store answers."""

    async def get(self, key: str) -> Any:
        """The value at ``key``, or ``MISSING`` when absent or expired."""

    async def get_many(self, keys: Sequence[str]) -> list[Any]:
        """Values for several keys in one round-trip; ``MISSING`` for absent ones."""

    async def set(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        """Replace the value at ``key`` (expiring after ``ttl`` seconds if given).

        Without ``ttl`` the value never expires, whatever expiry the key had
        before. ``ttl`` must be positive. Storing ``MISSING`` deletes the key.
        """

    async def delete(self, key: str) -> bool:
        """Remove ``key``; True when something was removed."""

    async def update(
        self,
        key: str,
        fn: Callable[[Any], tuple[Any, R]],
        *,
        ttl: float | None = None,
    ) -> R:
        """Atomically apply ``fn`` to the value at ``key``.

        ``fn(current)`` gets the current value (``MISSING`` when absent) and
        returns ``(new_value, result)``; ``new_value`` is stored (``MISSING``
        deletes the key) and ``result`` is returned. ``fn`` may run more than
        once (optimistic retry) so it must not have side effects; if it raises,
        nothing is written and the exception propagates unchanged. ``fn`` gets a
        freshly decoded value each time, so it may mutate and return it.

        With ``ttl`` the key expires ``ttl`` seconds after this write; without
        it the key keeps the expiry it had (a counter inside a session does not
        extend or cancel the session's lifetime).
        """

    async def commit(
        self, writes: Sequence[tuple[str, Any, float | None]], *, fence: Sequence[Lease] = ()
    ) -> None:
        """Apply every write of ``writes`` atomically, fenced by ``fence``'s leases.

        ``writes`` are ``(key, value, ttl)`` triples (``value`` ``MISSING``
        deletes the key; ``ttl`` None: no expiry). In one transaction/script the
        store checks that each lease of ``fence`` is still held by its token and
        unexpired, then applies all the writes; if any is not, it writes nothing
        and raises :class:`~tmy.errors.LeaseLost` naming the lease's key (a
        lease already :attr:`~tmy.store.leases.Lease.lost` locally is refused
        before anything is sent). Values are checked (codec, size) before
        anything is written. Applied at most once, like every write. On a Redis
        Cluster every key and lease must share one hash slot (else StoreError).
        """

    def lock(
        self, key: str, *, ttl: float | None = None, wait: float = 30.0
    ) -> AbstractAsyncContextManager[Lease]:
        """Hold an exclusive lease named ``key`` across all processes on this store.

        Yields the :class:`~tmy.store.leases.Lease` (key, token, ``lost``) to
        fence writes with (:meth:`commit`). Waits up to ``wait`` seconds to
        acquire (then StoreError). The lease lasts ``ttl`` seconds (default: the
        store's ``lease_ttl``, URL ``?lease_ttl=``, else
        :data:`~tmy.store.leases.LEASE_TTL`, 5)
        and is renewed every ``ttl / 3`` while the body runs, so a live holder
        keeps it however long it works, and a dead one (killed process) blocks
        others for at most ``ttl`` — less when the dead holder was a process on
        this machine, whose lease is cleared at once. A holder whose renewals
        fail for a whole ``ttl`` (store unreachable, event loop blocked) may
        lose the lease; its release then leaves the new holder's lease alone.
        Not re-entrant. Leases are a namespace of their own: ``lock(k)`` does
        not block ``update(k)``.
        """

    async def keys(self, prefix: str) -> list[str]:
        """Every live logical key starting with ``prefix``, sorted by code point.

        ``prefix`` is literal: glob characters in it match only themselves.
        """
