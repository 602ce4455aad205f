"""What every backend's ``restore`` checks before it writes anything.

A snapshot may come from a file (a backup) rather than from a store, so its
entries are checked as any write is: keys by the codec's key check, values
encoded (JSON-able, under the target store's ``max_value_bytes``, the refusal
naming the key), TTLs positive; board entries need a string board and member, a
finite number as score and a string or None as name. All of it is checked
first, so a refused snapshot leaves the store as it was.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from tmy.errors import ValueRefused
from tmy.store.base import FORMAT_KEY, Snapshot
from tmy.store.codec import check_key, check_ttl, encode

T = TypeVar("T")

BATCH = 500
"""Entries written per transaction / pipeline by ``restore`` (and keys read per
script by a Redis ``snapshot``)."""

Row = tuple[str, bytes, float | None]
"""A checked entry: (key, encoded value, ttl seconds or None)."""

RankRow = tuple[str, str, float, str | None]


def encoded_entries(snapshot: Snapshot, limit: int) -> list[Row]:
    """``snapshot``'s entries, checked and encoded for a store whose limit is ``limit``.

    The format marker, should a snapshot carry one, is left out: the target store
    keeps its own.
    """
    rows: list[Row] = []
    for entry in snapshot.entries:
        try:
            key, value, ttl = entry
        except (TypeError, ValueError):
            raise ValueRefused(
                f"a snapshot entry is (key, value, ttl), not {entry!r:.80}"
            ) from None
        check_key(key)
        if key == FORMAT_KEY:
            continue
        rows.append((key, encode(value, key, limit), None if ttl is None else check_ttl(ttl)))
    return rows


def checked_ranks(snapshot: Snapshot) -> list[RankRow]:
    """``snapshot``'s board entries, checked (scores as float)."""
    rows: list[RankRow] = []
    for entry in snapshot.ranks:
        try:
            board, member, score, name = entry
        except (TypeError, ValueError):
            raise ValueRefused(
                f"a board entry is (board, member, score, name), not {entry!r:.80}"
            ) from None
        if not isinstance(board, str) or not board or not isinstance(member, str):
            raise ValueRefused(f"a board entry needs a board id and a member: {entry!r:.80}")
        check_key(board)
        number = score if isinstance(score, int | float) and not isinstance(score, bool) else None
        if number is None or not math.isfinite(number):
            raise ValueRefused(
                f"board {board!r} member {member!r}: score {score!r} is not a number"
            )
        if name is not None and not isinstance(name, str):
            raise ValueRefused(f"board {board!r} member {member!r}: name {name!r} is not a string")
        rows.append((board, member, float(number), name))
    return rows


def batches(items: Sequence[T], size: int = BATCH) -> Iterator[Sequence[T]]:
    """``items`` in slices of ``size``."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def sorted_snapshot(
    entries: list[tuple[str, Any, float | None]],
    ranks: list[RankRow],
    *,
    point_in_time: bool = True,
) -> Snapshot:
    """A :class:`Snapshot` with entries sorted by key and board entries by (board, member)."""
    entries.sort(key=lambda e: e[0])
    ranks.sort(key=lambda r: (r[0], r[1]))
    return Snapshot(entries, ranks, point_in_time)
