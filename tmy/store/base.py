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
once or not at all (its outcome is unknown, never doubled). Two writes are
idempotent instead of recorded: ``rank_sync`` (a resent copy re-reads the value
and sets the board to it again) and ``restore`` (a resent copy writes the
snapshot's same values again).

Keys are logical, slash-separated strings built by the engine
(``var/global/jokes``, ``var/user/console/alice/visits``, ``hist/…``); each
backend maps them to its own layout. Values are anything JSON can hold; a value
that JSON cannot hold is refused with :class:`~tmy.errors.StoreError` before
anything is written.

Besides the key/value map a store keeps **leaderboard boards** (``rank_sync``,
``rank_top``, ``rank_of``): per board id, members with a numeric score and an
optional display name, kept equal to the values of a ranked variable by calling
``rank_sync`` after every write of it (it re-reads the value, so syncs arriving
out of order still leave the board equal to the values). Highest first, ties
ordered by member descending (byte order), on every backend. SQLite reads the
value and sets the board in one transaction, Redis in one script; on a Redis
Cluster the value and the board live in different hash slots, so a sync reads,
writes the board, and reads again, repeating while the value changed (last
writer wins, checked: see :mod:`tmy.store.redis.cluster`).

``snapshot`` reads every live key (value and remaining TTL) and every board
entry; ``restore`` writes them into any store (merging, or replacing what is
there): the backup and the SQLite → Redis migration. A snapshot is one point
in time on SQLite (one read transaction) and on a single Redis (one script, up
to a size); a Redis Cluster's, or a Redis store's over that size, is read key by
key (``Snapshot.point_in_time`` False). ``restore`` sets each board entry from
the value it mirrors (:mod:`tmy.store.board_keys`), so the boards agree with
the restored values. Leases and each store's
internal bookkeeping (Redis write records and turns, the format marker) are
never part of a snapshot and are left alone by ``restore``.

Besides keys and boards a store keeps a **lexical index** (``index_put``,
``index_remove``, ``index_order``, ``index_stats``, ``index_search``,
``index_search_many``, ``index_lowest``, ``index_drop``): namespaces of documents with term counts,
lengths and an order, found term → documents without reading every document
(:mod:`tmy.store.textindex` says how; memory recall and the knowledge base use
it). A snapshot carries every index document as a pseudo-entry
(``tmy/ix/<ns>/<doc>``) that ``restore`` puts back into the index.

The **format marker**: ``open`` writes ``{"format": STORE_FORMAT}`` at
:data:`FORMAT_KEY` when absent and refuses a store whose marker names a newer
format (written by a newer tmy), so an older tmy never misreads it. The marker
is not listed by ``keys``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from tmy.errors import StoreError
from tmy.store.leases import Lease
from tmy.store.textindex import POSTINGS_BUDGET, IndexDoc, IndexHits, IndexStats

R = TypeVar("R")

STORE_FORMAT = 1
"""The layout of the data this tmy writes; a store marked with a higher one is refused."""

FORMAT_KEY = "tmy/format"
"""The logical key of the format marker (``{"format": N}``): not listed, not snapshotted."""


def check_format(marker: Any, where: str) -> None:
    """Refuse a store whose format marker is newer than :data:`STORE_FORMAT` (or unreadable)."""
    found = marker.get("format") if isinstance(marker, dict) else None
    if isinstance(found, bool) or not isinstance(found, int):
        raise StoreError(
            f"{where}: the store format marker at {FORMAT_KEY!r} is unreadable ({marker!r}); "
            f'expected {{"format": {STORE_FORMAT}}}'
        )
    if found > STORE_FORMAT:
        raise StoreError(
            f"{where}: this store was written by a newer tmy (store format {found}; "
            f"this tmy reads format {STORE_FORMAT}): upgrade tmy"
        )


@dataclass(frozen=True)
class Snapshot:
    """Everything a store holds for the engine, as :meth:`Store.snapshot` read it.

    ``entries``: ``(key, value, ttl seconds left or None)``, sorted by key, values
    decoded (what ``get`` returns). ``ranks``: ``(board, member, score, name)``,
    sorted by board then member. ``point_in_time``: True when everything was read
    at one moment (SQLite: one read transaction; one Redis: one script, up to a
    size), False when read key by key (a Redis Cluster, or a Redis store over the
    one-script bound): each key's value and TTL agree, keys may be of different moments.
    """

    entries: list[tuple[str, Any, float | None]] = field(default_factory=list)
    ranks: list[tuple[str, str, float, str | None]] = field(default_factory=list)
    point_in_time: bool = field(default=True, compare=False)  # how it was read, not what


def rank_score(value: Any) -> float | None:
    """The board score a stored value gives: an int/float (not bool) as float, else None."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def score_out(score: float) -> float:
    """A score as handed out: an int when it is integral (``12``, not ``12.0``)."""
    if score.is_integer() and abs(score) < 2**53:
        return int(score)
    return score


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

    async def claim(self, key: str, ttl: float) -> bool:
        """Take ``key`` for ``ttl`` seconds: True for the first claim while it lasts.

        One statement on every backend (SQLite ``INSERT … ON CONFLICT … WHERE
        expired``, Redis ``SET NX PX``), so a message delivered twice, to one daemon
        or to two sharing the store, is claimed exactly once. A copy of the claim
        that a client library resends after a lost reply still answers True (each
        claim carries its own token). A key holding a value that never expires is
        taken for good. The key is an ordinary value key (``get`` sees it).

        A store may also offer ``claim_many(keys, ttl) -> list[bool]``: the same
        claims, decided in order, in one transaction (SQLite) or one pipeline
        (Redis), for a caller that gathered them itself (the chat adapters'
        first-delivery checks, :mod:`tmy.adapters.dedup`). It is optional: a caller
        claims one by one on a store without it.
        """

    async def keys(self, prefix: str) -> list[str]:
        """Every live logical key starting with ``prefix``, sorted by code point.

        ``prefix`` is literal: glob characters in it match only themselves.
        """

    async def snapshot(self) -> Snapshot:
        """Every live key (value and TTL left) and every board entry.

        Not leases, not the store's internal bookkeeping, not the format marker.
        SQLite: one read transaction (a point-in-time view, while other processes
        keep writing). Redis / Redis Cluster: each key's value and TTL are read
        together atomically (consistent per key, not across keys); SCAN-based,
        in batches.
        """

    async def restore(self, snapshot: Snapshot, *, replace: bool) -> int:
        """Write every entry of ``snapshot`` (with its TTL) and every board entry.

        ``replace=True`` first deletes every existing key and board (not leases,
        not the format marker); ``replace=False`` overwrites the keys and board
        entries present and keeps the others. Every value is checked by the codec
        before anything is written (too large: :class:`~tmy.errors.ValueRefused`
        naming the key). Written in batches; returns the number of key/value
        entries written.
        """

    # -- leaderboard boards -----------------------------------------------------------------------

    async def rank_sync(
        self, board: str, member: str, key: str, name: str | None = None
    ) -> float | None:
        """Make ``board`` agree with the value at ``key``, atomically (one transaction / one
        script; on a Redis Cluster read, write, read again: see the module doc).

        An int/float (not bool) value upserts ``member`` with it as score (and
        ``name`` if given, else the name it had); anything else, or no value,
        removes ``member``. Returns the score set (an int when integral) or None.
        """

    async def rank_top(self, board: str, n: int) -> list[tuple[str, float, str | None]]:
        """The ``n`` highest ``(member, score, name)`` of ``board``: highest score first,
        ties by member descending; scores that are integral as int. O(log N + n)."""

    async def rank_of(self, board: str, member: str) -> int | None:
        """1 + the number of members with a strictly higher score (ties share a rank),
        or None when ``member`` is not on ``board``."""

    async def rank_entry(self, board: str, member: str) -> tuple[float, str | None] | None:
        """``member``'s (score, name) on ``board``, or None when absent."""

    async def rank_above(self, board: str, score: float) -> int:
        """How many members of ``board`` have a score strictly above ``score``."""

    # -- lexical index (tmy.store.textindex) ------------------------------------------------------

    async def index_put(self, ns: str, docs: Sequence[IndexDoc]) -> None:
        """Add or replace ``docs`` in namespace ``ns`` with its statistics: one transaction /
        one recorded script; O(the documents' terms), whatever the namespace holds."""

    async def index_remove(self, ns: str, docs: Sequence[str]) -> int:
        """Remove the documents ``docs`` of ``ns`` (absent ones ignored); how many were there."""

    async def index_order(self, ns: str, orders: Mapping[str, float]) -> None:
        """Set the order (eviction order, lowest first) of those of ``orders`` that exist."""

    async def index_stats(self, ns: str, terms: Sequence[str] = ()) -> IndexStats:
        """Document count, total length and each of ``terms``' document count."""

    async def index_search(
        self, ns: str, terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> IndexHits:
        """The statistics and a bounded set of candidates holding ``terms``, each with its
        length and the counts of the terms it holds; rare terms read whole, common ones
        only probed (:func:`tmy.store.textindex.plan`). One read transaction / one script."""

    async def index_search_many(
        self, namespaces: Sequence[str], terms: Sequence[str], *, budget: int = POSTINGS_BUDGET
    ) -> list[IndexHits]:
        """:meth:`index_search` of each of ``namespaces``, in order: one read transaction on
        SQLite, one round trip on one Redis (memory recall searches three owners at once)."""

    async def index_lowest(
        self, ns: str, n: int, *, term: str | None = None
    ) -> list[tuple[str, float]]:
        """The ``n`` documents of lowest order (only those holding ``term``, if given) with
        their order, lowest first (ties by id)."""

    async def index_drop(self, ns: str) -> int:
        """Remove every document of ``ns``; how many there were."""
